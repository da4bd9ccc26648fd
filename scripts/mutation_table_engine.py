"""The mutation table's part for the engine's core modules judged by unit tests of their own
(merged into scripts/mutation_table.py's MODULES and NOTES): each module and the fast
in-process tests that judge it, without a model load per mutant where the module needs none."""

from __future__ import annotations

ENGINE_MODULES: dict[str, list[str]] = {
    # its own tests on hand-made logits; test_sampling.py shows the same through a model, seconds a mutant
    "engine/sampler.py": ["tests/engine/test_sampler_mutants.py"],
    "engine/metrics.py": ["tests/engine/test_metrics*.py"],
    "engine/sequence.py": ["tests/engine/test_sequence.py", "tests/engine/test_scheduler*.py"],
    # a scripted grammar engine (error_of); the plan's tests reach them through llguidance
    "engine/structured/errors.py": ["tests/engine/test_structured_locate.py"],
    "engine/structured/locate.py": ["tests/engine/test_structured_locate.py"],
    "engine/structured/schemas.py": ["tests/engine/test_structured_schemas.py"],
    "engine/structured/vocab.py": ["tests/engine/test_structured_vocab.py"],
    # the plan's tests compile through llguidance on a tiny tokenizer (no model); the engine's and the
    # adapter's structured tests load a model and generate, seconds a mutant
    "engine/structured/plan.py": ["tests/engine/test_structured_plan*.py"],
    "engine/structured/grammars.py": [
        "tests/engine/test_structured_grammars.py",
        "tests/engine/test_structured_plan*.py",
    ],
    # the tool-call property tests and the promises' engine runs are left out: a minute or more per mutant here
    "engine/text/tool_parser.py": ["tests/engine/test_text_tool_parser*.py"],
    "engine/text/hermes_format.py": ["tests/engine/test_text_forced_tool_calls.py"],
    "engine/weights.py": ["tests/engine/test_weights.py"],
    # test_text_tokenizer.py renders through a checkpoint's tokenizer and compares with transformers
    "engine/text/chat_template.py": ["tests/engine/test_text_chat_template.py"],
    # test_pooling.py loads a model and compares with transformers, seconds a mutant
    "engine/pooling.py": ["tests/engine/test_pooling_mutants.py"],
    # test_text_tokenizer_classes.py compares with transformers' tokenizers, seconds a case
    "engine/text/tokenizer_class.py": ["tests/engine/test_text_tokenizer_class_mutants.py"],
    "engine/config.py": ["tests/engine/test_config.py"],
    # a stand-in builder; test_make_tiny.py builds the real model, seconds a run
    "engine/builtin.py": ["tests/engine/test_builtin.py"],
    # tokenizers built by hand; test_text_tokenizer.py compares with transformers on the tiny model
    "engine/text/tokenizer.py": ["tests/engine/test_text_tokenizer_mutants.py"],
    # the tiny model's tokenizer, no model run; the engine's structured tests generate, seconds a mutant
    "engine/structured/mask_provider.py": ["tests/engine/test_structured_mask_provider.py"],
    "engine/text/tool_call_stage.py": [
        "tests/engine/test_text_tool_call_stage.py",
        "tests/engine/test_text_forced_tool_calls.py",
    ],
    # its bounds on a bare pool, and the pool under the native adapter on a tiny model made once per run; the
    # adapter's other tests reach it through a model load per test, about 30 s a mutant here
    "adapters/native_work.py": ["tests/adapters/test_native_work.py", "tests/engine/test_native_text_work.py"],
}

ENGINE_NOTES: dict[str, str] = {
    "adapters/native_work.py": "A first run (2026-12-03) 69/93; its survivors then run by name against the tests added "
    "(tests/adapters/test_native_work.py: refusals' words and count, cancellation before a start, a piece passed over "
    "as a worker frees up, the workers' bound, a failing piece). 28 of the kills are timeouts (load ~3 to 11): a mutant "
    "that loses a worker's finish leaves a piece waiting.",
    "adapters/native_choice.py": "Judged by the native tests (tests/engine/test_native_*.py: module-scoped engines on "
    "the tiny model, about 1 s a mutant at load 9); test_native_choice_mutants.py feeds scripted engine outputs through the real "
    "tokenizer (the final stop token, what a finish releases, logprobs with and without text, the tool stage a request "
    "gets, an unknown finish reason). 70.8% on a first run (2026-12-03) before it. tests/conftest.py gives a "
    "forked test process a fresh text-work pool: mutmut forks each mutant's run, and a pool made before the fork has no "
    "threads after it (every mutant reaching it hung to its timeout, about 30 s).",
    "adapters/native_oneshot.py": "Judged by the native tests; test_native_oneshot_mutants.py pins the context cap by "
    "bytes at, below and above its boundary (ASCII, UTF-8, lone surrogates, text parts), /tokenize's template arguments, "
    "special tokens and continue_final_message (a second tokenizer of the same vocabulary adds a BOS and shows its "
    "template's arguments), /detokenize's vocabulary bounds and each call's tenant share of the text work. 94.2% on a "
    "first run (2026-12-03) before its last tests.",
    "adapters/native.py": "Judged by the native tests; test_native_adapter_mutants.py (starting once or failing to, the "
    "load, the prefix-cache events, the prompts' ids kept and reused, ROUTE_TEXT_BYTES at, below and above, echo, "
    "priority and engine ids, the engine's exceptions), test_native_params_mutants.py (each sampling parameter as the "
    "engine gets it, the context and vocabulary bounds with their messages, special tokens on a BOS tokenizer) and "
    "test_native_structured_mutants.py (response_format, forced calls, the grammar library missing). 539/603 on a first "
    "run (2026-12-03, 1047 s at load 9 to 11) before the last of them; run again whole with them.",
    "engine/sampler.py": "Judged by tests/engine/test_sampler_mutants.py (hand-made logits, no model). 80.3% on "
    "2026-12-02 with 75 survivors; the tensors built from Python values now take the row's dtype and device from it "
    "(new_tensor, list indices), so the device and dtype arguments that changed nothing on CPU are gone. The "
    "survivors left (docs/mutation/survivors/m1.toml) are dim +1 on 2-D tensors and the generator's, the positions' "
    "and the grammar mask's device, which only a GPU run tells apart.",
    "engine/gguf_export.py": "61/270 on a trial run (2026-12-03): export() was reached only by a llama.cpp-tier "
    "test (the gguf package is absent from the dev venv). tests/engine/test_gguf_export_mutants.py runs export() and "
    "main() against a recording stand-in for gguf's writer: every metadata value and its type, the defaults, each "
    "tensor's name, order, dtype, shape and permuted rows, the refusals' words.",
    "engine/model.py": "Judged by tests/engine/test_model_mutants.py (tiny models built once per module; every logits "
    "row the engine samples from compared with transformers' at that position, through several decode and prefill "
    "groups, chunks, biases, a large norm epsilon, scaled rope at its boundaries); test_engine_greedy.py compares "
    "greedy tokens, which hide a logit off by less than the top two's gap, and costs seconds a mutant.",
    "engine/model_runner.py": "Judged by tests/engine/test_model_runner_mutants.py (dtype names, pool sizing at, "
    "below and above a block and the default's cap, a block copy, an empty step, bf16, the grouping's boundaries "
    "and costs) and test_model_mutants.py (the logits the batches give, against transformers).",
    "engine/llm_engine.py": "Judged by tests/engine/test_llm_engine_mutants.py (a tiny model made once per module; "
    "tokens forced by logit_bias): the context length, each refusal's words at, below and above its bound, a "
    "step's outputs and counts, the grammar prefetch, forks with and without a block to copy into, when a choice "
    "stops, embeddings, stats and the integrity check. test_engine_greedy.py and test_async_engine.py reach it "
    "through larger models, seconds a mutant.",
    "engine/async_engine.py": "Judged by tests/engine/test_async_engine_mutants.py (a tiny model made once per "
    "module): streams and their ends, an abort's closing outputs, priorities, the thread, an engine failure, "
    "shutdown, the metrics and their name, the embedding passes. 45 of its kills are timeouts at load under 2: a "
    "mutant that stops the stepping thread leaves a stream waiting. Two scripted runs ended at once with every "
    "mutant 'not run' (cause not found); the committed result is mutmut run by hand in the module's copy.",
    "engine/structured/__init__.py": "No mutants: the package's imports and __all__, none of which mutmut mutates; "
    "the 100% says nothing was measured.",
    "engine/text/__init__.py": "No mutants: a docstring only (the package imports nothing on purpose).",
    "engine/text/hermes_format.py": "No mutants: the module is the format's literals and dataclasses, none of which "
    "mutmut mutates; the 100% says nothing was measured (the forced reader's tests pin the literals).",
}

# (multiplier, constant) of the per-mutant timeout: a mutant handing llguidance a None schema hangs in it
ENGINE_TIMEOUTS: dict[str, tuple[float, float]] = {
    "engine/structured/plan.py": (3.0, 3.0),
    "engine/structured/grammars.py": (3.0, 3.0),
    # a mutant that loses a worker's finish leaves its piece waiting: 10x the run is minutes each
    "adapters/native_work.py": (3.0, 5.0),
    # a mutant that stops the stepping thread or loses a delivery leaves a stream waiting
    "engine/async_engine.py": (3.0, 5.0),
}
