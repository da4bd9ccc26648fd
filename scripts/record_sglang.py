"""Records SGLang's own OpenAI answers, by running SGLang's HTTP layer on this CPU.

What runs is SGLang's: the FastAPI `app` of `sglang/srt/entrypoints/http_server.py`
(its routes, middleware and exception handlers), `OpenAIServingChat` and
`OpenAIServingCompletion` (request validation, chat template, tool-call parsing with
the `qwen` parser, response and SSE writing), and a real `TokenizerManager`
(tokenization, the context-length checks, `_handle_batch_output`, which turns the
scheduler's output into the `meta_info` the serving classes read). What is stubbed is
the GPU side only: the scheduler and detokenizer processes. A stub scheduler here
takes the `TokenizedGenerateReqInput` the tokenizer manager sends over SGLang's own
ZeroMQ channel and answers with `BatchStrOutput` messages over the same channel,
built with SGLang's own classes (`FINISH_MATCHED_TOKEN`, `FINISH_MATCHED_STR`,
`FINISH_LENGTH`, `FINISH_ABORT`). That is the exact boundary a GPU scheduler and its
detokenizer answer on, so everything on the wire is written by SGLang's code; the stub
only decides which text, token ids, counts, logprob values and finish each request
gets (our own, scripted per case below), which is the model's part. The model itself
is a made-up directory: a Qwen2 `config.json` (never loaded into weights) and a
word-level tokenizer with our own chat template, so prompt token counts are this
tokenizer's, not a real model's.

Re-run in a virtual environment of its own, $VENV, anywhere outside the repository
(SGLang is not a project dependency):

    python3 -m venv $VENV
    $VENV/bin/pip install --no-deps sglang==0.5.23
    $VENV/bin/pip install torch==2.13.0 triton fastapi uvicorn orjson msgspec \
        openai==2.8.0 pydantic jinja2 jsonschema partial_json_parser pybase64 requests \
        numpy psutil regex httpx packaging pillow pyzmq IPython aiohttp transformers dill \
        apache-tvm-ffi==0.1.11 sentencepiece==0.2.1 compressed_tensors gguf xgrammar \
        uvloop setproctitle einops soundfile python-multipart
    $VENV/bin/python scripts/record_sglang.py tests/adapters/recordings/sglang/v0.5.23

(`torch==2.13.0` is the CPU wheel; do not install torchvision: PyPI's build needs
CUDA torch, so this script stands in an empty module for it, which only multimodal
configs import; torchvision, if present, pulls a CUDA torch of several GB.) Installed
for the committed recordings: fastapi 0.165.0, starlette 1.10.0, pydantic 2.14.4,
msgspec 0.23.0, orjson 3.13.0, openai 2.8.0, transformers 5.24.0, pyzmq 27.3.0. The
validation message (`bad_request.json`) is FastAPI's text and follows its version.
Ids and `created` differ on every run; everything else is stable.

Why the stub cannot change the wire layout: it sits below the tokenizer manager,
which turns every message into `meta_info` itself (`_handle_batch_output`), and the
serving classes write the response from that. The stub's only freedom is the values a
scheduler may send (texts, ids, counts, logprobs, a finish reason from SGLang's own
`FINISH_*` classes, an `AbortReq` as `Scheduler._abort_on_queued_limit` builds it).
"""

from __future__ import annotations

import asyncio
import importlib.abc
import importlib.machinery
import json
import os
import sys
import tempfile
import types
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).parent))
from record_sglang_cases import CALL, CASES, CONTEXT, PIECES, SERVED, SGLANG_VERSION  # noqa: E402


class _Anything(types.ModuleType):
    """An empty stand-in module: any attribute is a callable that returns itself."""

    __version__ = "0.28.0"

    def __getattr__(self, name: str) -> Any:
        if name.startswith("__"):
            raise AttributeError(name)
        return _Whatever()


class _Whatever:
    def __init__(self, *a: Any, **k: Any) -> None:
        pass

    def __call__(self, *a: Any, **k: Any) -> _Whatever:
        return _Whatever()

    def __getattr__(self, name: str) -> _Whatever:
        return _Whatever()

    def __mro_entries__(self, bases: tuple) -> tuple:
        return (object,)


class _StandIn(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    """Answers imports of torchvision (only SGLang's multimodal configs use it)."""

    def find_spec(self, name: str, path: Any = None, target: Any = None) -> Any:
        if name.split(".")[0] == "torchvision":
            return importlib.machinery.ModuleSpec(name, self, is_package=True)
        return None

    def create_module(self, spec: Any) -> types.ModuleType:
        module = _Anything(spec.name)
        module.__path__ = []
        return module

    def exec_module(self, module: types.ModuleType) -> None:
        pass


def make_model_dir() -> str:
    from tokenizers import AddedToken, Tokenizer, models, pre_tokenizers

    folder = tempfile.mkdtemp(prefix="sglang-rec-model-")
    words = "what is a river tell me about rivers weather in lyon please write line on".split()
    special = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]
    vocab = {t: i for i, t in enumerate(["[UNK]", *special, *words])}
    tok = Tokenizer(models.WordLevel(vocab=vocab, unk_token="[UNK]"))
    tok.pre_tokenizer = pre_tokenizers.Whitespace()
    tok.add_special_tokens(special)
    pieces = sorted({p for ps in PIECES.values() for p in ps} | {CALL})
    tok.add_tokens([AddedToken(p, normalized=False, special=False) for p in pieces])
    tok.save(os.path.join(folder, "tokenizer.json"))
    # Our own minimal chat template (the tools are not rendered: the stub model does
    # not read the prompt).
    template = (
        "{% for m in messages %}<|im_start|>{{ m.role }}\n{{ m.content }}<|im_end|>\n{% endfor %}"
        "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
    )
    config = {"tokenizer_class": "PreTrainedTokenizerFast", "eos_token": "<|im_end|>", "pad_token": "<|endoftext|>"}
    Path(folder, "tokenizer_config.json").write_text(json.dumps({**config, "chat_template": template}))
    hf = {
        "architectures": ["Qwen2ForCausalLM"],
        "model_type": "qwen2",
        "hidden_size": 64,
        "intermediate_size": 128,
        "num_attention_heads": 4,
        "num_key_value_heads": 2,
        "num_hidden_layers": 1,
        "vocab_size": len(vocab) + len(pieces) + 8,
        "max_position_embeddings": 4096,
        "eos_token_id": vocab["<|im_end|>"],
        "torch_dtype": "float32",
    }
    Path(folder, "config.json").write_text(json.dumps(hf))
    return folder


def finish_of(kind: str, n_tokens: int, eos_id: int) -> dict[str, Any]:
    from sglang.srt.managers.schedule_batch import FINISH_LENGTH, FINISH_MATCHED_STR, FINISH_MATCHED_TOKEN

    if kind == "eos":
        return FINISH_MATCHED_TOKEN(matched=eos_id).to_json()
    if kind.startswith("stop:"):
        return FINISH_MATCHED_STR(matched=kind[5:]).to_json()
    return FINISH_LENGTH(length=n_tokens).to_json()


class StubScheduler:
    """Stands where SGLang's scheduler and detokenizer processes stand: reads the
    tokenized requests from the tokenizer manager's ZeroMQ channel and writes back the
    detokenizer's `BatchStrOutput` (text deltas, one token a step) or the scheduler's
    `AbortReq`, as those processes do."""

    def __init__(self, port_args: Any, tokenizer: Any) -> None:
        import zmq
        import zmq.asyncio
        from sglang.srt.utils.network import get_zmq_socket

        ctx = zmq.asyncio.Context(2)
        self.recv = get_zmq_socket(ctx, zmq.PULL, port_args.scheduler_input_ipc_name, False)
        self.send = get_zmq_socket(ctx, zmq.PUSH, port_args.tokenizer_ipc_name, False)
        self.tokenizer = tokenizer
        self.eos_id = tokenizer.convert_tokens_to_ids("<|im_end|>")
        self.answers: list[tuple[str, str]] = []
        self.logprobs = False
        self.cached = 0
        self.taken = 0

    def plan(self, answers: list[tuple[str, str]], logprobs: bool, cached: int) -> None:
        self.answers, self.logprobs, self.cached, self.taken = answers, logprobs, cached, 0

    async def run(self) -> None:
        from sglang.srt.managers.io_struct import (
            BatchTokenizedGenerateReqInput,
            TokenizedGenerateReqInput,
            async_sock_recv,
        )

        while True:
            obj = await async_sock_recv(self.recv)
            batch = obj.batch if isinstance(obj, BatchTokenizedGenerateReqInput) else [obj]
            for req in batch:
                if isinstance(req, TokenizedGenerateReqInput):
                    answer = self.answers[self.taken % len(self.answers)]
                    self.taken += 1
                    asyncio.get_running_loop().create_task(self.answer(req, *answer))

    async def answer(self, req: Any, pieces_key: str, finish: str) -> None:
        from array import array
        from http import HTTPStatus

        from sglang.srt.managers.io_struct import AbortReq, BatchStrOutput, async_sock_send

        await asyncio.sleep(0.01)
        if finish == "queue_full":
            # As Scheduler._abort_on_queued_limit writes it: the status an HTTPStatus,
            # which SGLang's default pickle IPC keeps (the serving code tests for it).
            reason = {
                "type": "abort",
                "status_code": HTTPStatus.SERVICE_UNAVAILABLE,
                "message": "The request queue is full.",
            }
            await async_sock_send(self.send, AbortReq(rid=req.rid, finished_reason=reason))
            return
        # A model's last token is the EOS, or the stop string's token: one more step
        # whose text the detokenizer leaves out (EOS skipped as special, a stop string
        # trimmed), so its delta is "" while completion_tokens counts it.
        steps = [(p, self.tokenizer.convert_tokens_to_ids(p)) for p in PIECES[pieces_key]]
        if finish == "eos":
            steps.append(("", self.eos_id))
        elif finish.startswith("stop:"):
            steps.append(("", self.tokenizer.convert_tokens_to_ids(finish[5:])))
        prompt = len(req.input_ids)
        for step, (piece, token) in enumerate(steps, start=1):
            last = step == len(steps)
            reason = finish_of(finish, step, self.eos_id) if last else None
            lp = [-0.25 * step] if req.return_logprob else None
            top = [[-0.25 * step, -1.5 - step]] if req.return_logprob and req.top_logprobs_num else None
            top_idx = [[token, self.eos_id]] if top else None
            # No prompt logprobs: the OpenAI routes do not ask for them (an empty list
            # per request, as the scheduler sends); the other fields stay unset.
            fields: dict[str, Any] = {name: [None] for name in NULLABLE_OUTPUT_FIELDS}
            fields.update({name: [[]] for name in NULLABLE_OUTPUT_FIELDS if name.startswith("input_")})
            fields.update(
                rids=[req.rid],
                finished_reasons=[reason],
                output_strs=[piece],
                output_ids=[array("i", [token])],
                prompt_tokens=[prompt],
                completion_tokens=[step],
                reasoning_tokens=[0],
                cached_tokens=[self.cached if self.cached < prompt else prompt - 1],
                output_token_logprobs_val=[lp],
                output_token_logprobs_idx=[[token] if lp else None],
                output_top_logprobs_val=[top],
                output_top_logprobs_idx=[top_idx],
                retraction_counts=[0],
            )
            await async_sock_send(self.send, BatchStrOutput(**fields))
            await asyncio.sleep(0.005)


NULLABLE_OUTPUT_FIELDS = (
    "input_token_logprobs_val",
    "input_token_logprobs_idx",
    "input_top_logprobs_val",
    "input_top_logprobs_idx",
    "input_token_ids_logprobs_val",
    "input_token_ids_logprobs_idx",
    "output_token_ids_logprobs_val",
    "output_token_ids_logprobs_idx",
    "output_token_entropy_val",
    "output_token_sampling_mask",
    "output_hidden_states",
    "routed_experts",
    "indexer_topk",
    "placeholder_tokens_idx",
    "placeholder_tokens_val",
)


def server_args(model_dir: str, cache_report: bool) -> Any:
    from sglang.srt.server_args import ServerArgs

    return ServerArgs(
        model_path=model_dir,
        device="cpu",
        tool_call_parser="qwen",
        served_model_name=SERVED,
        context_length=CONTEXT,
        enable_cache_report=cache_report,
    )


def sglang_package_dir() -> str:
    import sglang

    return str(Path(sglang.__file__).parent)


def writer_of(c: dict[str, Any], stream: bool) -> str:
    """The serving function that wrote the answer."""
    if c.get("writer") and not (c["name"] == "queue_full_stream"):
        return c["writer"]
    if c["path"] == "/v1/completions":
        return "OpenAIServingCompletion." + ("_generate_completion_stream" if stream else "_build_completion_response")
    return "OpenAIServingChat." + ("_generate_chat_stream" if stream else "_build_chat_response")


def record_of(c: dict[str, Any], status: int, content_type: str, raw: str) -> dict[str, Any]:
    stream = content_type.startswith("text/event-stream")
    # SGLang's validation message names the file of the route it failed in: that path
    # is this machine's, so it is written relative to the installed packages.
    raw = raw.replace(str(Path(sglang_package_dir()).parent) + "/", "<site-packages>/")
    writer = writer_of(c, stream)
    if writer.startswith("http_server.py"):
        module = ""
    elif writer.startswith("OpenAIServingBase"):
        module = "openai/serving_base.py: "
    else:
        module = "openai/serving_completions.py: " if c["path"] == "/v1/completions" else "openai/serving_chat.py: "
    out: dict[str, Any] = {
        "source": {
            "runtime": "sglang",
            "version": SGLANG_VERSION,
            "recorded_by": "scripts/record_sglang.py",
            "route": f"sglang/srt/entrypoints/http_server.py app, POST {c['path']}",
            "written_by": f"sglang/srt/entrypoints/{module}{writer}",
            "stub": "the scheduler and detokenizer processes: StubScheduler answers over SGLang's ZeroMQ "
            "channel with BatchStrOutput/AbortReq; a made-up word-level tokenizer and chat template",
            "server_args": {
                "served_model_name": SERVED,
                "context_length": CONTEXT,
                "tool_call_parser": "qwen",
                "enable_cache_report": bool(c.get("cache_report")),
            },
            "model_answers": [{"text": "".join(PIECES[k]), "finish": f} for k, f in c["answers"]],
            "wire_keys": True,
            "notes": c["note"],
        },
        "request": {"path": c["path"], "body": c["body"]},
        "status": status,
        "content_type": content_type,
        "raw": raw,
    }
    if stream:
        frames = [f for f in raw.split("\n\n") if f]
        out["events"] = [json.loads(f[6:]) if f[6:] != "[DONE]" else "[DONE]" for f in frames]
    else:
        out["response"] = json.loads(raw)
    return out


async def record(out_dir: Path) -> None:
    import httpx
    from sglang.srt.entrypoints import http_server
    from sglang.srt.managers.tokenizer_manager import ServerStatus, TokenizerManager
    from sglang.srt.parser.template_manager import TemplateManager
    from sglang.srt.runtime_context import publish
    from sglang.srt.server_args import PortArgs

    model_dir = make_model_dir()
    args = server_args(model_dir, cache_report=False)
    publish(args, role="tokenizer")
    port_args = PortArgs.init_new(args)
    tm = TokenizerManager(args, port_args)
    tm.max_req_input_len = CONTEXT
    templates = TemplateManager()
    templates.initialize_templates(tokenizer_manager=tm, model_path=model_dir)
    http_server.set_global_state(http_server._GlobalState(tm, templates, {"max_req_input_len": CONTEXT}))
    # What the app's lifespan does for the two routes recorded here.
    app = http_server.app
    app.state.openai_serving_completion = http_server.OpenAIServingCompletion(tm, templates)
    app.state.openai_serving_chat = tm.serving_chat_class(tm, templates)
    tm.server_status = ServerStatus.Up
    scheduler = StubScheduler(port_args, tm.tokenizer)
    task = asyncio.get_running_loop().create_task(scheduler.run())
    out_dir.mkdir(parents=True, exist_ok=True)
    transport = httpx.ASGITransport(app=app)
    async with httpx.AsyncClient(transport=transport, base_url="http://sglang", timeout=60) as client:
        for c in CASES:
            publish(server_args(model_dir, bool(c.get("cache_report"))), role="tokenizer")
            scheduler.plan(c["answers"], bool(c.get("logprobs")), cached=8 if c.get("cache_report") else 0)
            r = await client.post(c["path"], json=c["body"])
            rec = record_of(c, r.status_code, r.headers.get("content-type", ""), r.text)
            (out_dir / f"{c['name']}.json").write_text(json.dumps(rec, indent=1, ensure_ascii=False) + "\n")
            print(c["name"], r.status_code, r.text[:160].replace("\n", "|"))
    task.cancel()


def main() -> None:
    sys.meta_path.insert(0, _StandIn())
    out_dir = Path(sys.argv[1] if len(sys.argv) > 1 else "tests/adapters/recordings/sglang/v0.5.23")
    asyncio.run(record(out_dir))


if __name__ == "__main__":
    main()
