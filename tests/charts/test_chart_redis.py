"""The chart with an external Redis Cluster or Sentinel: the config describes the
deployment (startup_nodes, sentinels), so the chart passes no SWITCHYARD_REDIS_URL
(a URL names one server, which `config check` refuses for those modes)."""

from __future__ import annotations

import pytest
import yaml

from tests.charts.helm import HelmFailed, render
from tests.charts.test_chart_config import config_check, container

CLUSTER = {
    "redis": {"mode": "external"},
    "config": {
        "quota_store": {"mode": "cluster", "startup_nodes": ["redis-0.redis:6379", "redis-1.redis:6379"]},
    },
}
SENTINEL = {
    "redis": {"mode": "external"},
    "config": {
        "quota_store": {"mode": "sentinel", "sentinels": ["sentinel-0:26379", "sentinel-1:26379"], "service_name": "q"},
        "response_store": {"kind": "redis", "mode": "sentinel", "sentinels": ["sentinel-0:26379"], "service_name": "r"},
    },
}


def _render(values: dict, tmp_path, name: str):
    path = tmp_path / f"{name}.yaml"
    path.write_text(yaml.safe_dump(values))
    return render((path,))


@pytest.mark.parametrize("name, values", [("cluster", CLUSTER), ("sentinel", SENTINEL)])
def test_cluster_and_sentinel_render_without_a_url_and_pass_config_check(name, values, tmp_path):
    release = _render(values, tmp_path, name)
    env = {e["name"] for e in container(release.gateway_pod()).get("env", [])}
    assert "SWITCHYARD_REDIS_URL" not in env
    assert not [s for s in release.all("Secret") if s["metadata"]["name"].endswith("redis-url")]
    config = release.gateway_config()
    assert config["quota_store"]["kind"] == "redis" and config["quota_store"]["mode"] == name
    status, errors = config_check({name: release.gateway_config_text()}, tmp_path)
    assert status == {name: 0}, errors


def test_a_url_beside_a_cluster_is_refused_at_render(tmp_path):
    values = {**CLUSTER, "redis": {"mode": "external", "external": {"url": "redis://one:6379/0"}}}
    with pytest.raises(HelmFailed, match="leave redis.external.url"):
        _render(values, tmp_path, "both")


def test_a_single_external_redis_still_comes_by_url(tmp_path):
    release = _render({"redis": {"mode": "external", "external": {"url": "redis://one:6379/0"}}}, tmp_path, "single")
    env = {e["name"]: e for e in container(release.gateway_pod())["env"]}
    assert env["SWITCHYARD_REDIS_URL"]["valueFrom"]["secretKeyRef"]["name"] == "sy-switchyard-redis-url"
