"""Everything `switchyard serve` refuses, `switchyard config check` refuses too, with the
same message: one validation (gateway/config/schema.py) runs for both. `serve` prints that
message and exits 2, never a traceback.

The commands run in a child process, every case in one (starting one per case would
cost seconds each); one more child runs `switchyard serve` alone, as a person would."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from tests.procs import ROOT, SWITCHYARD

VLLM = {"name": "v", "adapter": "vllm", "url": "http://127.0.0.1:8000"}


def models(*backends: dict) -> dict:
    return {"models": {"m": {"backends": list(backends)}}}


# case -> (config, words the message must contain)
REFUSED = {
    "public address without auth": (
        {"listen": {"host": "0.0.0.0"}, **models(VLLM)},
        ["listen.host is '0.0.0.0' but auth is not configured", "auth: {mode: none}"],
    ),
    "url without a scheme": (
        models({**VLLM, "url": "vllm-a:8000"}),
        ["backend 'v'", "'vllm-a:8000' must start with http:// or https://"],
    ),
    "url with another scheme": (models({**VLLM, "url": "ftp://vllm-a:8000"}), ["must start with http://"]),
    "url without a host": (models({**VLLM, "url": "http://:8000"}), ["must name a host"]),
    "url with a bad port": (models({**VLLM, "url": "http://vllm-a:80000"}), ["no valid port"]),
    "url with a query": (models({**VLLM, "url": "http://vllm-a:8000?x=1"}), ["query or fragment"]),
    "openai url without its API base": (
        models({"name": "o", "adapter": "openai", "url": "http://up:9000"}),
        ["adapter openai takes the API base", "http://up:9000/v1"],
    ),
    "runtime url with /v1": (
        models({**VLLM, "url": "http://vllm-a:8000/v1"}),
        ["adapter vllm takes the server root", "http://vllm-a:8000"],
    ),
    "native model_path that is not a model": (
        models({"name": "n", "adapter": "native", "model_path": "/nonexistent/model"}),
        ["backend 'n'", "/nonexistent/model is not a model directory"],
    ),
    "unknown built-in model": (
        models({"name": "n", "adapter": "native", "model_path": "builtin:huge"}),
        ["unknown built-in model 'huge'"],
    ),
    "redis url with another scheme": (
        {"quota_store": {"kind": "redis", "url": "http://redis:6379"}, **models(VLLM)},
        ["quota_store", "redis://"],
    ),
    "unknown log level": ({"log_level": "verbose", **models(VLLM)}, ["log_level", "debug"]),
    "HS256 secret that cannot be read": (
        {
            "auth": {"mode": "jwt", "jwt": {"issuer": "i", "audience": "a", "algorithms": ["HS256"]}},
            **models(VLLM),
        },
        ["hs256_secret_file /nonexistent/secret cannot be read"],
    ),
    # A rollout (gateway/config/rollout.py): the tracks and the block agree, named by model.
    "candidate backend without a rollout block": (
        models(VLLM, {**VLLM, "name": "c", "track": "candidate"}),
        ["models.m:", "['c'] are on the candidate track", "rollout block"],
    ),
    "rollout block without a candidate backend": (
        {"models": {"m": {"backends": [VLLM], "rollout": {}}}},
        ["models.m.rollout: no backend of the model is on the candidate track"],
    ),
    "rollout with no stable backend": (
        {"models": {"m": {"backends": [{**VLLM, "track": "candidate"}], "rollout": {}}}},
        ["models.m.rollout: every backend is a candidate", "at least one must be on the stable track"],
    ),
    "rollout steps that fall": (
        {
            "models": {
                "m": {
                    "backends": [VLLM, {**VLLM, "name": "c", "track": "candidate"}],
                    "rollout": {"steps": [0.5, 0.25]},
                }
            }
        },
        ["models.m.rollout.steps", "must increase"],
    ),
    "rollout step outside (0, 1]": (
        {
            "models": {
                "m": {"backends": [VLLM, {**VLLM, "name": "c", "track": "candidate"}], "rollout": {"steps": [0.5, 1.5]}}
            }
        },
        ["models.m.rollout.steps", "in (0, 1]"],
    ),
    "unknown track": (models({**VLLM, "track": "canary"}), ["track", "'stable' or 'candidate'"]),
    "mirror share above 1": (
        {
            "models": {
                "m": {
                    "backends": [VLLM, {**VLLM, "name": "c", "track": "candidate"}],
                    "rollout": {"mirror": {"share": 2}},
                }
            }
        },
        ["models.m.rollout.mirror.share"],
    ),
    "unknown sticky key": (
        {
            "models": {
                "m": {
                    "backends": [VLLM, {**VLLM, "name": "c", "track": "candidate"}],
                    "rollout": {"sticky": ["cookie"]},
                }
            }
        },
        ["models.m.rollout.sticky", "'session' or 'tenant'"],
    ),
    "unknown gate": (
        {
            "models": {
                "m": {"backends": [VLLM, {**VLLM, "name": "c", "track": "candidate"}], "rollout": {"gates": {"p99": 2}}}
            }
        },
        ["models.m.rollout.gates.p99", "Extra inputs are not permitted"],
    ),
}
REFUSED["HS256 secret that cannot be read"][0]["auth"]["jwt"]["hs256_secret_file"] = "/nonexistent/secret"

# Runs `switchyard config check F` and `switchyard serve --config F` for each file in
# one process and reports each command's exit status, its stderr, and whether it raised.
RUN_BOTH = """
import contextlib, io, json, sys, traceback
from gateway.cli.main import main
out = {}
for path in sys.argv[1:]:
    for command in (["config", "check", path], ["serve", "--config", path]):
        err = io.StringIO()
        with contextlib.redirect_stderr(err):
            try:
                status = main(command)
            except BaseException:
                status, err = None, io.StringIO(traceback.format_exc())
        out[path + " " + command[0]] = {"status": status, "stderr": err.getvalue()}
print(json.dumps(out))
"""


@pytest.fixture(scope="module")
def verdicts(tmp_path_factory) -> dict[str, dict[str, dict]]:
    """case -> command ("config", "serve") -> {"status", "stderr"}."""
    tmp = tmp_path_factory.mktemp("refused")
    paths = {}
    for i, (case, (config, _)) in enumerate(REFUSED.items()):
        paths[case] = tmp / f"case-{i}.yaml"
        paths[case].write_text(yaml.safe_dump(config))
    done = subprocess.run(
        [sys.executable, "-c", RUN_BOTH, *map(str, paths.values())],
        capture_output=True,
        text=True,
        timeout=60,
        cwd=ROOT,
    )
    assert done.returncode == 0, done.stderr
    out = json.loads(done.stdout.splitlines()[-1])
    return {case: {c: out[f"{path} {c}"] for c in ("config", "serve")} for case, path in paths.items()}


@pytest.mark.parametrize("case", list(REFUSED))
def test_serve_and_config_check_refuse_alike_with_one_message(verdicts, case):
    check, serve = verdicts[case]["config"], verdicts[case]["serve"]
    assert check["status"] == 2 and serve["status"] == 2, (check, serve)
    assert serve["stderr"] == check["stderr"]  # the same message, from the one validation
    assert "Traceback" not in serve["stderr"]
    for words in REFUSED[case][1]:
        assert words in serve["stderr"], serve["stderr"]


def test_serve_process_prints_the_refusal_not_a_traceback(tmp_path):
    path = tmp_path / "public.yaml"
    path.write_text(yaml.safe_dump(REFUSED["public address without auth"][0]))
    done = subprocess.run(
        [*SWITCHYARD, "serve", "--config", str(path)], capture_output=True, text=True, timeout=60, cwd=ROOT
    )
    assert done.returncode == 2 and "Traceback" not in done.stderr
    assert done.stderr.splitlines()[0] == f"{path} is not valid:"
    assert "auth is not configured" in done.stderr and len(done.stderr.splitlines()) == 2


def test_serve_refuses_a_host_flag_that_makes_an_open_config_public(tmp_path, capsys):
    from gateway.cli.commands import servable_config
    from gateway.cli.main import main
    from gateway.config.schema import ConfigError

    path = tmp_path / "local.yaml"
    path.write_text(yaml.safe_dump(models(VLLM)))
    assert main(["config", "check", str(path)]) == 0
    # what `serve --config F --host 0.0.0.0` runs before it starts anything
    with pytest.raises(ConfigError, match="listen.host is '0.0.0.0' but auth is not configured"):
        servable_config(str(path), "0.0.0.0")


def test_the_urls_each_adapter_takes_pass(tmp_path, capsys):
    from gateway.cli.main import main

    config = models(
        VLLM,
        {"name": "s", "adapter": "sglang", "url": "https://sglang.internal"},
        {"name": "t", "adapter": "tgi", "url": "http://proxy:8080/tgi-a/"},
        {"name": "o", "adapter": "openai", "url": "http://up:9000/v1"},
        {"name": "p", "adapter": "openai", "url": "https://gw.example/api/openai/v1/"},
        {"name": "n", "adapter": "native", "model_path": "builtin:tiny"},
    )
    path = tmp_path / "fleet.yaml"
    path.write_text(yaml.safe_dump(config))
    assert main(["config", "check", str(path)]) == 0, capsys.readouterr().err
    assert "6 backend(s)" in capsys.readouterr().out


def test_engine_serve_refuses_a_directory_that_is_not_a_model(tmp_path, capsys):
    from gateway.cli.main import main

    assert main(["engine", "serve", "--model", str(tmp_path)]) == 2
    err = capsys.readouterr().err
    assert f"{Path(tmp_path)} is not a model directory (no config.json)" in err and "Traceback" not in err
