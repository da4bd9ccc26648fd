"""Routing scorers: each one small pure function of the candidate views.

A scorer takes the candidates (already filtered and marked, see policies/routing.py)
and the model's `SaturationDetector`, and gives each candidate a score in [0, 1],
higher is better, or None where it has no signal for that backend (a runtime that
reports no queue, a load reading too old to trust, no prefix index). A profile
(policies/scoring.py) weighs the scores and adds them up. None is not a zero: it
is replaced by the mean of the other candidates' scores, so a missing signal
neither helps nor hurts a backend.

* `queue`: the runtime's own waiting requests, as the distance from the
  saturation threshold: 0 waiting scores 1, `queue_depth` or more scores 0.
* `kv`: the runtime's KV-cache use, likewise against its threshold (0.8).
* `inflight`: the gateway's own in-flight requests per unit of weight, as a
  ratio to the least loaded: (min + 1) / (x + 1). Exact and instant, where the
  runtime's signals are read every 2 s.
* `backlog`: the prefill this request would wait for on the backend, per unit
  of weight: the uncached prompt tokens of the requests the gateway routed
  there whose first event has not come back (gateway/serving/dispatch.py holds them),
  plus its own (its prompt less what the backend holds). A runtime prefills in
  turn, so this is the backend's time to first token in tokens; the in-flight
  count cannot tell a backend computing a cold 550-token prompt from one
  decoding a warm one. Scored against the least, on a scale:
  1 - min(x - least, S) / S, S = `BACKLOG_SCALE_TOKENS` (512, about a cold
  prefill of a long shared system prompt: 32 blocks), so a backend that would
  make the request wait one such prefill longer than the best scores 0.
* `prefix_approx`, `prefix_precise`: the fraction of the request's leading
  prompt blocks the backend holds, estimated from what was routed there
  (policies/prefix_index.py) or read from the runtime's KV-cache events
  (policies/kv_index.py).
* `prefix`: the precise fraction where the backend publishes KV events, the
  approximate one elsewhere.
* `session`: 1 for the backend that holds the request's conversation.
* `weight`: the configured static weight, relative to the largest.

Why the `blended` profile weighs them as it does:

* prefix 3, queue 2, kv 2 are the Kubernetes Gateway API Inference Extension's
  default profile. Keeping its ratios means an operator who tuned one knows the
  other. The load signals together outweigh the prefix: llm-d measured that
  routing on the prefix alone overloads the replicas holding hot prefixes (about
  55% of requests succeeded, against all of them with load scorers added).
* inflight 2: the runtime's queue and KV readings are up to 2 s old, so between
  two reads every request would see the same numbers and pile onto one backend;
  the gateway's own count moves with every dispatch and breaks that herd.
* session 10: more than all the others together (3 + 2 + 2 + 2 = 9), so the
  backend holding a conversation wins whenever it is a candidate at all; health,
  ejection and saturation still move the conversation, because they are filters
  and the saturated-last partition, not scores.
* weight 0: the static weight already counts through in-flight per weight and
  through the bounded-load limit (policies/scoring.py).

Why the `precise` profile weighs them otherwise (prefix 6, queue 2, kv 2,
inflight 2, backlog 6, session 19; load factor 2), for pools whose runtimes
publish KV events (the native engine, vLLM and SGLang with `kv_events`):

* The blended profile's argument for letting load outweigh the prefix is that
  an approximate index guesses: it may send a request to a backend that no
  longer holds its prefix. A KV-event index knows (and a routed request's blocks
  are expected on its backend until the runtime confirms them,
  policies/kv_index.py), so a match is a prefill saved for certain: for a long
  shared system prompt most of the request's TTFT, and compute every other
  request on that backend no longer waits behind. Measured on the routing bench
  (docs/bench/routing/): with the blended weights the precise profile found
  fewer cached tokens than prefix affinity, which ignores load altogether.
* So the prefix dominates until a backend is really loaded: a whole match (6 x
  0.9 or more) outweighs what the queue, KV and in-flight scorers take off a
  loaded backend short of the saturation thresholds (queue 5, KV 0.8; 4
  waiting, KV at 0.6 and twice the others in flight take 3.7), and past them
  the saturated-last partition takes over (the backlog, below, is the one
  exception); the load scorers decide among backends whose matches are close
  (a cold prefix goes to the least loaded backend, a prefix two backends hold
  to the less loaded one), and against a partial match (half a prompt: 3).
* Load factor 2 above a floor of 4 in flight, not 1.25 from the first: bounded
  load is what keeps one hot prefix off a single backend at once (the queue and
  KV readings are up to 2 s old), but with few requests in flight the share is
  mostly rounding: at 1.25 with three backends and two in flight, a backend
  holding one of them is past its share; at 2 with three in flight, one holding
  two is. Each such spill sends a prefix to a backend that must compute it
  (and that then spills again, for the conversation's next turn), which the
  bench measured as the precise profile's slowest requests (TTFT p99 about 350 ms
  against about 100 ms without spills, on a quiet machine). Four in flight is
  light load for any batching runtime, so below it no backend is past its share;
  above it one backend holds at most twice its share (two thirds of three
  backends' work), the overflow going to the next best, which then holds the
  prefix too.
* backlog 6: where the matches tie (a prompt no backend holds, a system prompt
  every backend holds) the backend with the least prefill ahead wins, before
  the in-flight count: at light load every backend has a request or so in
  flight and the in-flight scores tie, while one of them is computing a cold
  prompt and another only a warm turn. Measured on the routing bench at 5
  sessions/s: without it, a new prompt went to a device with about 237 ms of
  prefill ahead rather than one with 32 ms, and took about 470 ms (one request
  a run over the 300 ms SLO; none with it). Where the matches differ, the
  request's own prefill is in the sum, so the holder of a prompt already
  scores better by what the match saves; it loses the prompt only when the
  prefill queued ahead of it exceeds that saving by nearly S (5.6 of a whole
  match against 6 x (excess / S)): at 18 sessions/s, at the start, the holder
  of a cold system prompt had two cold prefills queued (1,176 tokens to wait
  for) while a backend finishing a warm turn would have computed the prompt in
  608; those that waited (360-450 ms) were most of the profile's requests over
  the SLO (5 a run before this scorer, 6 with a first version that scored the
  backlog alone, as a ratio, at weight 2, which no backlog could make give up
  a whole match; 2 now: the start's fourth cold prompt, when every device was
  computing one, and a request of its prompt routed while the other devices'
  cold prefills, nearly done, still counted in full: the backlog does not know
  how far a prefill has got). A difference smaller than that (a few warm
  turns, a holder computing the prompt's own first prefill) leaves the prompt
  where it is cached: a cold placement costs the same device time and warms a
  second copy. Not in the blended profile: its uncached estimate would rest on
  the approximate index and on four characters a token, and it is measured
  only where the runtime publishes KV events.
* session 19: more than the others together (6 + 2 + 2 + 2 + 6 = 18), as in the
  blended profile; where the runtime's blocks cannot be named (a text prompt to
  vLLM) the session still keeps a conversation in place.
"""

from __future__ import annotations

from collections.abc import Callable

from policies.routing import BackendView
from policies.saturation import SaturationDetector

# The excess of prefill to wait for (in prompt tokens) that scores 0; see `backlog` above.
BACKLOG_SCALE_TOKENS = 512.0

Scorer = Callable[[list[BackendView], SaturationDetector], list[float | None]]


def queue(backends: list[BackendView], detector: SaturationDetector) -> list[float | None]:
    limit = detector.queue_depth
    return [
        None if b.load is None or b.load.waiting is None else 1.0 - min(max(b.load.waiting, 0), limit) / limit
        for b in backends
    ]


def kv(backends: list[BackendView], detector: SaturationDetector) -> list[float | None]:
    limit = detector.kv_cache_utilization
    return [
        None if b.load is None or b.load.kv_usage is None else 1.0 - min(max(b.load.kv_usage, 0.0), limit) / limit
        for b in backends
    ]


def inflight(backends: list[BackendView], detector: SaturationDetector) -> list[float | None]:
    per_weight = [b.inflight / b.weight for b in backends]
    least = min(per_weight, default=0.0)
    return [(least + 1.0) / (x + 1.0) for x in per_weight]


def backlog(backends: list[BackendView], detector: SaturationDetector) -> list[float | None]:
    wait = [(b.backlog_tokens + (b.prefill_tokens or 0)) / b.weight for b in backends]
    least = min(wait, default=0.0)
    return [1.0 - min(x - least, BACKLOG_SCALE_TOKENS) / BACKLOG_SCALE_TOKENS for x in wait]


def prefix_approx(backends: list[BackendView], detector: SaturationDetector) -> list[float | None]:
    return [b.prefix_approx for b in backends]


def prefix_precise(backends: list[BackendView], detector: SaturationDetector) -> list[float | None]:
    return [b.prefix_precise for b in backends]


def prefix(backends: list[BackendView], detector: SaturationDetector) -> list[float | None]:
    return [b.prefix_approx if b.prefix_precise is None else b.prefix_precise for b in backends]


def session(backends: list[BackendView], detector: SaturationDetector) -> list[float | None]:
    return [1.0 if b.session_owner else 0.0 for b in backends]


def weight(backends: list[BackendView], detector: SaturationDetector) -> list[float | None]:
    heaviest = max((b.weight for b in backends), default=1.0)
    return [b.weight / heaviest for b in backends]


SCORERS: dict[str, Scorer] = {
    "queue": queue,
    "kv": kv,
    "inflight": inflight,
    "backlog": backlog,
    "prefix": prefix,
    "prefix_approx": prefix_approx,
    "prefix_precise": prefix_precise,
    "session": session,
    "weight": weight,
}

BLENDED: dict[str, float] = {"prefix": 3.0, "queue": 2.0, "kv": 2.0, "inflight": 2.0, "session": 10.0}
# `prefix`: precise where the runtime publishes KV events, approximate elsewhere (a text prompt to vLLM).
PRECISE: dict[str, float] = {
    "prefix": 6.0,
    "queue": 2.0,
    "kv": 2.0,
    "inflight": 2.0,
    "backlog": 6.0,
    "session": 19.0,
}
PRECISE_LOAD_FACTOR = 2.0
PRECISE_LOAD_FLOOR = 4


def filled(scores: list[float | None]) -> list[float]:
    """`scores` with each None replaced by the mean of the known ones (0 when none is known)."""
    known = [s for s in scores if s is not None]
    if len(known) == len(scores):
        return scores  # type: ignore[return-value]
    mean = sum(known) / len(known) if known else 0.0
    return [mean if s is None else s for s in scores]
