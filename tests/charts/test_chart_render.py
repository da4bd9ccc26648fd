"""The chart renders with its default values, the production-like values and the
development values, passes `helm lint --strict`, and every manifest validates
without a cluster: Kubernetes kinds against the JSON schemas kubernetes-validate
ships (strict: unknown fields fail), custom resources against their CRD shapes."""

from __future__ import annotations

import copy
import re

import jsonschema
import kubernetes_validate
import pytest

from tests.charts.crd_shapes import SHAPES
from tests.charts.helm import PRODUCTION_VALUES, VARIANTS, HelmFailed, Release, helm, render, value_args

# The chart's kubeVersion floor, and the newest Kubernetes the validator knows.
KUBE_VERSIONS = ("1.25", kubernetes_validate.utils.latest_version())
DNS_LABEL = re.compile(r"^[a-z]([-a-z0-9]*[a-z0-9])?$")


@pytest.fixture(scope="module", params=list(VARIANTS))
def variant(request) -> str:
    return request.param


@pytest.fixture(scope="module")
def release(variant) -> Release:
    return render(VARIANTS[variant])


def test_helm_lint_strict_passes(variant):
    out = helm("lint", "--strict", *value_args(VARIANTS[variant]))
    assert "0 chart(s) failed" in out


def test_every_variant_renders_the_core_objects(release):
    kinds = {m["kind"] for m in release.manifests}
    assert {"Deployment", "Service", "ConfigMap", "ServiceAccount", "PodDisruptionBudget", "NetworkPolicy"} <= kinds


@pytest.mark.parametrize("kube_version", KUBE_VERSIONS)
def test_kubernetes_manifests_validate_strictly(release, kube_version):
    checked = 0
    for manifest in release.manifests:
        if (manifest["apiVersion"], manifest["kind"]) in SHAPES:
            continue
        try:
            kubernetes_validate.validate(manifest, kube_version, strict=True)
        except kubernetes_validate.ValidationError as exc:
            where = ".".join(str(p) for p in exc.path)
            pytest.fail(f"{manifest['kind']} {manifest['metadata']['name']}: {where}: {exc.message}")
        checked += 1
    assert checked >= 8


def test_custom_resources_match_their_crd_shapes():
    release = render((PRODUCTION_VALUES,))
    seen = set()
    for manifest in release.manifests:
        key = (manifest["apiVersion"], manifest["kind"])
        if key not in SHAPES:
            continue
        with pytest.raises(kubernetes_validate.SchemaNotFoundError):
            kubernetes_validate.validate(manifest, KUBE_VERSIONS[-1], strict=True)
        jsonschema.validate(manifest, SHAPES[key])
        seen.add(manifest["kind"])
    assert seen == {"ServiceMonitor", "PrometheusRule", "HTTPRoute"}


def test_the_validators_reject_a_broken_manifest():
    release = render()
    deployment = copy.deepcopy(release.one("Deployment", release.fullname))
    deployment["spec"]["template"]["spec"]["containers"][0]["readOnlyRootFilesystem"] = True
    with pytest.raises(kubernetes_validate.ValidationError):
        kubernetes_validate.validate(deployment, KUBE_VERSIONS[-1], strict=True)
    route = copy.deepcopy(render((PRODUCTION_VALUES,)).one("HTTPRoute", "sy-switchyard"))
    route["spec"]["rules"][0]["timeout"] = "10s"
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.validate(route, SHAPES[("gateway.networking.k8s.io/v1", "HTTPRoute")])


def test_names_and_label_values_fit_kubernetes_limits(release):
    for manifest in release.manifests:
        name = manifest["metadata"]["name"]
        assert len(name) <= 63 and DNS_LABEL.match(name), name
        for key, value in manifest["metadata"].get("labels", {}).items():
            assert len(str(value)) <= 63, (name, key, value)


def test_long_release_names_are_cut_to_63_characters_without_collisions():
    release = render((PRODUCTION_VALUES,), name="a-release-name-at-the-53-character-limit-of-helm-abcd")
    names = [(m["kind"], m["metadata"]["name"]) for m in release.manifests]
    assert all(len(name) <= 63 and DNS_LABEL.match(name) for _, name in names), names
    assert len(set(names)) == len(names)


def test_values_the_schema_refuses_stop_the_render():
    with pytest.raises(HelmFailed, match="runtimes.bad.kind"):
        render(sets={"runtimes.bad.kind": "ollama", "runtimes.bad.model": "m"})
    with pytest.raises(HelmFailed, match="config"):  # the chart owns `listen`
        render(sets={"config.listen.port": "9000"})
    with pytest.raises(HelmFailed, match="autoscaling.metric"):
        render(sets={"autoscaling.enabled": "true", "autoscaling.metric": "memory"})
