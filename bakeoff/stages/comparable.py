"""Stage 2, comparable: whether a candidate's numbers may be ranked beside the
reference candidate's. The same probes go to both gateways and their answers are
compared:

- `tokenization`: each probe prompt's token ids (`POST /tokenize` through the gateway;
  where no backend serves it, the prompt's `usage.prompt_tokens`, counts only). Another
  tokenizer or revision is a `fail`: not comparable.
- `chat_template`: multi-message probes rendered by the chat template (`/tokenize` with
  `messages`, else the chat's `usage.prompt_tokens`), one chat with a system message and
  one without (templates that add a default system message differ only there). Another
  template is a `fail`.
- `greedy`: each probe prompt answered at temperature 0. Other tokens are a `warn`:
  another quality level (precision, quantization, kernels), ranked apart. Replacement
  characters (U+FFFD) at the end of an answer are not compared: a last token cut inside
  a UTF-8 sequence is shown as U+FFFD by some runtimes (the native engine) and held back
  by others (vLLM's incremental detokenizer), for the same tokens.
- `output_length`: whether the candidate produces exactly the asked output length
  (`ignore_eos` and `min_tokens`, vLLM's and llama.cpp's extensions, passed through);
  where it does not, the lengths are measured and latencies normalised per output token,
  and the check says so.

`run(target, settings, budget_s, reference=None)`: the reference is the reference
candidate's own comparable result (its recorded probes, read back from its `reference`
check), or the reference candidate itself, asked live. Without one (or when the target
is the reference) the probes are recorded and nothing is compared.
"""

from __future__ import annotations

import asyncio
import time
from dataclasses import asdict, dataclass, field
from typing import Any

from pydantic import Field

from bakeoff.stages import Budget, Probe, StageSettings, bounded, error_text, first_choice, usage_of, user
from bakeoff.verdict import CandidateTarget, Check, StageResult

DEFAULT_PROMPTS = (
    "Explain in two sentences what a railway switchyard does.",
    "List three prime numbers and say why they are prime.",
    "Translate 'good morning, how are you?' into French.",
)
_TURNS = (
    {"role": "user", "content": "What is a hump yard?"},
    {"role": "assistant", "content": "A yard where cars roll by gravity over a hill onto sorting tracks."},
    {"role": "user", "content": "And a flat yard?"},
)
DEFAULT_CHATS = (({"role": "system", "content": "You are a terse assistant for railway engineers."}, *_TURNS), _TURNS)
FORCING = {"ignore_eos": True}  # min_tokens is added alongside, as the asked length


class Settings(StageSettings):
    prompts: list[str] = Field(default_factory=lambda: list(DEFAULT_PROMPTS), min_length=1)
    chats: list[list[dict[str, str]]] = Field(
        default_factory=lambda: [[dict(m) for m in chat] for chat in DEFAULT_CHATS], min_length=1
    )
    greedy_tokens: int = Field(16, ge=1, le=1024)
    output_tokens: int = Field(64, ge=2, le=4096)  # the output length asked of the length probe


@dataclass
class Answers:
    """What one candidate answered to the probes (None: it could not be asked)."""

    prompt_tokens: list[list[int] | int | None] = field(default_factory=list)  # ids, else a usage count
    chat_tokens: list[list[int] | int | None] = field(default_factory=list)
    greedy: list[str | None] = field(default_factory=list)
    length: dict[str, Any] = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)


Reference = StageResult | CandidateTarget | None


async def run(target: CandidateTarget, settings: Settings, budget_s: float, reference: Reference = None) -> StageResult:
    """`reference`: the reference candidate's own comparable result (its recorded probes:
    the run stops a candidate before starting the next), or the reference itself, live;
    None when `target` is the reference."""
    started = time.monotonic()
    budget = Budget(budget_s)

    def result(*checks: Check) -> StageResult:
        return StageResult("comparable", target.name, checks, round(time.monotonic() - started, 3))

    ref_name = reference.candidate if isinstance(reference, StageResult) else getattr(reference, "name", None)
    if ref_name == target.name:
        reference, ref_name = None, None
    stored: Answers | None = None
    if isinstance(reference, StageResult):
        stored = recorded_answers(reference, settings)
        if stored is None:
            why = f"the reference {ref_name} has no probes recorded with these settings: nothing to compare with"
            return result(Check("reference", "skip", why))
    live = reference if isinstance(reference, CandidateTarget) else None
    outcome: list[tuple[Answers, Answers | None]] = []

    async def collect() -> Check:
        async with Probe(target) as mine:
            if live is None:
                outcome.append((await ask(mine, settings), stored))
                return Check("probes", "pass", "asked")
            async with Probe(live) as theirs:
                both = await asyncio.gather(ask(mine, settings), ask(theirs, settings), return_exceptions=True)
        for answered in both:
            if isinstance(answered, BaseException):
                raise answered
        outcome.append((both[0], both[1]))  # type: ignore[arg-type]
        return Check("probes", "pass", "asked")

    asked = await bounded("probes", collect, budget.left())
    if not outcome:
        return result(asked)
    mine_answers, ref_answers = outcome[0]
    if ref_answers is None or ref_name is None:
        return result(*recorded(mine_answers, settings))
    return result(
        tokenization(mine_answers, ref_answers, ref_name),
        chat_template(mine_answers, ref_answers, ref_name),
        greedy(mine_answers, ref_answers, ref_name, settings),
        output_length(mine_answers, ref_answers),
    )


# ---- asking ---------------------------------------------------------------------------


async def ask(probe: Probe, settings: Settings) -> Answers:
    answers = Answers()
    for prompt in settings.prompts:
        answers.prompt_tokens.append(await _prompt_tokens(probe, prompt, answers))
    for chat in settings.chats:
        answers.chat_tokens.append(await _chat_tokens(probe, chat, answers))
    for prompt in settings.prompts:
        resp = await probe.chat(user(prompt), temperature=0, max_tokens=settings.greedy_tokens, seed=0)
        if resp.status_code == 200:
            answers.greedy.append((first_choice(resp).get("message") or {}).get("content") or "")
        else:
            answers.greedy.append(None)
            answers.notes.append(f"greedy probe: {error_text(resp)}")
    answers.length = await _length(probe, settings.output_tokens)
    return answers


async def _prompt_tokens(probe: Probe, prompt: str, answers: Answers) -> list[int] | int | None:
    resp = await probe.post("/tokenize", {"prompt": prompt})
    if resp.status_code == 200 and isinstance(resp.json().get("tokens"), list):
        return [int(t) for t in resp.json()["tokens"]]
    answers.notes.append(f"/tokenize: {error_text(resp)}; usage counts used")
    resp = await probe.post("/v1/completions", {"prompt": prompt, "max_tokens": 1})
    count = usage_of(resp).get("prompt_tokens") if resp.status_code == 200 else None
    return count if isinstance(count, int) else None


async def _chat_tokens(probe: Probe, messages: list[dict[str, str]], answers: Answers) -> list[int] | int | None:
    resp = await probe.post("/tokenize", {"messages": messages, "add_generation_prompt": True})
    if resp.status_code == 200 and isinstance(resp.json().get("tokens"), list):
        return [int(t) for t in resp.json()["tokens"]]
    answers.notes.append(f"/tokenize with messages: {error_text(resp)}; usage counts used")
    resp = await probe.chat(messages, max_tokens=1)
    count = usage_of(resp).get("prompt_tokens") if resp.status_code == 200 else None
    return count if isinstance(count, int) else None


async def _length(probe: Probe, wanted: int) -> dict[str, Any]:
    """The length probe: forced where the runtime takes the extensions, else as it comes."""
    text = user("Write a long story about a freight train crossing the mountains.")
    forcing = {**FORCING, "min_tokens": wanted}
    resp = await probe.chat(text, temperature=0, max_tokens=wanted, **forcing)
    forced = resp.status_code == 200
    if not forced:
        refused = error_text(resp)
        resp = await probe.chat(text, temperature=0, max_tokens=wanted)
    if resp.status_code != 200:
        return {"asked": wanted, "error": error_text(resp)}
    got = usage_of(resp).get("completion_tokens")
    out: dict[str, Any] = {"asked": wanted, "completion_tokens": got, "extensions_taken": forced}
    if not forced:
        out["refused"] = refused
    return out


# ---- comparing ------------------------------------------------------------------------


def _as_counts(values: list[Any]) -> list[int | None]:
    return [len(v) if isinstance(v, list) else v for v in values]


def tokenization(mine: Answers, ref: Answers, ref_name: str) -> Check:
    pairs = list(zip(mine.prompt_tokens, ref.prompt_tokens))
    if any(a is None or b is None for a, b in pairs):
        return Check("tokenization", "skip", "a probe prompt could not be tokenized: " + "; ".join(mine.notes[:2]))
    by_ids = all(isinstance(a, list) and isinstance(b, list) for a, b in pairs)
    mine_v: list[Any] = [a for a, _ in pairs] if by_ids else _as_counts([a for a, _ in pairs])
    ref_v: list[Any] = [b for _, b in pairs] if by_ids else _as_counts([b for _, b in pairs])
    how = "token ids (/tokenize)" if by_ids else "prompt token counts (usage)"
    evidence = {"by": how, "candidate": _as_counts(mine_v), "reference": _as_counts(ref_v)}
    differing = [i for i, (a, b) in enumerate(zip(mine_v, ref_v)) if a != b]
    if differing:
        detail = f"another tokenizer than {ref_name}'s: probe prompts {differing} differ in {how}; not comparable"
        return Check("tokenization", "fail", detail, evidence)
    return Check("tokenization", "pass", f"{len(pairs)} probe prompts: the same {how} as {ref_name}", evidence)


def chat_template(mine: Answers, ref: Answers, ref_name: str) -> Check:
    pairs = list(zip(mine.chat_tokens, ref.chat_tokens))
    if any(a is None or b is None for a, b in pairs):
        return Check("chat_template", "skip", "a chat probe could not be rendered: " + "; ".join(mine.notes[-2:]))
    by_ids = all(isinstance(a, list) and isinstance(b, list) for a, b in pairs)
    how = "token ids (/tokenize with messages)" if by_ids else "prompt token counts (usage)"
    mine_v: list[Any] = [a for a, _ in pairs] if by_ids else _as_counts([a for a, _ in pairs])
    ref_v: list[Any] = [b for _, b in pairs] if by_ids else _as_counts([b for _, b in pairs])
    evidence = {"by": how, "candidate": _as_counts(mine_v), "reference": _as_counts(ref_v)}
    differing = [i for i, (a, b) in enumerate(zip(mine_v, ref_v)) if a != b]
    if differing:
        detail = f"another chat template than {ref_name}'s: chat probes {differing} differ in {how}; not comparable"
        return Check("chat_template", "fail", detail, evidence)
    return Check("chat_template", "pass", f"{len(pairs)} chat probes render to the same {how} as {ref_name}", evidence)


def same_answer(a: str, b: str) -> bool:
    """The same greedy text, but for replacement characters at its end (a cut UTF-8 sequence)."""
    return a.rstrip("\ufffd") == b.rstrip("\ufffd")


def greedy(mine: Answers, ref: Answers, ref_name: str, settings: Settings) -> Check:
    if any(t is None for t in mine.greedy) or any(t is None for t in ref.greedy):
        return Check("greedy", "skip", "a greedy probe was not answered: " + "; ".join(mine.notes + ref.notes)[:300])
    pairs = zip(mine.greedy, ref.greedy)
    differing = [i for i, (a, b) in enumerate(pairs) if a is None or b is None or not same_answer(a, b)]
    evidence: dict[str, Any] = {"tokens": settings.greedy_tokens, "differing": differing}
    if differing:
        i = differing[0]
        evidence["first"] = {"prompt": settings.prompts[i], "candidate": mine.greedy[i], "reference": ref.greedy[i]}
        detail = (
            f"greedy answers differ from {ref_name}'s on {len(differing)} of {len(mine.greedy)} probes: "
            "a different quality level, ranked apart"
        )
        return Check("greedy", "warn", detail, evidence)
    return Check("greedy", "pass", f"the same greedy answers as {ref_name} on {len(mine.greedy)} probes", evidence)


def output_length(mine: Answers, ref: Answers) -> Check:
    length = mine.length
    evidence = {"candidate": length, "reference": ref.length}
    if "error" in length:
        return Check("output_length", "fail", f"the length probe was not answered: {length['error']}", evidence)
    got, asked = length.get("completion_tokens"), length["asked"]
    if not isinstance(got, int) or got < 1:
        return Check("output_length", "fail", f"the length probe reported {got!r} output tokens", evidence)
    if length["extensions_taken"] and got == asked:
        return Check(
            "output_length", "pass", f"forced: exactly {asked} output tokens (ignore_eos, min_tokens)", evidence
        )
    why = "the extensions were refused" if not length["extensions_taken"] else "the extensions were not honoured"
    detail = (
        f"not forced ({why}): {got} of {asked} asked tokens; output lengths are measured and "
        "latencies normalised per output token"
    )
    return Check("output_length", "pass", detail, {**evidence, "normalise": "per_output_token"})


def _probes(settings: Settings) -> dict[str, Any]:
    return settings.model_dump(mode="json")


def recorded(mine: Answers, settings: Settings) -> list[Check]:
    """The reference's own probes: what the others are compared with (`answers`, read back
    by `recorded_answers`), with the settings that asked them."""
    evidence = {
        "prompt_tokens": _as_counts(mine.prompt_tokens),
        "chat_tokens": _as_counts(mine.chat_tokens),
        "answers": asdict(mine),
        "probes": _probes(settings),
    }
    length = output_length(mine, mine)
    if any(t is None for t in [*mine.prompt_tokens, *mine.chat_tokens]):
        why = "its probes could not all be tokenized: " + "; ".join(mine.notes)
        return [Check("reference", "skip", why, evidence), length]
    return [Check("reference", "pass", "the reference: the others' probes are compared with these", evidence), length]


def recorded_answers(result: StageResult, settings: Settings) -> Answers | None:
    """The answers a reference's comparable result recorded with the same probe settings."""
    for check in result.checks:
        if check.name == "reference" and check.outcome == "pass" and check.evidence.get("probes") == _probes(settings):
            return Answers(**check.evidence["answers"])
    return None
