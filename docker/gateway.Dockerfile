# syntax=docker/dockerfile:1
# The gateway image: Switchyard's base dependencies only (no torch, no engine extra).
# Build from the repository root:
#   docker build -f docker/gateway.Dockerfile -t switchyard/gateway:0.1.0 .
# Pinned by digest (the multi-arch index of this tag): a rebuild gets the same base;
# raise the tag and digest together.
ARG PYTHON_IMAGE=python:3.11.10-slim-bookworm@sha256:5148c0e4bbb64271bca1d3322360ebf4bfb7564507ae32dd639322e4952a6b16

FROM ${PYTHON_IMAGE} AS build
ENV PIP_DISABLE_PIP_VERSION_CHECK=1 PIP_NO_CACHE_DIR=1
RUN python -m venv /opt/switchyard
WORKDIR /src
COPY pyproject.toml README.md ./
COPY gateway ./gateway
COPY adapters ./adapters
COPY policies ./policies
COPY stores ./stores
COPY engine ./engine
COPY simulators ./simulators
COPY conformance ./conformance
COPY bench ./bench
COPY processes ./processes
COPY bakeoff ./bakeoff
# `.[kv-events,otel]`: the gateway's dependencies as pyproject.toml lists them plus the
# KV-event subscriber (pyzmq, msgpack) for precise prefix routing and the OTLP trace
# exporter (tracing stays off unless configured); no torch, openai,
# httpx or numpy (`switchyard` imports only the command it runs).
RUN /opt/switchyard/bin/pip install --no-cache-dir ".[kv-events,otel]"

FROM ${PYTHON_IMAGE}
ENV PATH=/opt/switchyard/bin:$PATH \
    PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1 \
    SWITCHYARD_CACHE_DIR=/var/cache/switchyard
RUN groupadd --system --gid 10001 switchyard \
    && useradd --system --uid 10001 --gid 10001 --home-dir /nonexistent --no-create-home switchyard \
    && mkdir -p /var/cache/switchyard /etc/switchyard/config \
    && chown 10001:10001 /var/cache/switchyard
COPY --from=build /opt/switchyard /opt/switchyard
USER 10001:10001
EXPOSE 8080
# The listen port is the config's; SWITCHYARD_PORT, when set, overrides it for the check too.
HEALTHCHECK --interval=15s --timeout=3s --start-period=10s --retries=3 \
    CMD ["python", "-c", "import os, urllib.request; urllib.request.urlopen('http://127.0.0.1:%s/healthz' % os.environ.get('SWITCHYARD_PORT', '8080'), timeout=2)"]
ENTRYPOINT ["switchyard"]
CMD ["serve", "--config", "/etc/switchyard/config/config.yaml"]
