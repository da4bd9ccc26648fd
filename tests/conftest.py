"""Shared fixtures: real processes on loopback (see tests/procs.py)."""

from __future__ import annotations

import os

import pytest
from hypothesis import settings

from adapters.native_work import TEXT_WORK
from tests.procs import openai_backend_config, start_gateway, start_redis, start_upstream, stopped_after

# mutmut runs each mutant's tests in a process forked from one that already ran them: a
# thread pool made before a fork has no threads after it (ThreadPoolExecutor is not
# fork-safe), so the native backends' shared text-work pool would queue every piece forever
# there. A forked test process makes its own pool (the gateway's workers fork before any
# text work). Here, not beside the native fixtures: any in-process native backend uses it.
os.register_at_fork(after_in_child=lambda: setattr(TEXT_WORK, "_pool", None))


def pytest_configure(config) -> None:
    """A mutant's run (mutmut forks one per mutant) leads a process group of its own: a mutant
    that signals its group (a kill of pid 0, from a mutated fork result) ends that run only, not
    mutmut and the module's whole run with it."""
    if "__mutmut_" in os.environ.get("MUTANT_UNDER_TEST", ""):
        os.setpgid(0, 0)


# Property tests: "ci" (the default) draws the same examples on every run, so a run
# fails for a defect and never by chance; a case found by "explore" (random draws,
# HYPOTHESIS_PROFILE=explore) is kept as an @example beside its test.
settings.register_profile("ci", derandomize=True, database=None, deadline=None, print_blob=True)
settings.register_profile("explore", deadline=None)
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "ci"))


@pytest.fixture(scope="module")
def module_tmp(tmp_path_factory):
    return tmp_path_factory.mktemp("procs")


@pytest.fixture(scope="module")
def upstream(module_tmp):
    """The fast scriptable OpenAI upstream (simulators/openai_upstream.py)."""
    yield from stopped_after(start_upstream(module_tmp))


@pytest.fixture(scope="module")
def gateway(module_tmp, upstream):
    """A gateway process in front of `upstream`, model name "m", no auth."""
    yield from stopped_after(start_gateway(module_tmp, openai_backend_config(upstream)))


@pytest.fixture()
def redis_server(tmp_path):
    yield from stopped_after(start_redis(tmp_path))


@pytest.fixture(scope="session")
def tiny_model_dir(tmp_path_factory):
    """One tiny random Llama (make-tiny) shared by the whole session."""
    from engine.make_tiny import make_tiny

    path = tmp_path_factory.mktemp("tiny") / "tiny"
    make_tiny(path)
    return path
