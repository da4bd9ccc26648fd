"""Grammar-constrained decoding for the native engine (issue 4).

`plan_structured(...)` turns a request's `response_format` / `tools` / `tool_choice`
into a compiled grammar (or None), raising `SchemaError` for schemas we cannot honour,
before anything is generated. `GrammarMask` is the per-request `allowed_tokens_fn`
the sampler applies; it computes each step's mask in a background thread while the
model runs (see mask_provider.py). The grammar engine is llguidance
(docs/structured-output.md says why).
"""

from engine.structured.errors import SchemaError
from engine.structured.mask_provider import GrammarMask
from engine.structured.plan import StructuredPlan, plan_structured
from engine.structured.vocab import grammar_tokenizer

__all__ = ["GrammarMask", "SchemaError", "StructuredPlan", "grammar_tokenizer", "plan_structured"]
