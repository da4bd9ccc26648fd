"""`quota_store` for each Redis deployment, as `switchyard config check` (and so
`serve`) accepts or refuses it: one server, a Cluster, a Sentinel-managed master;
credentials from files, TLS."""

from __future__ import annotations

import pytest
import yaml

from gateway.cli.main import main
from gateway.config.schema import ConfigError, load_config, parse_config

VLLM = {"models": {"m": {"backends": [{"name": "v", "adapter": "vllm", "url": "http://127.0.0.1:8000"}]}}}


def check(tmp_path, store: dict, capsys) -> tuple[int, str]:
    path = tmp_path / "gw.yaml"
    path.write_text(yaml.safe_dump({"quota_store": store, **VLLM}))
    status = main(["config", "check", str(path)])
    out = capsys.readouterr()
    return status, out.out + out.err


def test_each_deployment_shape_passes_config_check(tmp_path, capsys):
    secret = tmp_path / "redis-password"
    secret.write_text("s3cret\n")
    shapes = [
        {"kind": "redis", "url": "redis://redis:6379/0"},
        {
            "kind": "redis",
            "url": "rediss://redis:6380/0",
            "username": "gw",
            "password_file": str(secret),
            "tls_ca_file": str(secret),
        },
        {"kind": "redis", "mode": "cluster", "startup_nodes": ["10.0.0.1:6379", "10.0.0.2", "[fd00::3]:7000"]},
        {
            "kind": "redis",
            "mode": "sentinel",
            "sentinels": ["s1:26379", "s2:26379", "s3"],
            "service_name": "mymaster",
            "password_file": str(secret),
            "sentinel_password_file": str(secret),
            "tls": True,
        },
    ]
    for store in shapes:
        status, out = check(tmp_path, store, capsys)
        assert status == 0, (store, out)
        assert "quota store redis" in out


REFUSED = {
    "cluster without nodes": ({"mode": "cluster"}, "mode cluster needs startup_nodes"),
    "cluster with a url": (
        {"mode": "cluster", "startup_nodes": ["a:1"], "url": "redis://a:1/0"},
        "mode cluster finds the cluster from startup_nodes",
    ),
    "sentinel without its master's name": ({"mode": "sentinel", "sentinels": ["s:26379"]}, "needs sentinels"),
    "sentinel with a url": (
        {"mode": "sentinel", "sentinels": ["s:1"], "service_name": "m", "url": "redis://a:1/0"},
        "mode sentinel asks the sentinels",
    ),
    "nodes for another mode": ({"startup_nodes": ["a:1"]}, "startup_nodes is for mode cluster, not single"),
    "sentinel credentials without sentinel": ({"sentinel_username": "x"}, "are for mode sentinel"),
    "a node that is not host:port": ({"mode": "cluster", "startup_nodes": ["redis://a:1"]}, "must be host:port"),
    "a node with a bad port": ({"mode": "cluster", "startup_nodes": ["a:99999"]}, "has no valid port"),
    "an unreadable password file": ({"password_file": "/nonexistent/secret"}, "password_file /nonexistent/secret"),
    "tls on one server": ({"tls": True}, "mode single takes TLS from its url: rediss://"),
    "a CA for a plain url": ({"tls_ca_file": __file__}, "mode single takes TLS from its url: rediss://"),
    "two passwords": ({"url": "redis://:pw@a:1/0", "password_file": __file__}, "keep one"),
}


@pytest.mark.parametrize("case", list(REFUSED))
def test_config_check_refuses_a_deployment_it_cannot_use(tmp_path, capsys, case):
    store, words = REFUSED[case]
    status, out = check(tmp_path, {"kind": "redis", **store}, capsys)
    assert status == 2, out
    assert "quota_store" in out and words in out, out
    assert "Traceback" not in out


def test_the_target_reads_passwords_from_their_files_and_fills_default_ports(tmp_path):
    (tmp_path / "pw").write_text("data-pass\n")
    (tmp_path / "spw").write_text("sentinel-pass")
    cfg = parse_config(
        {
            "quota_store": {
                "kind": "redis",
                "mode": "sentinel",
                "sentinels": ["s1", "s2:26380"],
                "service_name": "mymaster",
                "username": "gw",
                "password_file": str(tmp_path / "pw"),
                "sentinel_password_file": str(tmp_path / "spw"),
            }
        }
    )
    target = cfg.quota_store.redis_target()
    assert target.sentinels == (("s1", 26379), ("s2", 26380))
    assert (target.username, target.password, target.sentinel_password) == ("gw", "data-pass", "sentinel-pass")
    assert "pass" not in repr(target) and "pass" not in target.describe()
    cluster = parse_config({"quota_store": {"kind": "redis", "mode": "cluster", "startup_nodes": ["c1"]}})
    assert cluster.quota_store.redis_target().startup_nodes == (("c1", 6379),)


def test_a_single_server_url_from_the_environment_does_not_pass_for_a_cluster(tmp_path):
    path = tmp_path / "gw.yaml"
    path.write_text(yaml.safe_dump({"quota_store": {"kind": "redis", "mode": "cluster", "startup_nodes": ["c:1"]}}))
    with pytest.raises(ConfigError, match="mode cluster finds the cluster from startup_nodes"):
        load_config(path, env={"SWITCHYARD_REDIS_URL": "redis://one:6379/0"})
