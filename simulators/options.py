"""Command-line options shared by every simulator, and the per-runtime extras.

One `SimOptions` instance configures one simulator process. Flags that exist on
the real runtime keep the runtime's meaning (for example `--enable-prompt-tokens-details`
on vLLM, `--enable-cache-report` on SGLang); flags that only steer the double
(token source timing, faults, startup delay) are the same for all four.
"""

from __future__ import annotations

import argparse
from dataclasses import dataclass, fields

KINDS = ("vllm", "sglang", "trtllm", "tgi")

# Ports each runtime listens on by default (docs/runtimes.md §1.1, §2.1, §3.1, §4.1).
DEFAULT_PORTS = {"vllm": 8000, "sglang": 30000, "trtllm": 8000, "tgi": 3000}


@dataclass
class SimOptions:
    kind: str
    host: str = "127.0.0.1"
    port: int = 0
    model_name: str = "sim-model"
    source: str = "synthetic"  # synthetic | engine
    model_dir: str | None = None
    ttft_ms: float = 0.0
    itl_ms: float = 0.0
    output_tokens: int = 16
    max_model_len: int = 4096
    startup_delay: float = 0.0
    seed: int = 0
    fault: str | None = None  # the same syntax as the prompt marker, applied to every request
    max_num_seqs: int | None = None  # engine batch size; more requests wait in a queue
    api_key: str | None = None
    # vLLM
    enable_auto_tool_choice: bool = False
    tool_call_parser: str | None = None
    enable_prompt_tokens_details: bool = False
    enable_force_include_usage: bool = False
    max_num_queued_reqs: int | None = None
    runner: str = "generate"  # generate | pooling (an embedding model: /v1/embeddings, no generation)
    kv_events_config: str | None = None  # vLLM's JSON KVEventsConfig
    num_gpu_blocks_override: int | None = None  # prefix-cache size in 16-token blocks (one is the null block)
    prefill_ms_per_token: float = 0.0  # the modelled device (synthetic source); 0: off
    default_system_prompt: str | None = None  # the chat template's own system message (as Qwen2.5's adds)
    # vLLM and SGLang embedding models
    is_matryoshka: bool = False  # `dimensions` may shorten vectors (the model config's flag)
    embedding_dim: int = 64
    # SGLang
    enable_metrics: bool = False
    enable_cache_report: bool = False
    warmup_delay: float = 0.0
    health_latency: float = 1.0
    disconnect_abort_delay: float | None = None  # None: the runtime's own default
    max_queued_requests: int | None = None
    stream_response_default_include_usage: bool = False
    is_embedding: bool = False
    check_model_name: bool = False  # newer main: a model other than the served name is a 400
    # TRT-LLM
    max_num_tokens: int | None = None
    return_perf_metrics: bool = False
    # TGI
    tgi_version: str = "3.3"
    max_concurrent_requests: int = 128
    max_stop_sequences: int = 4

    @property
    def tool_parser_enabled(self) -> bool:
        return bool(self.tool_call_parser)


# Numeric flags every simulator takes; their defaults are SimOptions'.
_NUMBER_FLAGS: tuple[tuple[str, type, str], ...] = (
    ("--ttft-ms", float, "synthetic: time to first token"),
    ("--itl-ms", float, "synthetic: inter-token latency"),
    ("--output-tokens", int, "synthetic: tokens generated before EOS (max_tokens still caps it)"),
    ("--max-model-len", int, "context window in tokens"),
    ("--startup-delay", float, "seconds of 'model loading' during which connections are refused"),
    ("--seed", int, "seed of the synthetic text"),
    ("--max-num-seqs", int, "requests generated at once; more wait in the queue (and count as waiting)"),
)


def add_common_arguments(parser: argparse.ArgumentParser, kind: str) -> None:
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=DEFAULT_PORTS[kind])
    parser.add_argument(
        "--model-name",
        "--served-model-name",
        dest="model_name",
        default="sim-model",
        help="served model name (TGI: the model_id)",
    )
    parser.add_argument("--source", choices=("synthetic", "engine"), default="synthetic")
    parser.add_argument("--model-dir", default=None, help="model directory for --source engine")
    for flag, type_, help_ in _NUMBER_FLAGS:
        default = getattr(SimOptions, flag.removeprefix("--").replace("-", "_"))
        parser.add_argument(flag, type=type_, default=default, help=help_)
    parser.add_argument(
        "--fault",
        default=None,
        help="fault applied to every request, marker syntax without brackets, "
        "e.g. 'error_after=3' (see simulators/README.md)",
    )
    if kind in ("vllm", "sglang", "tgi"):  # trtllm-serve has no API key option
        parser.add_argument("--api-key", default=None, help="require `Authorization: Bearer KEY`")
    if kind == "vllm":
        parser.add_argument("--enable-auto-tool-choice", action="store_true")
        parser.add_argument("--tool-call-parser", default=None)
        parser.add_argument("--enable-prompt-tokens-details", action="store_true")
        parser.add_argument("--enable-force-include-usage", action="store_true")
        parser.add_argument("--max-num-queued-reqs", type=int, default=None)
        parser.add_argument(
            "--runner",
            choices=("generate", "pooling"),
            default="generate",
            help="pooling: an embedding model (/v1/embeddings served, the generation routes not)",
        )
        _add_embedding_arguments(parser)
        parser.add_argument(
            "--kv-events-config",
            type=_kv_events_config,
            default=None,
            help='vLLM\'s KV-cache events, e.g. \'{"enable_kv_cache_events": true, "publisher": "zmq", '
            '"endpoint": "tcp://*:5557", "replay_endpoint": "tcp://*:5558"}\'',
        )
        parser.add_argument(
            "--num-gpu-blocks-override", type=int, default=None, help="KV-cache blocks of 16 tokens (LRU eviction)"
        )
        parser.add_argument(
            "--prefill-ms-per-token",
            type=float,
            default=0.0,
            help="simulator only: one prefill at a time, lasting ttft + F x uncached prompt tokens (0: off)",
        )
        parser.add_argument(
            "--default-system-prompt",
            default=None,
            help="simulator only: a chat template that renders this system message when a chat has none "
            "(another template than the default's: chat prompts count more tokens and answer otherwise)",
        )
    elif kind == "sglang":
        parser.add_argument("--tool-call-parser", default=None)
        parser.add_argument("--enable-metrics", action="store_true")
        parser.add_argument("--enable-cache-report", action="store_true")
        parser.add_argument(
            "--warmup-delay", type=float, default=0.0, help="seconds after binding during which /health answers 503"
        )
        parser.add_argument(
            "--health-latency",
            type=float,
            default=1.0,
            help="seconds /health takes once ready (SGLang polls its probe once a second)",
        )
        parser.add_argument(
            "--disconnect-abort-delay",
            type=float,
            default=None,
            help="seconds between a client disconnect and the abort (SGLang: 2)",
        )
        parser.add_argument("--max-queued-requests", type=int, default=None)
        parser.add_argument("--stream-response-default-include-usage", action="store_true")
        parser.add_argument("--is-embedding", action="store_true", help="an embedding model: /v1/embeddings answers")
        parser.add_argument(
            "--check-model-name",
            action="store_true",
            help="as newer SGLang main: refuse a model other than the served name (400); 0.5.23 echoes any",
        )
        _add_embedding_arguments(parser)
    elif kind == "trtllm":
        parser.add_argument(
            "--tool-parser", "--tool_parser", "--tool-call-parser", dest="tool_call_parser", default=None
        )
        parser.add_argument(
            "--max-num-tokens",
            "--max_num_tokens",
            dest="max_num_tokens",
            type=int,
            default=None,
            help="prompt-length limit (default: --max-model-len)",
        )
        parser.add_argument(
            "--return-perf-metrics",
            "--return_perf_metrics",
            dest="return_perf_metrics",
            action="store_true",
            help="mount /prometheus/metrics",
        )
        parser.add_argument(
            "--disconnect-abort-delay",
            type=float,
            default=None,
            help="poll period of the disconnect check (TRT-LLM: 1 s)",
        )
    elif kind == "tgi":
        parser.add_argument(
            "--tgi-version", choices=("3.1", "3.3"), default="3.3", help="3.1 reproduces the pre-3.2 tool-call shapes"
        )
        parser.add_argument("--max-concurrent-requests", type=int, default=128)
        parser.add_argument("--max-stop-sequences", type=int, default=4)


def _kv_events_config(text: str) -> str:
    """vLLM's KVEventsConfig JSON, checked here so a bad one is a usage error."""
    from simulators.vllm_kv_events import KVEventsConfig

    try:
        KVEventsConfig.parse(text)
    except (TypeError, ValueError) as exc:
        raise argparse.ArgumentTypeError(str(exc)) from exc
    return text


def _add_embedding_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--is-matryoshka",
        action="store_true",
        help="the model takes `dimensions` (vLLM: --hf-overrides '{\"is_matryoshka\": true}')",
    )
    parser.add_argument("--embedding-dim", type=int, default=SimOptions.embedding_dim, help="embedding vector size")


def options_from_args(kind: str, args: argparse.Namespace) -> SimOptions:
    known = {f.name for f in fields(SimOptions)}
    values = {k: v for k, v in vars(args).items() if k in known}
    values["kind"] = kind
    return SimOptions(**values)
