"""The mutation table's part for gateway/'s serving, backends, config, observe, lifecycle,
http server, app and command line (merged into scripts/mutation_table.py's MODULES, NOTES,
EXTRA_ARGS and TIMEOUTS): each module and the fast in-process tests that judge it."""

from __future__ import annotations

# The config's in-process tests. test_config.py is not one of them: it reads README.md and
# docs/*.md when it is imported, and a module's mutation copy has neither (mutmut copies the
# packages and tests/ only), so it cannot even be collected there and no mutant could run.
CONFIG_TESTS = [
    "tests/gateway/config/test_config_sections_mutants.py",
    "tests/gateway/config/test_config_refusals.py",
    "tests/gateway/config/test_rollout_config.py",
    "tests/gateway/config/test_response_store_config.py",
]
BACKENDS_TESTS = ["tests/gateway/backends/test_*.py"]
GENERATION_TESTS = ["tests/gateway/serving/test_generation*.py", "tests/gateway/serving/test_oneshot.py"]
METRICS_TESTS = ["tests/gateway/observe/test_*metrics.py", *GENERATION_TESTS]
TRACING_TESTS = ["tests/gateway/observe/test_tracing*.py", "tests/gateway/config/test_tracing_config.py"]
LIFECYCLE_TESTS = ["tests/gateway/lifecycle/test_lifecycle_parts.py", "tests/gateway/lifecycle/test_reload.py"]
# a rollout's request path in process (the test_rollout_{path,mirror,hostile}.py runs serve simulators in processes)
ROLLOUT_TESTS = ["tests/gateway/serving/test_answer_check*.py", "tests/gateway/serving/test_rollout_failure_class.py"]

GATEWAY_MODULES: dict[str, list[str]] = {
    # test_app_parts.py drives HotPath in process (no server) and the document's test serves one gateway; the
    # front door's tests serve a gateway per test (seconds a mutant), too slow for its 682 mutants in 900 s
    "gateway/app.py": [
        "tests/gateway/test_app_parts.py",
        "tests/gateway/test_app_wiring.py",
        "tests/gateway/openai/test_openapi_doc.py",
    ],
    "gateway/http/server.py": ["tests/gateway/http/test_server.py", "tests/gateway/http/test_limits.py"],
    # a reload's plan and apply: the lifecycle's in-process reload tests
    "gateway/backends/backend_set.py": [
        *BACKENDS_TESTS,
        "tests/gateway/lifecycle/test_reload_parts.py",
        "tests/gateway/lifecycle/test_reload.py",
    ],
    "gateway/backends/kv_feeds.py": BACKENDS_TESTS,
    "gateway/backends/pool.py": BACKENDS_TESTS,
    "gateway/cli/commands.py": [
        "tests/gateway/cli/test_cli.py",
        "tests/gateway/cli/test_cli_commands.py",
        *CONFIG_TESTS,
    ],
    "gateway/cli/main.py": ["tests/gateway/cli/test_cli.py", "tests/gateway/cli/test_cli_main.py", *CONFIG_TESTS],
    "gateway/config/auth.py": [*CONFIG_TESTS, "tests/policies/test_auth*.py", "tests/policies/test_api_keys.py"],
    "gateway/config/exposure.py": CONFIG_TESTS,
    "gateway/config/lifecycle.py": [*CONFIG_TESTS, *LIFECYCLE_TESTS],
    "gateway/config/response_store.py": ["tests/gateway/config/test_response_store_config.py", *CONFIG_TESTS],
    "gateway/config/schema.py": [*CONFIG_TESTS, "tests/gateway/config/test_schema_mutants.py"],
    "gateway/config/rollout.py": CONFIG_TESTS,
    "gateway/config/section.py": CONFIG_TESTS,
    "gateway/config/tracing.py": [
        "tests/gateway/config/test_tracing_config.py",
        "tests/gateway/config/test_tracing_resolve.py",
    ],
    "gateway/lifecycle/inflight.py": [*LIFECYCLE_TESTS, "tests/gateway/lifecycle/test_inflight.py"],
    "gateway/lifecycle/process.py": [*LIFECYCLE_TESTS, "tests/gateway/lifecycle/test_process.py"],
    # the supervisor over forks of the test running a small function (test_workers.py)
    "gateway/lifecycle/workers.py": [
        "tests/gateway/lifecycle/test_workers.py",
        "tests/gateway/observe/test_worker_metrics.py",
    ],
    "gateway/observe/admin.py": ["tests/gateway/observe/test_admin.py", *LIFECYCLE_TESTS],
    "gateway/observe/context.py": ["tests/gateway/observe/test_context.py", *METRICS_TESTS],
    "gateway/observe/log_lines.py": [
        "tests/gateway/observe/test_log_lines.py",
        "tests/policies/test_redact.py",
        "tests/gateway/observe/test_overhead_metric.py",
    ],
    "gateway/observe/metrics.py": METRICS_TESTS,
    "gateway/observe/ops.py": ["tests/gateway/observe/test_ops.py", "tests/gateway/serving/test_dispatch_ejection.py"],
    # its spans to the SDK's in-memory exporter, no gateway: the live-gateway traces (test_tracing*.py) cost
    # seconds a mutant, which cut a first run at 172 of 467 mutants
    "gateway/observe/otel_trace.py": [
        "tests/gateway/observe/test_otel_trace_parts.py",
        "tests/gateway/observe/test_otel_trace_mutants.py",
        "tests/gateway/observe/test_otel_trace_context.py",
        "tests/gateway/config/test_tracing_config.py",
    ],
    # its own tests and the per-tenant ones (the generation tests reach it too, at 900 s for half its mutants)
    "gateway/observe/recorder.py": [
        "tests/gateway/observe/test_recorder.py",
        "tests/gateway/observe/test_tenant_metrics.py",
    ],
    "gateway/observe/tracing.py": TRACING_TESTS,
    "gateway/observe/worker_metrics.py": [
        "tests/gateway/observe/test_worker_metrics.py",
        "tests/gateway/lifecycle/test_lifecycle_parts.py",
    ],
    # its own runner tests, and the phases and one-shot calls over it: the streamed generations' wire tests
    # reach it too, but every test reaching its watcher makes each mutant that hangs cost 3x their run
    "gateway/serving/exchange.py": [
        "tests/gateway/serving/test_exchange_runner.py",
        "tests/gateway/serving/test_generation_phases.py",
        "tests/gateway/serving/test_oneshot.py",
    ],
    "gateway/serving/phases.py": [*GENERATION_TESTS, "tests/gateway/http/test_request_deadline.py"],
    "gateway/observe/lean_metrics.py": [
        "tests/gateway/observe/test_lean_metrics.py",
        "tests/gateway/observe/test_lean_metrics_refusals.py",
        *METRICS_TESTS,
    ],
    "gateway/observe/rollout_metrics.py": [
        "tests/gateway/observe/test_rollout_metrics.py",
        "tests/gateway/observe/test_lean_metrics.py",
        "tests/gateway/observe/test_admin_rollouts.py",
        "tests/gateway/lifecycle/test_rollout_controller.py",
    ],
    "gateway/observe/admin_rollouts.py": ["tests/gateway/observe/test_admin_rollouts.py"],
    "gateway/lifecycle/rollout.py": [
        "tests/gateway/lifecycle/test_rollout_controller.py",
        "tests/gateway/lifecycle/test_rollout_controller_mutants.py",
        "tests/gateway/lifecycle/test_rollout_plans.py",
        "tests/gateway/observe/test_admin_rollouts.py",
        "tests/gateway/config/test_rollout_config.py",
    ],
    "gateway/lifecycle/rollout_preflight.py": [
        "tests/gateway/lifecycle/test_rollout_controller.py",
        "tests/gateway/lifecycle/test_rollout_preflight.py",
    ],
    "gateway/cli/rollout.py": ["tests/gateway/cli/test_rollout_cli.py"],
    "gateway/serving/answer_check.py": ROLLOUT_TESTS,
    "gateway/serving/rollout.py": [*ROLLOUT_TESTS, "tests/gateway/serving/test_rollout_request.py"],
    "gateway/serving/mirror.py": [*ROLLOUT_TESTS, "tests/gateway/serving/test_mirror_copies.py"],
}

GATEWAY_NOTES: dict[str, str] = {
    "gateway/app.py": "uvicorn 0.55 calls the app it is handed with no arguments to guess whether it is a factory "
    "(and inspects __call__ for its ASGI version); mutmut's trampoline around HotPath.__call__ takes any arguments, "
    "so in the mutation copy uvicorn took the coroutine it returned for the app and no test passed (0/682 on "
    "2026-12-03). tests/gateway/live_gateway.py now hands uvicorn a factory declared ASGI 3 (the product's own "
    "serve is unchanged: the real __call__ refuses a call without arguments); test_app_parts.py drives HotPath "
    "in process; the tests that serve a gateway per test (test_intake.py, test_unknown_params.py) are left out "
    "of its list: at seconds a mutant, a 900 s run with them reached 148 of its 682 mutants. The composition "
    "root's wiring (Gateway.__init__ handing each part its collaborators, _routes' operation names and one-shot "
    "call) is pinned by test_app_wiring.py from what a client, an operator or the metrics see (78.7% before it, "
    "2026-12-03); what only an in-process engine shows is in test_app_native.py, off the list for the engine's "
    "build time (docs/mutation/survivors/app.toml).",
    "gateway/config/auth.py": "No mutants: the module is pydantic sections whose only code is their validators, "
    "decorated methods mutmut does not mutate; the 100% says nothing was measured (test_config_sections_mutants.py "
    "pins the validators' refusals all the same).",
    "gateway/cli/__main__.py": "No mutants: the module is two top-level statements (the console script's call "
    "of main), and mutmut mutates only functions and methods; the 100% says nothing was measured (every test that starts a gateway "
    "process runs `python -m gateway.cli`, tests/procs.py).",
    "gateway/openai/responses/__init__.py": "No mutants: the module only re-exports names (imports and __all__), "
    "and mutmut mutates only functions and methods; the 100% says nothing was measured.",
    "gateway/intake.py": "Judged in process by tests/gateway/test_intake_mutants.py (Intake.handle with a scripted "
    "route, a real Protection and backend set: each step's limit at and above its boundary, what the admitted "
    "request and admission are given, each refusal recorded once) and the one-shot calls; 86.0% before it. "
    "tests/gateway/test_intake.py (HTTP to simulators, about 16 s a run, so 20 minutes a run of the module) is left "
    "out: it pins the same steps end to end.",
    "gateway/serving/exchange.py": "Judged by its own runner tests (test_exchange_runner.py) and the phases and "
    "one-shot calls over it; the streamed generations' wire tests reach it too but each mutant that hangs its "
    "watcher costs 3x their run (TIMEOUTS).",
}
GATEWAY_EXTRA_ARGS: dict[str, list[str]] = {}
GATEWAY_TIMEOUTS: dict[str, tuple[float, float]] = {
    # every test reaches the runner's watcher (~10 s): a mutant that never sees the client leave or never
    # ends the exchange hangs till its timeout, 10x that by default
    "gateway/serving/exchange.py": (3.0, 5.0),
}
