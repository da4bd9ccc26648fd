"""gateway/app.py with an in-process engine behind it (adapter native, builtin:tiny):
what only such a backend shows of the wiring, embeddings served and the engine's
metrics in the gateway's registry. Kept out of app.py's mutation test list for the
engine's build (seconds a test): docs/mutation/survivors/app.toml names what it pins."""

from __future__ import annotations

from tests.gateway.test_app_parts import config, served
from tests.procs import sample_value


async def test_embeddings_reach_the_runtime_and_an_in_process_engines_metrics_the_gateways_registry():
    models = {"m": {"backends": [{"name": "e", "adapter": "native", "model_path": "builtin:tiny"}]}}
    async with served(config(models)) as (gw, _, client):
        answer = await client.post("/v1/embeddings", json={"model": "m", "input": "hi"})
        assert answer.status_code == 200 and answer.json()["data"][0]["object"] == "embedding"
        labels = {"backend": "e", "model": "m", "status": "200", "track": ""}
        assert sample_value(gw.metrics.registry, "switchyard_requests_total", labels) == 1
        assert 'switchyard_engine_step_seconds_count{engine="e"}' in (await client.get("/metrics")).text
