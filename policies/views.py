"""What routing knows about one backend at decision time, and the prefill a request
would add there."""

from __future__ import annotations

from dataclasses import dataclass

from adapters.base import Capabilities, LoadSnapshot
from policies.rollout_records import Track


@dataclass(slots=True)
class BackendView:
    """One backend as the pool sees it for one request. `saturated` is the pipeline's
    verdict, which replaces whatever a view came with. Not frozen: one is built per
    backend per decision, and a frozen dataclass takes three times as long to build;
    the steps never change a view, they replace it."""

    name: str
    weight: float = 1.0
    inflight: int = 0
    max_inflight: int | None = None
    healthy: bool = True
    load: LoadSnapshot | None = None  # its read_at says how old it is
    capabilities: Capabilities = Capabilities()
    adapter: str = "unknown"  # the runtime kind, named when it lacks a capability
    saturated: bool = False
    ejected: bool = False  # held out by the outlier detector (policies/ejection.py)
    track: Track = "stable"  # its group in a rollout (policies/filters.py `on_track`)
    # What the scorers read about this request here: the fraction of its leading prompt
    # blocks in the approximate and the KV-event index (None: no such index), and
    # whether this backend holds its conversation.
    prefix_approx: float | None = None
    prefix_precise: float | None = None
    session_owner: bool = False
    # The prefill backlog: uncached prompt tokens routed here whose first event is not
    # back yet, and what this request would add (None: not estimated).
    backlog_tokens: int = 0
    prefill_tokens: int | None = None


def uncached_tokens(prompt_tokens: int, matched: float | None, head_blocks: int, block_tokens: int) -> int:
    """The prompt tokens a backend would compute: all of them less the leading blocks
    its index matched. `matched` is a fraction of the `head_blocks` named (an index
    names a long prompt's head only); None or no head: nothing is known cached."""
    if not matched or head_blocks <= 0:
        return max(0, prompt_tokens)
    return max(0, prompt_tokens - round(matched * head_blocks) * block_tokens)
