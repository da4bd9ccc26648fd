"""What a release exposes publicly: the public Service carries the API port only,
the Ingress and HTTPRoute route only the API paths, and the ops views (/metrics,
/readyz detail, /admin/*) live on the ops listener, which the probes and the
ServiceMonitor use through a cluster-internal Service of their own."""

from __future__ import annotations

import pytest

from tests.charts.helm import PRODUCTION_VALUES, VARIANTS, HelmFailed, render, render_notes
from tests.charts.test_chart_config import container


def test_production_values_route_only_the_api_paths():
    release = render((PRODUCTION_VALUES,))
    route = release.one("HTTPRoute", release.fullname)
    paths = [m["path"]["value"] for rule in route["spec"]["rules"] for m in rule["matches"]]
    assert paths == ["/v1"]
    ingress = release.one("Ingress", release.fullname)
    ingress_paths = [p["path"] for rule in ingress["spec"]["rules"] for p in rule["http"]["paths"]]
    assert ingress_paths == ["/v1"]
    # Both send traffic to the public Service's API port, and nowhere else.
    assert {ref["name"] for rule in route["spec"]["rules"] for ref in rule["backendRefs"]} == {release.fullname}
    backends = [p["backend"]["service"] for rule in ingress["spec"]["rules"] for p in rule["http"]["paths"]]
    assert backends == [{"name": release.fullname, "port": {"name": "http"}}]


@pytest.mark.parametrize("variant", list(VARIANTS))
def test_the_ops_port_is_in_no_public_service_and_serves_probes_and_scrapes(variant):
    release = render(VARIANTS[variant])
    public = release.one("Service", release.fullname)
    assert [(p["name"], p["targetPort"]) for p in public["spec"]["ports"]] == [("http", "http")]
    config = release.gateway_config()
    assert config["ops"] == {"listen": {"host": "0.0.0.0", "port": 9090}}  # never `public: true`
    ops_service = release.one("Service", f"{release.fullname}-ops")
    assert ops_service["spec"]["type"] == "ClusterIP"
    assert [(p["name"], p["port"], p["targetPort"]) for p in ops_service["spec"]["ports"]] == [("ops", 9090, "ops")]
    gateway = container(release.gateway_pod())
    assert {p["name"]: p["containerPort"] for p in gateway["ports"]} == {"http": 8080, "ops": 9090}
    for probe in ("startupProbe", "livenessProbe", "readinessProbe"):
        assert gateway[probe]["httpGet"]["port"] == "ops", probe


def test_the_service_monitor_selects_the_ops_service_and_only_it():
    release = render((PRODUCTION_VALUES,))
    monitor = release.one("ServiceMonitor", release.fullname)
    assert monitor["spec"]["endpoints"][0]["port"] == "ops"
    wanted = monitor["spec"]["selector"]["matchLabels"]
    selected = [
        s["metadata"]["name"] for s in release.all("Service") if wanted.items() <= s["metadata"]["labels"].items()
    ]
    assert selected == [f"{release.fullname}-ops"]


def test_the_ops_port_cannot_be_the_api_port():
    with pytest.raises(HelmFailed, match="ops.port"):
        render(sets={"ops.port": "8080"})


def test_notes_say_what_readyz_means_and_where_the_ops_views_are():
    notes = render_notes()
    # /readyz follows the process, not backend health (gateway/observe/ops.py).
    assert "once every model has a healthy backend" not in notes
    assert "ready once it has started" in notes and "/readyz?model=M" in notes
    assert "port-forward svc/sy-switchyard-ops 9090:9090" in notes
