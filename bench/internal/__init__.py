"""Benchmarks that time one internal part of the gateway in process, where HTTP
noise would hide it: the quota check (`quota_check`) and the gateway's own
upstream HTTP client against aiohttp and httpx (`client_choice`).

The one package under bench/ allowed to import `gateway/` and `adapters/`
(docs/architecture.md, Layout). The rest of bench/ judges from outside over
HTTP and never imports this package: `bench.quota_bench` runs `quota_check` as
a child process and reads its JSON.
"""
