"""Structural checks of the custom resources the chart renders.

kubernetes-validate ships the schemas of Kubernetes' own kinds only, so the
ServiceMonitor and PrometheusRule (monitoring.coreos.com/v1, Prometheus Operator)
and the HTTPRoute (gateway.networking.k8s.io/v1, Gateway API) are checked against
these hand-written subsets of their CRDs' schemas: the fields the chart writes,
their types and patterns, and no field the CRD does not define.
"""

from __future__ import annotations

DURATION = r"^(0|(([0-9]+)y)?(([0-9]+)w)?(([0-9]+)d)?(([0-9]+)h)?(([0-9]+)m)?(([0-9]+)s)?(([0-9]+)ms)?)$"
GATEWAY_DURATION = r"^([0-9]{1,5}(h|m|s|ms)){1,4}$"
STRING_MAP = {"type": "object", "additionalProperties": {"type": "string"}}
LABEL_SELECTOR = {
    "type": "object",
    "additionalProperties": False,
    "properties": {"matchLabels": STRING_MAP, "matchExpressions": {"type": "array"}},
}
METADATA = {
    "type": "object",
    "required": ["name"],
    "properties": {"name": {"type": "string"}, "labels": STRING_MAP, "annotations": STRING_MAP},
}


def _strict(properties: dict, required: list[str] | None = None) -> dict:
    return {"type": "object", "additionalProperties": False, "properties": properties, "required": required or []}


def _resource(api_version: str, kind: str, spec: dict) -> dict:
    return _strict(
        {"apiVersion": {"const": api_version}, "kind": {"const": kind}, "metadata": METADATA, "spec": spec},
        ["apiVersion", "kind", "metadata", "spec"],
    )


SERVICE_MONITOR = _resource(
    "monitoring.coreos.com/v1",
    "ServiceMonitor",
    _strict(
        {
            "selector": LABEL_SELECTOR,
            "namespaceSelector": _strict(
                {"any": {"type": "boolean"}, "matchNames": {"type": "array", "items": {"type": "string"}}}
            ),
            "jobLabel": {"type": "string"},
            "endpoints": {
                "type": "array",
                "minItems": 1,
                "items": _strict(
                    {
                        "port": {"type": "string"},
                        "path": {"type": "string", "pattern": "^/"},
                        "scheme": {"enum": ["http", "https"]},
                        "interval": {"type": "string", "pattern": DURATION},
                        "scrapeTimeout": {"type": "string", "pattern": DURATION},
                        "honorLabels": {"type": "boolean"},
                        "relabelings": {"type": "array"},
                        "metricRelabelings": {"type": "array"},
                    }
                ),
            },
        },
        ["selector", "endpoints"],
    ),
)

PROMETHEUS_RULE = _resource(
    "monitoring.coreos.com/v1",
    "PrometheusRule",
    _strict(
        {
            "groups": {
                "type": "array",
                "items": _strict(
                    {
                        "name": {"type": "string", "minLength": 1},
                        "interval": {"type": "string", "pattern": DURATION},
                        "rules": {
                            "type": "array",
                            "items": _strict(
                                {
                                    "alert": {"type": "string", "minLength": 1},
                                    "record": {"type": "string"},
                                    "expr": {"type": ["string", "integer"]},
                                    "for": {"type": "string", "pattern": DURATION},
                                    "keep_firing_for": {"type": "string", "pattern": DURATION},
                                    "labels": STRING_MAP,
                                    "annotations": STRING_MAP,
                                },
                                ["expr"],
                            ),
                        },
                    },
                    ["name"],
                ),
            }
        },
        ["groups"],
    ),
)

_PARENT_REF = _strict(
    {
        "group": {"type": "string"},
        "kind": {"type": "string"},
        "namespace": {"type": "string"},
        "name": {"type": "string", "minLength": 1},
        "sectionName": {"type": "string"},
        "port": {"type": "integer", "minimum": 1, "maximum": 65535},
    },
    ["name"],
)
_BACKEND_REF = _strict(
    {
        "group": {"type": "string"},
        "kind": {"type": "string"},
        "name": {"type": "string", "minLength": 1},
        "namespace": {"type": "string"},
        "port": {"type": "integer", "minimum": 1, "maximum": 65535},
        "weight": {"type": "integer", "minimum": 0},
        "filters": {"type": "array"},
    },
    ["name"],
)
_MATCH = _strict(
    {
        "path": _strict(
            {
                "type": {"enum": ["Exact", "PathPrefix", "RegularExpression"]},
                "value": {"type": "string", "pattern": "^/"},
            }
        ),
        "headers": {"type": "array"},
        "queryParams": {"type": "array"},
        "method": {"type": "string"},
    }
)
HTTP_ROUTE = _resource(
    "gateway.networking.k8s.io/v1",
    "HTTPRoute",
    _strict(
        {
            "parentRefs": {"type": "array", "minItems": 1, "items": _PARENT_REF},
            "hostnames": {
                "type": "array",
                "items": {
                    "type": "string",
                    "pattern": r"^(\*\.)?[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$",
                },
            },
            "rules": {
                "type": "array",
                "items": _strict(
                    {
                        "name": {"type": "string"},
                        "matches": {"type": "array", "items": _MATCH},
                        "filters": {"type": "array"},
                        "backendRefs": {"type": "array", "items": _BACKEND_REF},
                        "timeouts": _strict(
                            {
                                "request": {"type": "string", "pattern": GATEWAY_DURATION},
                                "backendRequest": {"type": "string", "pattern": GATEWAY_DURATION},
                            }
                        ),
                    }
                ),
            },
        },
        ["parentRefs"],
    ),
)

SHAPES = {
    ("monitoring.coreos.com/v1", "ServiceMonitor"): SERVICE_MONITOR,
    ("monitoring.coreos.com/v1", "PrometheusRule"): PROMETHEUS_RULE,
    ("gateway.networking.k8s.io/v1", "HTTPRoute"): HTTP_ROUTE,
}
