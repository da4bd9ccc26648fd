"""What the rendered chart configures: the gateway config passes `switchyard
config check`, runtimes are wired in as backends with their recommended flags,
secrets reach the paths the config names, and the pod is set up to stop cleanly
and run unprivileged."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from tests.charts.helm import (
    DEVELOPMENT_VALUES,
    PRODUCTION_VALUES,
    ROOT,
    VARIANTS,
    HelmFailed,
    Release,
    render,
    render_notes,
)

ADAPTER_OF = {
    "vllm": "vllm",
    "sglang": "sglang",
    "tgi": "tgi",
    "trtllm": "trtllm",
    "llamacpp": "llamacpp",
    "native": "openai",
}


# `switchyard config check` on several files in one process: the command takes
# seconds to start, most of it importing its other command groups.
CONFIG_CHECK_EACH = """
import sys
from gateway.cli.main import main
for path in sys.argv[1:]:
    print("RESULT", path, main(["config", "check", path]), flush=True)
"""


def config_check(texts: dict[str, str], tmp_path: Path) -> tuple[dict[str, int], str]:
    """Exit status of `switchyard config check` per named config text, and the errors printed."""
    paths = {}
    for name, text in texts.items():
        paths[name] = tmp_path / f"{name}.yaml"
        paths[name].write_text(text)
    done = subprocess.run(
        [sys.executable, "-c", CONFIG_CHECK_EACH, *map(str, paths.values())],
        capture_output=True,
        text=True,
        timeout=120,
    )
    status = {line.split()[1]: int(line.split()[2]) for line in done.stdout.splitlines() if line.startswith("RESULT")}
    return {name: status.get(str(path), -1) for name, path in paths.items()}, done.stderr


def container(pod: dict, name: str | None = None) -> dict:
    containers = pod["spec"]["containers"]
    return containers[0] if name is None else next(c for c in containers if c["name"] == name)


def mounts_by_path(pod: dict) -> dict[str, dict]:
    """mountPath -> the volume behind it."""
    volumes = {v["name"]: v for v in pod["spec"]["volumes"]}
    return {m["mountPath"]: volumes[m["name"]] for m in container(pod)["volumeMounts"]}


def test_rendered_configs_pass_config_check_and_a_broken_one_does_not(tmp_path):
    texts = {f"gateway-{variant}": render(files).gateway_config_text() for variant, files in VARIANTS.items()}
    engine_runtime = render().one("ConfigMap", "sy-switchyard-rt-tiny")["data"]["config.yaml"]
    texts["engine-runtime"] = engine_runtime
    texts["engine-image"] = (ROOT / "docker" / "engine.yaml").read_text()
    broken = {"config.models.m.backends[0].name": "x", "config.models.m.backends[0].adapter": "vllm"}
    texts["broken"] = render(sets=broken).gateway_config_text()
    status, errors = config_check(texts, tmp_path)
    assert status == {**{name: 0 for name in texts}, "broken": 2}, errors
    assert "backend 'x': adapter vllm needs url" in errors
    engine = yaml.safe_load(engine_runtime)
    assert engine["auth"] == {"mode": "none"} and engine["listen"]["host"] == "0.0.0.0"


def test_each_runtime_pod_is_a_backend_at_its_stable_name():
    release = render((PRODUCTION_VALUES,))
    values = yaml.safe_load(PRODUCTION_VALUES.read_text())
    backends = {b["name"]: b for b in release.gateway_config()["models"]["llama-3-8b"]["backends"]}
    enabled = {name: spec for name, spec in values["runtimes"].items() if spec.get("enabled")}
    pods = {f"{name}-{i}": name for name, spec in enabled.items() for i in range(spec.get("replicas", 1))}
    assert set(backends) == set(pods) and "vllm-a-1" in pods  # vllm-a has two pods: two backends
    for backend, name in pods.items():
        service = release.one("Service", f"sy-switchyard-rt-{name}")
        assert service["spec"]["clusterIP"] == "None"  # headless: a DNS name per pod
        port = service["spec"]["ports"][0]["port"]
        index = backend.rsplit("-", 1)[1]
        assert backends[backend]["adapter"] == ADAPTER_OF[enabled[name]["kind"]]
        host = f"sy-switchyard-rt-{name}-{index}.sy-switchyard-rt-{name}"
        assert backends[backend]["url"] == f"http://{host}:{port}"
        assert backends[backend]["timeout_s"] == 900
        workload = release.one("StatefulSet", f"sy-switchyard-rt-{name}")
        assert workload["spec"]["serviceName"] == service["metadata"]["name"]
        assert service["spec"]["selector"].items() <= workload["spec"]["template"]["metadata"]["labels"].items()
        assert container(workload["spec"]["template"])["ports"][0]["containerPort"] == port
    # The values' own model settings survive next to the wired backends.
    assert release.gateway_config()["models"]["llama-3-8b"]["routing"] == "prefix_affinity"
    assert backends["vllm-a-0"]["weight"] == 2 and backends["vllm-a-1"]["weight"] == 2


def test_runtime_flags_follow_each_runtimes_recommendations():
    release = render((PRODUCTION_VALUES,))
    args = {
        name: container(release.one("StatefulSet", f"sy-switchyard-rt-{name}")["spec"]["template"])
        for name in ("vllm-a", "sglang-b", "trt-c", "tgi-d")
    }
    vllm = args["vllm-a"]["args"]
    assert args["vllm-a"]["command"] == ["vllm", "serve"] and vllm[0] == "/models/Llama-3.1-8B-Instruct"
    for flag in (
        "--enable-prefix-caching",
        "--enable-auto-tool-choice",
        "--tool-call-parser=llama3_json",
        "--enable-prompt-tokens-details",
        "--enable-request-id-headers",
        "--served-model-name=meta-llama/Llama-3.1-8B-Instruct",
        "--host=0.0.0.0",
        "--max-model-len=16384",
    ):
        assert flag in vllm
    sglang = args["sglang-b"]["args"]
    for flag in ("--enable-metrics", "--enable-cache-report", "--tool-call-parser=llama3", "--port=30000"):
        assert flag in sglang
    trt = args["trt-c"]["args"]
    assert "--extra_llm_api_options=/etc/trtllm/extra-llm-api-options.yaml" in trt
    assert not any(a.startswith("--tool_parser") for a in trt)
    extra = yaml.safe_load(release.one("ConfigMap", "sy-switchyard-rt-trt-c")["data"]["extra-llm-api-options.yaml"])
    assert extra["return_perf_metrics"] is True and extra["kv_cache_config"]["enable_block_reuse"] is True
    assert args["tgi-d"]["args"][:3] == [
        "--model-id=/models/Llama-3.1-8B-Instruct",
        "--hostname=0.0.0.0",
        "--port=3000",
    ]


def test_backend_options_match_the_runtime_flags():
    backends = {b["name"]: b for b in render((PRODUCTION_VALUES,)).gateway_config()["models"]["llama-3-8b"]["backends"]}
    assert backends["vllm-a-0"]["options"] == {"prompt_tokens_details": True}
    assert backends["sglang-b-0"]["options"] == {"cache_report": True, "load_source": "auto"}
    # No --tool_parser: the gateway answers tool requests itself instead of sending them.
    assert backends["trt-c-0"]["options"] == {"metrics": "prometheus", "tools": False}
    assert "served_model" not in backends["tgi-d-0"]  # TGI is always addressed as "tgi"
    assert backends["trt-c-0"]["served_model"] == "Llama-3.1-8B-Instruct"


def test_existing_secrets_reach_the_paths_the_config_names():
    release = render((PRODUCTION_VALUES,))
    pod = release.gateway_pod()
    auth = release.gateway_config()["auth"]
    mounts = mounts_by_path(pod)
    keys_dir, keys_file = auth["api_keys_file"].rsplit("/", 1)
    assert mounts[keys_dir]["secret"]["secretName"] == "switchyard-api-keys" and keys_file == "api-keys.yaml"
    jwks_dir, jwks_file = auth["jwt"]["jwks_file"].rsplit("/", 1)
    assert mounts[jwks_dir]["secret"]["secretName"] == "switchyard-jwks" and jwks_file == "jwks.json"
    # Mounted as directories, never subPath, so a rotated Secret reaches the running pod.
    assert not any("subPath" in m for m in container(pod)["volumeMounts"])
    env = {e["name"]: e for e in container(pod)["env"]}
    assert env["SWITCHYARD_REDIS_URL"]["valueFrom"]["secretKeyRef"] == {"name": "switchyard-redis", "key": "url"}
    assert release.gateway_config()["quota_store"]["kind"] == "redis"
    assert not release.all("Secret")  # nothing to make: every secret exists already


def test_chart_made_secrets_hold_the_inline_digests_and_the_redis_url():
    release = render(sets={"auth.apiKeys.entries[0].sha256": "a" * 64, "auth.apiKeys.entries[0].tenant": "acme"})
    secret = release.one("Secret", "sy-switchyard-api-keys")
    assert yaml.safe_load(secret["stringData"]["api-keys.yaml"]) == [{"sha256": "a" * 64, "tenant": "acme"}]
    external = render(sets={"redis.mode": "external", "redis.external.url": "rediss://cache:6380/0"})
    assert external.one("Secret", "sy-switchyard-redis-url")["stringData"]["redis-url"] == "rediss://cache:6380/0"
    with pytest.raises(HelmFailed, match="redis.external.url"):
        render(sets={"redis.mode": "external"})


def test_bundled_redis_is_the_official_image_reachable_only_from_the_gateway():
    release = render((DEVELOPMENT_VALUES,))
    redis = release.one("Deployment", "sy-switchyard-redis")["spec"]["template"]
    assert container(redis)["image"].startswith("redis:")
    env = {e["name"]: e for e in container(release.gateway_pod())["env"]}
    assert env["SWITCHYARD_REDIS_URL"]["value"] == "redis://sy-switchyard-redis:6379/0"
    policy = release.one("NetworkPolicy", "sy-switchyard-redis")
    assert policy["spec"]["ingress"][0]["from"][0]["podSelector"]["matchLabels"]["app.kubernetes.io/component"] == (
        "gateway"
    )


def test_config_checksum_rolls_pods_unless_reload_is_live():
    plain = render().gateway_pod()["metadata"]["annotations"]["checksum/config"]
    edited = render(sets={"config.admission.max_queue": "100"}).gateway_pod()["metadata"]["annotations"]
    assert edited["checksum/config"] != plain
    live = render(sets={"reload.live": "true", "config.admission.max_queue": "100"}).gateway_pod()["metadata"]
    assert "checksum/config" not in live.get("annotations", {})
    assert "reload.live is set" in render_notes(sets={"reload.live": "true"})
    # Live: an edit the gateway reloads rolls nothing; one to a setting it fixes at start still rolls.
    restart_only = live["annotations"]["checksum/config-restart-only"]
    reloaded = render(sets={"reload.live": "true", "config.admission.max_queue": "200"}).gateway_pod()["metadata"]
    assert reloaded["annotations"]["checksum/config-restart-only"] == restart_only
    for fixed in ("config.workers=2", "config.limits.max_headers=50", "config.quota_store.key_prefix=other"):
        key, _, value = fixed.partition("=")
        moved = render(sets={"reload.live": "true", key: value}).gateway_pod()["metadata"]
        assert moved["annotations"]["checksum/config-restart-only"] != restart_only, fixed


def test_gateway_pod_stops_cleanly_and_runs_unprivileged():
    release = render()
    pod = release.gateway_pod()
    gateway = container(pod)
    assert gateway["livenessProbe"]["httpGet"]["path"] == "/healthz"
    assert gateway["readinessProbe"]["httpGet"]["path"] == "/readyz"
    # No preStop sleep: the gateway's own drain keeps serving for its grace while /readyz says 503.
    assert "lifecycle" not in gateway
    drain = release.gateway_config()["drain"]
    assert drain == {"accept_grace_s": 10, "timeout_s": 600}
    assert pod["spec"]["terminationGracePeriodSeconds"] >= 10 + 600 + 5
    slept = container(render(sets={"preStopSleepSeconds": "10", "terminationGracePeriodSeconds": "640"}).gateway_pod())
    assert slept["lifecycle"]["preStop"]["exec"]["command"] == ["sleep", "10"]
    assert pod["spec"]["securityContext"]["runAsNonRoot"] is True
    assert gateway["securityContext"]["readOnlyRootFilesystem"] is True
    assert gateway["securityContext"]["allowPrivilegeEscalation"] is False
    env = {e["name"]: e.get("value") for e in gateway["env"]}
    assert "emptyDir" in mounts_by_path(pod)[env["SWITCHYARD_CACHE_DIR"]]
    assert "emptyDir" in mounts_by_path(pod)["/tmp"]


def test_grace_period_must_cover_the_longest_stream():
    with pytest.raises(HelmFailed, match="terminationGracePeriodSeconds"):
        render(sets={"terminationGracePeriodSeconds": "300"})
    # A backend allowed 20 minutes needs 20 minutes of grace, wherever it is configured.
    with pytest.raises(HelmFailed, match="1200"):
        render(sets={"runtimes.tiny.backend.timeout_s": "1200"})
    render(sets={"runtimes.tiny.backend.timeout_s": "1200", "terminationGracePeriodSeconds": "1230"})
    # The drain's own timeout, when set, is what the grace must cover: longer streams are ended with an error.
    short = {"config.drain.timeout_s": "60", "terminationGracePeriodSeconds": "75"}
    assert render(sets=short).gateway_config()["drain"]["timeout_s"] == 60
    with pytest.raises(HelmFailed, match="preStopSleepSeconds"):
        render(sets={**short, "preStopSleepSeconds": "10"})


def test_autoscaling_on_queue_depth_uses_the_gateway_metric():
    release = render((PRODUCTION_VALUES,))
    hpa = release.one("HorizontalPodAutoscaler", release.fullname)
    (metric,) = hpa["spec"]["metrics"]
    assert metric["pods"]["metric"]["name"] == "switchyard_admission_queue_depth"
    assert metric["pods"]["target"] == {"type": "AverageValue", "averageValue": "8"}
    assert "replicas" not in release.one("Deployment", release.fullname)["spec"]
    cpu = render(sets={"autoscaling.enabled": "true"}).one("HorizontalPodAutoscaler", "sy-switchyard")
    assert cpu["spec"]["metrics"][0]["resource"]["name"] == "cpu"


def test_runtimes_accept_only_the_gateway_and_the_metrics_scrapers():
    release = render((PRODUCTION_VALUES,))
    policy = release.one("NetworkPolicy", "sy-switchyard-runtime-vllm-a")
    peers = policy["spec"]["ingress"][0]["from"]
    assert peers[0]["podSelector"]["matchLabels"]["app.kubernetes.io/component"] == "gateway"
    assert peers[1]["namespaceSelector"]["matchLabels"] == {"kubernetes.io/metadata.name": "monitoring"}
    gateway = release.one("NetworkPolicy", release.fullname)
    callers = {
        rule["ports"][0]["port"]: [
            peer["namespaceSelector"]["matchLabels"]["kubernetes.io/metadata.name"] for peer in rule["from"]
        ]
        for rule in gateway["spec"]["ingress"]
    }
    # The API port to the proxies, the ops port (/metrics) to the scrapers.
    assert callers == {"http": ["ingress-nginx", "gateway-system"], "ops": ["monitoring"]}
    assert gateway["spec"]["policyTypes"] == ["Ingress", "Egress"]
    runtime_selector = gateway["spec"]["egress"][1]["to"][0]["podSelector"]["matchExpressions"][0]
    assert sorted(runtime_selector["values"]) == [
        "runtime-sglang-b",
        "runtime-tgi-d",
        "runtime-trt-c",
        "runtime-vllm-a",
    ]


def test_service_monitors_scrape_each_runtime_on_its_metrics_path():
    release = render((PRODUCTION_VALUES,))
    paths = {m["metadata"]["name"]: m["spec"]["endpoints"][0]["path"] for m in release.all("ServiceMonitor")}
    assert paths == {
        "sy-switchyard": "/metrics",
        "sy-switchyard-rt-vllm-a": "/metrics",
        "sy-switchyard-rt-sglang-b": "/metrics",
        "sy-switchyard-rt-trt-c": "/prometheus/metrics",  # /metrics is TRT-LLM's destructive JSON read
        "sy-switchyard-rt-tgi-d": "/metrics",
    }


def test_dashboard_configmap_carries_the_dashboard_file():
    release = render((PRODUCTION_VALUES,))
    dashboard = release.one("ConfigMap", "sy-switchyard-dashboard")
    assert dashboard["metadata"]["labels"]["grafana_dashboard"] == "1"
    shipped = Path(__file__).resolve().parents[2] / "charts/switchyard/dashboards/switchyard.json"
    assert dashboard["data"]["switchyard.json"].strip() == shipped.read_text().strip()


def test_notes_warn_when_auth_is_off_and_name_the_models():
    notes = render_notes()
    assert "WARNING: auth.mode is none" in notes
    assert "Models served: tiny" in notes
    production = render_notes((PRODUCTION_VALUES,))
    assert "WARNING" not in production and "Authorization: Bearer" in production
    assert "runtime vllm-a (vllm, /models/Llama-3.1-8B-Instruct) -> model llama-3-8b" in production


def runtime_pod(release: Release, name: str) -> dict:
    return release.one("StatefulSet", f"sy-switchyard-rt-{name}")["spec"]["template"]


def test_native_engine_runtime_runs_read_only_with_its_cache_dir():
    pod = runtime_pod(render(), "tiny")
    engine = container(pod)
    assert engine["command"] == ["switchyard", "serve", "--config", "/etc/switchyard-engine/config.yaml"]
    assert engine["securityContext"]["readOnlyRootFilesystem"] is True
    assert pod["spec"]["securityContext"]["runAsNonRoot"] is True
    env = {e["name"]: e["value"] for e in engine["env"]}
    assert "emptyDir" in mounts_by_path(pod)[env["SWITCHYARD_CACHE_DIR"]]
    assert engine["readinessProbe"]["httpGet"]["path"] == "/readyz"


def test_a_llamacpp_runtime_gets_the_flags_the_gateway_reads(tmp_path):
    sets = {
        "runtimes.tiny.enabled": "false",
        "runtimes.cpu.enabled": "true",
        "runtimes.cpu.kind": "llamacpp",
        "runtimes.cpu.model": "/models/tiny.gguf",
    }
    release = render(sets=sets)
    pod = release.one("StatefulSet", "sy-switchyard-rt-cpu")["spec"]["template"]
    llama = container(pod)
    assert llama["command"] == ["/app/llama-server"]
    for flag in ("--model=/models/tiny.gguf", "--alias=cpu", "--port=8080", "--jinja", "--metrics", "--slots"):
        assert flag in llama["args"]
    assert "--parallel=4" in llama["args"] and "--ctx-size=16384" in llama["args"]
    assert llama["readinessProbe"]["httpGet"]["path"] == "/health"
    (backend,) = release.gateway_config()["models"]["cpu"]["backends"]
    assert backend == {  # one backend per pod of the StatefulSet, at its stable name
        "name": "cpu-0",
        "adapter": "llamacpp",
        "url": "http://sy-switchyard-rt-cpu-0.sy-switchyard-rt-cpu:8080",
        "served_model": "cpu",
        "max_inflight": 4,
    }
    status, errors = config_check({"gateway": release.gateway_config_text()}, tmp_path)
    assert status == {"gateway": 0}, errors
