"""gateway/config/redis.py: the whole RedisTarget each deployment shape becomes (every
field carried, the default ports), and the single mode's TLS and password rules."""

from __future__ import annotations

import pytest
from pydantic import ValidationError

from gateway.config.redis import RedisDeploymentConfig
from stores.redis_connect import RedisTarget


def test_a_single_server_carries_its_url_and_tls_settings(tmp_path):
    ca = tmp_path / "ca.pem"
    ca.write_text("ca")
    cfg = RedisDeploymentConfig(url="rediss://u@redis:6380/1", username="gw", tls_ca_file=str(ca))
    assert cfg.redis_target() == RedisTarget(
        mode="single", url="rediss://u@redis:6380/1", username="gw", tls_ca_file=str(ca)
    )


def test_a_cluster_carries_every_field(tmp_path):
    ca = tmp_path / "ca.pem"
    ca.write_text("ca")
    cfg = RedisDeploymentConfig(
        mode="cluster", startup_nodes=["c1", "c2:7001"], username="gw", tls=True, tls_ca_file=str(ca)
    )
    assert cfg.redis_target() == RedisTarget(
        mode="cluster",
        url="redis://127.0.0.1:6379/0",
        startup_nodes=(("c1", 6379), ("c2", 7001)),
        username="gw",
        tls=True,
        tls_ca_file=str(ca),
    )


def test_a_sentinel_deployment_carries_every_field(tmp_path):
    (tmp_path / "pw").write_text("data\n")
    (tmp_path / "spw").write_text("  \n")  # an empty secret is no password
    cfg = RedisDeploymentConfig(
        mode="sentinel",
        sentinels=["s1", "s2:26380"],
        service_name="mymaster",
        password_file=str(tmp_path / "pw"),
        sentinel_username="watcher",
        sentinel_password_file=str(tmp_path / "spw"),
    )
    assert cfg.redis_target() == RedisTarget(
        mode="sentinel",
        sentinels=(("s1", 26379), ("s2", 26380)),
        service_name="mymaster",
        password="data",
        sentinel_username="watcher",
        sentinel_password=None,
    )


@pytest.mark.parametrize(
    ("fields", "words"),
    [
        ({"tls": True}, "mode single takes TLS from its url: rediss://host:port/0"),
        ({"tls_ca_file": "/etc/hosts"}, "mode single takes TLS from its url: rediss://host:port/0"),
        ({"sentinel_username": "w"}, "sentinel_username and sentinel_password_file are for mode sentinel"),
        ({"service_name": "m"}, "service_name is for mode sentinel, not single"),
        ({"startup_nodes": ["c1"]}, "startup_nodes is for mode cluster, not single"),
        (
            {"mode": "cluster", "startup_nodes": ["c1"], "sentinels": ["s1"]},
            "sentinels is for mode sentinel, not cluster",
        ),
        ({"mode": "cluster"}, "mode cluster needs startup_nodes"),
        ({"mode": "sentinel", "sentinels": ["s1"]}, "mode sentinel needs sentinels"),
        ({"mode": "sentinel", "service_name": "m"}, "mode sentinel needs sentinels"),
        ({"password_file": "/nonexistent/pw"}, "password_file /nonexistent/pw cannot be read"),
    ],
)
def test_each_shape_it_cannot_use_is_refused_by_name(fields, words):
    with pytest.raises(ValidationError) as info:
        RedisDeploymentConfig(**fields)
    assert words in str(info.value)


def test_a_password_in_the_url_and_in_a_file_is_refused(tmp_path):
    (tmp_path / "pw").write_text("p")
    with pytest.raises(ValidationError) as info:
        RedisDeploymentConfig(url="redis://:p@h/0", password_file=str(tmp_path / "pw"))
    assert "the password is both in url and in password_file: keep one" in str(info.value)
    assert RedisDeploymentConfig(url="redis://u@h/0", password_file=str(tmp_path / "pw")).redis_target().password == "p"
