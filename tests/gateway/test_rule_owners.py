"""One owner per rule (docs/architecture.md, "Rules and their one owner"): each test reads
the source of gateway/, adapters/ and policies/ and fails when a second module starts
deciding its rule. The rules' behaviour is pinned where the table says; these pin who
decides."""

from __future__ import annotations

import ast
import functools
from collections.abc import Iterator
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
PACKAGES = ("gateway", "adapters", "policies")


@functools.cache
def parsed() -> tuple[tuple[str, ast.Module], ...]:
    return tuple(
        (path.relative_to(ROOT).as_posix(), ast.parse(path.read_text(), str(path)))
        for package in PACKAGES
        for path in sorted((ROOT / package).rglob("*.py"))
    )


def modules() -> Iterator[tuple[str, ast.Module]]:
    yield from parsed()


def where(predicate) -> set[str]:
    """The modules holding a node `predicate` accepts."""
    return {name for name, tree in modules() if any(predicate(node) for node in ast.walk(tree))}


def called(node: ast.AST, name: str) -> bool:
    if not isinstance(node, ast.Call):
        return False
    f = node.func
    return (isinstance(f, ast.Name) and f.id == name) or (isinstance(f, ast.Attribute) and f.attr == name)


def keyword(node: ast.Call, name: str) -> ast.expr | None:
    return next((k.value for k in node.keywords if k.arg == name), None)


def constant(node: ast.AST | None, *values: object) -> bool:
    return isinstance(node, ast.Constant) and node.value in values


# ---- errors --------------------------------------------------------------------------------------


BUILT_ONCE = ("client_closed", "no_backend_available", "internal_error", "model_not_found", "deadline_exceeded")


def test_the_gateways_own_errors_are_built_in_one_module():
    # 499, 404 model, no backend, internal error and a passed client deadline (the queue's
    # 504 and the exchange's alike): adapters/errors.py's builders only.
    def builds(node: ast.AST) -> bool:
        if not called(node, "GatewayError"):
            return False
        assert isinstance(node, ast.Call)
        status = node.args[0] if node.args else None
        return constant(status, 499, 500) or constant(keyword(node, "code"), *BUILT_ONCE)

    assert where(builds) == {"adapters/errors.py"}


def test_the_failure_kind_rides_on_the_error_and_no_one_reads_it_from_codes():
    # Set where an error is built; read as `failure` / `fails_over`, never from `retryable`
    # or a code string on the serving path.
    assert where(lambda n: isinstance(n, ast.Attribute) and n.attr == "retryable") == set()

    def code_compared(node: ast.AST) -> bool:
        if not isinstance(node, ast.Compare):
            return False
        sides = [node.left, *node.comparators]
        return any(isinstance(s, ast.Attribute) and s.attr == "code" for s in sides)

    serving = {m for m in where(code_compared) if m.startswith(("gateway/serving/", "gateway/intake.py"))}
    assert serving == set()
    # Set where an error is built; an `Outcome` or a `TrackRecord` carries it, never decides it.
    sets_kind = where(
        lambda n: (
            isinstance(n, ast.Call)
            and keyword(n, "failure") is not None
            and not called(n, "TrackRecord")
            and not called(n, "Outcome")
        )
    )
    assert sets_kind <= {"adapters/errors.py", "adapters/runtime_errors.py"}, sets_kind


def test_a_status_decides_a_failures_kind_in_one_place():
    # adapters/errors.py `FAILURE_BY_STATUS`; a rollout classes the kind the error carries
    # (gateway/serving/rollout.py `failure_class`), never the status again.
    kinds = {"timeout", "overload", "server_error", "connect"}

    def status_to_kind(node: ast.AST) -> bool:
        if not isinstance(node, ast.Dict):
            return False
        statuses = [k for k in node.keys if isinstance(k, ast.Constant) and isinstance(k.value, int)]
        named = [
            v for v in node.values if constant(v, *kinds) or (isinstance(v, ast.Attribute) and v.attr.lower() in kinds)
        ]
        return bool(statuses) and bool(named)

    assert where(status_to_kind) == {"adapters/errors.py"}
    assert where(lambda n: isinstance(n, ast.FunctionDef) and n.name == "failure_class") == {
        "gateway/serving/rollout.py"
    }
    assert where(lambda n: called(n, "TrackRecord")) == {"gateway/serving/rollout.py"}


def test_a_shared_load_read_has_one_owner():
    # One reader per server and event loop, for every runtime whose load read is destructive:
    # adapters/dialect.py `shared_load` keeps the registry; no dialect keeps one of its own.
    # (A registry looked up by the running loop, or by its id as it once was.)
    def per_loop_key(node: ast.AST) -> bool:
        if not any(called(node, f) for f in ("id", "get", "setdefault")):
            return False
        assert isinstance(node, ast.Call)
        return any(called(a, "get_running_loop") for a in node.args)

    assert where(per_loop_key) == {"adapters/dialect.py"}


# ---- cancellation, usage, choices ------------------------------------------------------------------


def test_one_cancellation_counter_with_every_phase():
    names = set()
    for _, tree in modules():
        for node in ast.walk(tree):
            if isinstance(node, ast.Constant) and isinstance(node.value, str):
                if node.value.startswith("switchyard_") and "cancel" in node.value:
                    names.add(node.value)
    assert names == {"switchyard_client_cancellations_total"}

    # Counted by the recorder from the outcome, for every phase (the queued one included).
    def counts(node: ast.AST) -> bool:
        f = node.func if isinstance(node, ast.Call) else None
        return isinstance(f, ast.Attribute) and isinstance(f.value, ast.Attribute) and f.value.attr == "cancelled"

    assert where(counts) == {"gateway/observe/recorder.py"}  # `<metrics>.cancelled.labels(phase)`, nowhere else


def test_usage_when_the_runtime_sends_none_has_one_owner():
    assert where(lambda n: called(n, "UsageCount")) == {"gateway/serving/generation.py"}
    assert where(lambda n: isinstance(n, ast.ClassDef) and n.name == "UsageCount") == {"gateway/serving/usage.py"}
    assert where(lambda n: isinstance(n, ast.Attribute) and n.attr == "completion_tokens_seen") == set()


def test_total_choices_are_counted_in_one_function():
    def sums_choices(node: ast.AST) -> bool:
        if not isinstance(node, (ast.GeneratorExp, ast.ListComp)):
            return False
        elt = node.elt
        return isinstance(elt, ast.Attribute) and elt.attr == "n"

    assert where(sums_choices) == {"adapters/base.py"}


# ---- the stream rules -------------------------------------------------------------------------------


def test_stop_becomes_tool_calls_in_the_guard_only():
    def decides(node: ast.AST) -> bool:
        if isinstance(node, ast.Assign):  # the word assigned, plainly or as a conditional's branch
            value = node.value
            branches = (value.body, value.orelse) if isinstance(value, ast.IfExp) else (value,)
            return any(constant(branch, "tool_calls") for branch in branches)
        return called(node, "Finish") and any(constant(a, "tool_calls") for a in node.args)  # type: ignore[attr-defined]

    assert where(decides) == {"gateway/serving/stream_guard.py"}


def test_tool_call_ids_are_made_once():
    assert where(lambda n: constant(n, "call_")) == {"gateway/serving/stream_guard.py"}


def test_every_choice_finished_is_decided_in_the_guard():
    from gateway.openai.responses.encoder import ResponseAssembly

    # The Responses answer trusts the guarded stream: it keeps no end-of-stream check of its own.
    assert not hasattr(ResponseAssembly, "end_of_events")
    assert where(lambda n: isinstance(n, ast.Attribute) and n.attr == "unfinished") <= {
        "gateway/serving/stream_guard.py"
    }


def test_the_model_is_checked_by_the_front_door():
    # 404 model_not_found: the front door for every API route; GET /v1/models/{id} and the
    # per-model readiness answer their own; dispatch only for a model a reload removed
    # after admission.
    assert where(lambda n: called(n, "model_not_found")) == {
        "gateway/intake.py",
        "gateway/app.py",
        "gateway/observe/ops.py",
        "gateway/serving/dispatch.py",
    }
    # Whether a principal may use a model: asked by the front door (and the model listing),
    # and by the stored-response routes for a record's model (a response made on a model
    # the caller may not use is not there for it). gateway/protection/gate.py only hands
    # the question to the authenticator.
    assert where(lambda n: called(n, "may_use")) == {
        "gateway/intake.py",
        "gateway/app.py",
        "gateway/openai/responses/routes.py",
        "gateway/protection/gate.py",
    }


# ---- rollouts ------------------------------------------------------------------------------------


def mentions(node: ast.AST, name: str) -> bool:
    return any(
        (isinstance(n, ast.Name) and n.id == name) or (isinstance(n, ast.Attribute) and n.attr == name)
        for n in ast.walk(node)
    )


def test_the_rollout_steps_rule_has_one_owner():
    # policies/rollout_state.py `PlanSettings`: a rollout's steps are declared, bounded and
    # ordered there only; the config's block is that type, the controller reads its steps.
    def decides_steps(node: ast.AST) -> bool:
        if isinstance(node, ast.AnnAssign):  # a second `steps` field
            return isinstance(node.target, ast.Name) and node.target.id == "steps"
        if any(called(node, v) for v in ("field_validator", "validator", "model_validator")):
            assert isinstance(node, ast.Call)  # a validator of `steps`
            return any(constant(a, "steps") for a in node.args)
        if called(node, "sorted"):  # their order
            assert isinstance(node, ast.Call)
            return any(mentions(a, "steps") for a in node.args)
        if isinstance(node, (ast.GeneratorExp, ast.ListComp, ast.SetComp)):  # each one judged
            over_steps = any(mentions(g.iter, "steps") for g in node.generators)
            return over_steps and any(isinstance(n, ast.Compare) for n in ast.walk(node.elt))
        return False

    assert where(decides_steps) == {"policies/rollout_state.py"}


# ---- shared state --------------------------------------------------------------------------------


def test_one_redis_servers_tls_rule_has_one_owner():
    # stores/redis_connect.py `tls_problem` (RedisTarget's own check): no module of gateway/,
    # adapters/ or policies/ judges a url's scheme against rediss:// (the config asks it).
    def judges_rediss(node: ast.AST) -> bool:
        return isinstance(node, ast.Compare) and any(constant(n, "rediss") for n in ast.walk(node))

    assert where(judges_rediss) == set()
