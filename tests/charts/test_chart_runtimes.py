"""Runtime workloads fit for a GPU fleet: a StatefulSet per runtime behind a headless
Service (a backend per pod, at its stable name), the KV-event publisher wired and
opened to the gateway alone, CPU and memory requests on GPU pods, a grace period that
covers the longest request, a PDB, an update that needs no spare GPU, a model cache,
ServiceMonitors that can scrape, and the runtime releases the adapters target."""

from __future__ import annotations

import json

import pytest

from tests.charts.helm import PRODUCTION_VALUES, HelmFailed, render
from tests.charts.test_chart_config import container, mounts_by_path

GPU_RUNTIMES = ("vllm-a", "sglang-b", "trt-c", "tgi-d")


def statefulset(release, name: str) -> dict:
    return release.one("StatefulSet", f"sy-switchyard-rt-{name}")


@pytest.fixture(scope="module")
def production():
    return render((PRODUCTION_VALUES,))


def test_kv_events_are_published_wired_per_pod_and_open_to_the_gateway_only(production):
    backends = {b["name"]: b for b in production.gateway_config()["models"]["llama-3-8b"]["backends"]}
    for name, kind in (("vllm-a", "vllm"), ("sglang-b", "sglang")):
        engine = container(statefulset(production, name)["spec"]["template"])
        flag = next(a for a in engine["args"] if a.startswith("--kv-events-config="))
        events = json.loads(flag.partition("=")[2])
        assert events["publisher"] == "zmq" and events["endpoint"] == "tcp://*:5557"  # a wildcard: it binds
        assert events.get("enable_kv_cache_events", kind == "sglang") is True
        assert {"name": "kv-events", "containerPort": 5557, "protocol": "TCP"} in engine["ports"]
        host = f"sy-switchyard-rt-{name}-0.sy-switchyard-rt-{name}"
        assert backends[f"{name}-0"]["kv_events"] == {"endpoint": f"tcp://{host}:5557", "topic": events["topic"]}
        policy = production.one("NetworkPolicy", f"sy-switchyard-runtime-{name}")
        rules = {r["ports"][0]["port"]: r["from"] for r in policy["spec"]["ingress"]}
        gateway_only = [
            {
                "podSelector": {
                    "matchLabels": {
                        "app.kubernetes.io/name": "switchyard",
                        "app.kubernetes.io/instance": "sy",
                        "app.kubernetes.io/component": "gateway",
                    }
                }
            }
        ]
        assert rules["kv-events"] == gateway_only and len(rules["http"]) == 2  # and the scrapers on http
    assert "kv_events" not in backends["tgi-d-0"] and "kv_events" not in backends["trt-c-0"]


def test_gpu_pods_request_cpu_and_memory_and_stop_after_their_longest_request(production):
    for name in GPU_RUNTIMES:
        pod = statefulset(production, name)["spec"]["template"]
        resources = container(pod)["resources"]
        assert resources["limits"]["nvidia.com/gpu"] == 1
        assert {"cpu", "memory"} <= set(resources["requests"]), name  # never BestEffort
        assert pod["spec"]["terminationGracePeriodSeconds"] >= 900 + 30, name  # backend timeout_s 900
    with pytest.raises(HelmFailed, match="terminationGracePeriodSeconds"):
        render((PRODUCTION_VALUES,), sets={"runtimes.vllm-a.terminationGracePeriodSeconds": "60"})


def test_updates_need_no_spare_gpu_and_a_drain_takes_one_pod_at_a_time(production):
    for name in GPU_RUNTIMES:
        workload = statefulset(production, name)
        assert workload["spec"]["updateStrategy"] == {"type": "RollingUpdate"}  # stop, then start: no surge
        pdb = production.one("PodDisruptionBudget", f"sy-switchyard-rt-{name}")
        assert pdb["spec"]["maxUnavailable"] == 1
        labels = workload["spec"]["template"]["metadata"]["labels"]
        assert pdb["spec"]["selector"]["matchLabels"].items() <= labels.items()
    assert not [d for d in production.all("Deployment") if "-rt-" in d["metadata"]["name"]]


def test_a_model_cache_is_mounted_as_hf_home_and_kept_per_pod_when_sized(production):
    pod = statefulset(production, "vllm-a")["spec"]["template"]
    env = {e["name"]: e.get("value") for e in container(pod)["env"]}
    assert "emptyDir" in mounts_by_path(pod)[env["HF_HOME"]]
    sized = render((PRODUCTION_VALUES,), sets={"runtimes.vllm-a.modelCache.size": "500Gi"})
    workload = statefulset(sized, "vllm-a")
    claim = workload["spec"]["volumeClaimTemplates"][0]
    assert claim["metadata"]["name"] == "model-cache" and claim["spec"]["resources"]["requests"]["storage"] == "500Gi"
    mount = next(m for m in container(workload["spec"]["template"])["volumeMounts"] if m["name"] == "model-cache")
    assert mount["mountPath"] == "/model-cache"


def test_runtime_service_monitors_select_a_service_with_their_port_and_need_metrics_from(production):
    for name in GPU_RUNTIMES:
        monitor = production.one("ServiceMonitor", f"sy-switchyard-rt-{name}")
        wanted = monitor["spec"]["selector"]["matchLabels"]
        services = [s for s in production.all("Service") if wanted.items() <= s["metadata"]["labels"].items()]
        assert len(services) == 1 and monitor["spec"]["endpoints"][0]["port"] in {
            p["name"] for p in services[0]["spec"]["ports"]
        }
    with pytest.raises(HelmFailed, match="metricsFrom"):
        render(sets={"metrics.serviceMonitor.enabled": "true"})


def test_images_are_the_releases_the_adapters_target_and_a_digest_pins_them(production):
    images = {name: container(statefulset(production, name)["spec"]["template"])["image"] for name in GPU_RUNTIMES}
    assert images["vllm-a"] == "vllm/vllm-openai:v0.33.0"
    assert images["sglang-b"].startswith("lmsysorg/sglang:v0.5.23")
    digest = "sha256:" + "a" * 64
    pinned = render((PRODUCTION_VALUES,), sets={"runtimes.vllm-a.image.digest": digest})
    assert container(statefulset(pinned, "vllm-a")["spec"]["template"])["image"] == f"vllm/vllm-openai:v0.33.0@{digest}"
