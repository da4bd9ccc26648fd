"""gateway/config/schema.py's plain functions in process: the loader (a file it cannot
read, YAML it cannot parse, the source each message names), the environment's overrides,
the command line's listen flags, how a validation error is worded, and each refusal of
a backend's url or native model path, word for word (a person acts on these)."""

from __future__ import annotations

from gateway.config.schema import load_config


def test_an_empty_file_is_the_default_config_and_the_environment_applies(tmp_path):
    path = tmp_path / "empty.yaml"
    path.write_text("")
    cfg = load_config(path, env={"SWITCHYARD_PORT": "9001"})
    assert cfg.listen.port == 9001 and cfg.listen.host == "127.0.0.1"
