# syntax=docker/dockerfile:1
# The native engine image: Switchyard with the `engine` extra on CPU torch 2.13.0.
# Build from the repository root:
#   docker build -f docker/engine.Dockerfile -t switchyard/engine:0.1.0 .
# TORCH_INDEX_URL names the index of the CPU build of torch (the default index
# serves the CUDA build on Linux); point it at a mirror if you use one.
# Pinned by digest (the multi-arch index of this tag): a rebuild gets the same base;
# raise the tag and digest together.
ARG PYTHON_IMAGE=python:3.11.10-slim-bookworm@sha256:5148c0e4bbb64271bca1d3322360ebf4bfb7564507ae32dd639322e4952a6b16

FROM ${PYTHON_IMAGE} AS build
ARG TORCH_INDEX_URL=https://download.pytorch.org/whl/cpu
ENV PIP_DISABLE_PIP_VERSION_CHECK=1 PIP_NO_CACHE_DIR=1
RUN python -m venv /opt/switchyard \
    && /opt/switchyard/bin/pip install --no-cache-dir --index-url "${TORCH_INDEX_URL}" torch==2.13.0
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
# The engine extra pins torch==2.13.0, which the CPU build above already satisfies.
RUN /opt/switchyard/bin/pip install --no-cache-dir ".[engine]"

FROM ${PYTHON_IMAGE}
ENV PATH=/opt/switchyard/bin:$PATH \
    PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1 \
    OMP_NUM_THREADS=1 \
    SWITCHYARD_CACHE_DIR=/var/cache/switchyard
RUN groupadd --system --gid 10001 switchyard \
    && useradd --system --uid 10001 --gid 10001 --home-dir /nonexistent --no-create-home switchyard \
    && mkdir -p /var/cache/switchyard \
    && chown 10001:10001 /var/cache/switchyard
COPY --from=build /opt/switchyard /opt/switchyard
COPY docker/engine.yaml /etc/switchyard/engine.yaml
USER 10001:10001
EXPOSE 8000
# Built-in models are built on first start into SWITCHYARD_CACHE_DIR; give that time.
HEALTHCHECK --interval=15s --timeout=3s --start-period=120s --retries=3 \
    CMD ["python", "-c", "import os, urllib.request; urllib.request.urlopen('http://127.0.0.1:%s/healthz' % os.environ.get('SWITCHYARD_PORT', '8000'), timeout=2)"]
ENTRYPOINT ["switchyard"]
CMD ["serve", "--config", "/etc/switchyard/engine.yaml"]
