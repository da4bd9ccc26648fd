"""The production stage on real processes, each candidate a vLLM simulator behind its own
gateway: a good one frees cut streams and expired deadlines, refuses a burst with 503 +
Retry-After while /readyz answers, and rolls back by a config reload with no failed
request; one that never frees a cancelled request fails `cancel` and `deadline`; one that
answers 500 when its queue is full fails `overload`."""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from urllib.parse import urlsplit

import pytest
import yaml
from pydantic import ValidationError

from bakeoff.stages import production, production_rollback
from bakeoff.verdict import CandidateTarget
from simulators.testing import start_simulator
from tests.bakeoff.stages.candidates import candidate, gateway_config, outcomes, simulated

BUDGET_S = 300.0
# Long enough answers to be cut (512 tokens x 5 ms), a batch of 4 and a queue of 4 to overflow.
BUSY = {"itl_ms": 5, "max_num_seqs": 4, "max_num_queued_reqs": 4}
SETTINGS = production.Settings(overload_requests=24)


@pytest.fixture(scope="module")
def good(tmp_path_factory) -> Iterator[CandidateTarget]:
    with candidate(tmp_path_factory.mktemp("production-good"), "good", **BUSY) as target:
        yield target


async def test_a_good_candidate_passes_every_production_check(good: CandidateTarget, tmp_path: Path) -> None:
    with start_simulator("vllm", model_name="sim-model") as previous:
        assert good.config_path is not None
        original = Path(good.config_path).read_text()
        port = urlsplit(good.gateway_url).port
        assert port is not None
        rollback = tmp_path / "previous.yaml"
        rollback.write_text(yaml.safe_dump(gateway_config(previous.url, port)))
        settings = SETTINGS.model_copy(update={"rollback_config": str(rollback)})
        result = await production.run(good, settings, BUDGET_S)
        served_by_previous = previous.stats()["requests_total"]
    assert outcomes(result) == dict.fromkeys(production.ALL_CHECKS, "pass"), result.checks
    by_name = {c.name: c for c in result.checks}
    during = by_name["cancel"].evidence["during"]  # the runtime's own gauge saw every open stream
    assert during["runtime"] == settings.cancel_streams and during["gateway"] > 0
    assert by_name["overload"].evidence["outcomes"].get("503 with Retry-After", 0) > 0
    assert served_by_previous > 0  # the rolled-back config was in force while traffic ran
    assert Path(good.config_path).read_text() == original  # and the candidate was left as it was found


async def test_without_a_rollback_config_the_backends_are_swapped_and_restored(good: CandidateTarget) -> None:
    assert good.config_path is not None
    original = Path(good.config_path).read_text()
    result = await production.run(good, SETTINGS.model_copy(update={"checks": ["rollback"]}), BUDGET_S)
    assert outcomes(result) == {"rollback": "pass"}, result.checks
    check = result.checks[0]
    assert "renamed" in check.detail and check.evidence["traffic"]["ok"] > 0
    assert [r["result"] for r in check.evidence["reloads"]] == ["applied", "applied"]
    assert "1 added, 1 removed" in check.evidence["reloads"][0]["message"]
    assert Path(good.config_path).read_text() == original


async def test_a_runtime_that_never_frees_a_cancelled_request_fails_cancel_and_deadline(tmp_path: Path) -> None:
    with candidate(tmp_path, "leaky", fault="keep_cancelled", **BUSY) as target:
        settings = SETTINGS.model_copy(update={"checks": ["cancel", "deadline"], "settle_s": 2.0})
        result = await production.run(target, settings, BUDGET_S)
    assert outcomes(result) == {"cancel": "fail", "deadline": "fail"}, result.checks
    cancel = result.checks[0]
    assert "the runtime still counts" in cancel.detail
    assert cancel.evidence["after"]["runtime"] == settings.cancel_streams
    assert cancel.evidence["after"]["gateway"] == cancel.evidence["before"]["gateway"]  # the gateway let go


async def test_a_runtime_that_answers_500_on_overload_fails_overload(tmp_path: Path) -> None:
    with candidate(tmp_path, "crashy", fault="overload_status=500", **BUSY) as target:
        settings = SETTINGS.model_copy(update={"checks": ["overload", "readiness"]})
        result = await production.run(target, settings, BUDGET_S)
    seen = outcomes(result)
    assert seen["overload"] == "fail" and seen["readiness"] == "pass", result.checks
    outcomes_seen = result.checks[0].evidence["outcomes"]
    assert any(not k.startswith(("answered", "503 with", "429 with")) for k in outcomes_seen)


async def test_an_unloaded_candidate_cannot_be_judged_on_overload(good: CandidateTarget) -> None:
    settings = SETTINGS.model_copy(update={"checks": ["overload"], "overload_requests": 2})
    result = await production.run(good, settings, BUDGET_S)
    assert outcomes(result) == {"overload": "skip"}
    assert "not overloaded" in result.checks[0].detail


async def test_rollback_needs_the_admin_key_and_the_config_file(good: CandidateTarget) -> None:
    anonymous = CandidateTarget(name="anon", runtime="vllm", gateway_url=good.gateway_url, model=good.model)
    result = await production.run(anonymous, SETTINGS.model_copy(update={"checks": ["rollback"]}), BUDGET_S)
    assert outcomes(result) == {"rollback": "skip"}
    assert "admin_key and config_path" in result.checks[0].detail


async def test_a_spent_budget_skips_every_check(good: CandidateTarget) -> None:
    result = await production.run(good, SETTINGS, budget_s=0.0)
    assert outcomes(result) == dict.fromkeys(production.ALL_CHECKS, "skip")


def test_the_settings_are_strict() -> None:
    with pytest.raises(ValidationError):
        production.Settings.model_validate({"checks": ["cancel", "reboot"]})
    with pytest.raises(ValidationError):
        production.Settings.model_validate({"overload_request": 10})


async def test_a_runtime_without_ignore_eos_is_cut_and_refuses_a_burst_with_429(tmp_path: Path) -> None:
    """TGI behind the gateway: long answers come from its own output length; its 429s pass."""
    with candidate(tmp_path, "tgi", kind="tgi", itl_ms=5, output_tokens=600, max_concurrent_requests=4) as target:
        settings = SETTINGS.model_copy(update={"checks": ["cancel", "deadline", "overload"]})
        result = await production.run(target, settings, BUDGET_S)
    assert outcomes(result) == {"cancel": "pass", "deadline": "pass", "overload": "pass"}, result.checks
    assert "tgi_batch_current_size" in result.checks[0].detail
    assert result.checks[0].evidence["during"]["runtime"] == settings.cancel_streams
    assert result.checks[2].evidence["outcomes"].get("429 with Retry-After", 0) > 0


def test_the_default_rollback_renames_runtime_backends_and_leaves_native_ones() -> None:
    config = {"models": {"m": {"backends": [{"name": "a", "adapter": "vllm", "url": "http://x"}]}}}
    renamed = production_rollback.renamed_backends(yaml.safe_dump(config), "m")
    assert renamed is not None and yaml.safe_load(renamed)["models"]["m"]["backends"][0]["name"] == "a-rollback"
    native = {"models": {"m": {"backends": [{"name": "a", "adapter": "native", "model_path": "builtin:tiny"}]}}}
    assert production_rollback.renamed_backends(yaml.safe_dump(native), "m") is None
    assert production_rollback.renamed_backends(yaml.safe_dump(config), "other") is None
    assert production_rollback.renamed_backends("models: [", "m") is None


@pytest.mark.parametrize(("counter", "outcome"), [(4, "pass"), (3, "fail")])
def test_a_reload_the_file_watcher_already_made_passes_only_if_the_version_moved(counter: int, outcome: str) -> None:
    """A candidate's own gateway may watch its file: the admin reload then answers
    `unchanged`, and only the version in force says whether the edit took."""
    reloads = [(200, {"result": "unchanged", "version": {"counter": counter}}), (200, {"result": "applied"})]
    check = production_rollback.verdict(SETTINGS, True, 3, reloads, Counter(ok=5))
    assert check.outcome == outcome, check.detail


async def test_a_burst_holds_its_places_on_a_runtime_whose_answers_end_early(tmp_path: Path) -> None:
    """Answers that stop by themselves after two tokens would free their places at once (a
    fast runtime, or a slow client whose burst trickles in, is then never overloaded): the
    burst's requests ask for `overload_tokens` with ignore_eos, so the places stay held."""
    with simulated(tmp_path, "short", output_tokens=2, **BUSY) as (target, sim):
        settings = SETTINGS.model_copy(update={"checks": ["overload"], "overload_tokens": 100})
        result = await production.run(target, settings, BUDGET_S)
        bodies = [r["body"] for r in sim.stats()["last_requests"] if "switchyard" in json.dumps(r["body"])]
    assert outcomes(result) == {"overload": "pass"}, result.checks
    assert bodies and all(b.get("ignore_eos") is True and b.get("max_tokens") == 100 for b in bodies)
