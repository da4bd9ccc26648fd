"""Every runtime error shape from docs/runtimes.md §1.7, §2.8, §3.7, §4.8 and §5,
decoded by each adapter into the gateway's error with the right status, and the
one table of upstream statuses that the generic adapter shares with the runtimes'."""

from __future__ import annotations

import orjson
import pytest

from adapters.openai import OpenAIDialect
from adapters.runtime_errors import parse_error_body
from adapters.sglang import SGLangDialect
from adapters.tgi import TGIDialect
from adapters.trtllm import TRTLLMDialect
from adapters.vllm import VLLMDialect
from tests.adapters.wire_samples import SGLANG_QUEUE_FULL

VLLM = VLLMDialect("vllm-a")
SGL = SGLangDialect("sglang-a")
TRT = TRTLLMDialect("trtllm-a")
TGI = TGIDialect("tgi-a")


def b(obj) -> bytes:
    return orjson.dumps(obj)


def nested(message: str, type_: str, code: int | None, **param: str | None) -> bytes:
    """The nested envelope {"error": {...}} (OpenAI's, vLLM's); `param` only when given."""
    return b({"error": {"message": message, "type": type_, **param, "code": code}})


def flat(message: str, type_: str = "BadRequestError", code: int = 400) -> bytes:
    """The flat error object SGLang and TRT-LLM send."""
    return b({"object": "error", "message": message, "type": type_, "param": None, "code": code})


@pytest.mark.parametrize(
    "body, message, code",
    [
        (nested("m1", "BadRequestError", 400, param=None), "m1", 400),
        (flat("m2"), "m2", 400),
        (b({"error": "m3"}), "m3", None),
        (b({"error": "m4", "error_type": "validation"}), "m4", None),
        (b({"error": {"message": "m5", "http_status_code": 422}}), "m5", 422),
        (b({"error": {"message": "m6"}}), "m6", None),
        (
            b"Failed to deserialize the JSON body into the target type",
            "Failed to deserialize the JSON body into the target type",
            None,
        ),
        (b"", "", None),
    ],
)
def test_every_body_shape_is_read(body, message, code):
    parsed = parse_error_body(body)
    assert parsed.message == message
    assert parsed.code == code


# ---- vLLM --------------------------------------------------------------------


def test_vllm_context_length_is_context_length_exceeded():
    message = (
        "This model's maximum context length is 1024 tokens. However, your prompt "
        "contains 2000 input tokens, which exceeds this limit even without any output tokens."
    )
    err = VLLM.error(400, nested(message, "BadRequestError", 400, param="input_tokens"))
    assert (err.status, err.code, err.param) == (400, "context_length_exceeded", "messages")
    assert "1024" in err.message


def test_vllm_input_length_message_is_context_length_exceeded():
    message = "Input length (3000) exceeds model's maximum context length (1024)."
    err = VLLM.error(400, nested(message, "BadRequestError", 400))
    assert err.code == "context_length_exceeded"


def test_vllm_validation_keeps_400_and_param():
    err = VLLM.error(400, nested("1 validation error", "Bad Request", 400, param="temperature"))
    assert (err.status, err.param, err.type) == (400, "temperature", "invalid_request_error")


def test_vllm_in_stream_error_uses_the_body_code():
    # The base adapter reports an in-stream error as status 500.
    err = VLLM.error(500, nested("bad logits processor", "BadRequestError", 400, param=None))
    assert err.status == 400
    err = VLLM.error(500, nested("engine crashed", "InternalServerError", 500, param=None))
    assert (err.status, err.code) == (502, "upstream_error")


def test_vllm_queue_limit_503_is_retryable():
    err = VLLM.error(503, nested("The engine is currently busy", "Service Unavailable", 503))
    assert err.status == 503 and err.fails_over


def test_vllm_unknown_model_404_is_a_backend_fault():
    err = VLLM.error(404, nested("The model `x` does not exist.", "NotFoundError", 404, param="model"))
    assert err.status == 502 and err.fails_over and "vLLM" in err.message


def test_vllm_bad_key_is_not_the_clients_fault():
    err = VLLM.error(401, b({"error": "Unauthorized"}))
    assert err.status == 502 and "credentials" in err.message


def test_vllm_flat_pre_0_10_shape():
    err = VLLM.error(
        400,
        b(
            {
                "object": "error",
                "message": "This model's maximum context length is 4096 tokens. However, you requested 5000 tokens",
                "code": 400,
            }
        ),
    )
    assert err.code == "context_length_exceeded"


# ---- SGLang ------------------------------------------------------------------


@pytest.mark.parametrize(
    "message",
    [
        "The input (5000 tokens) is longer than the model's context length (4096 tokens).",
        "Requested token count exceeds the model's maximum context length of 4096 tokens. You requested a total of "
        "5000 tokens: 4000 tokens from the input messages and 1000 tokens for the completion.",
    ],
)
def test_sglang_context_messages(message):
    err = SGL.error(400, flat(message))
    assert (err.status, err.code) == (400, "context_length_exceeded")


def test_sglang_queue_full_non_stream_type_is_the_string_503():
    err = SGL.error(503, flat("The request queue is full.", "503", 503))
    assert err.status == 503 and err.fails_over


def test_sglang_queue_full_in_stream():
    err = SGL.error(500, b(SGLANG_QUEUE_FULL))
    assert err.status == 503


def test_sglang_internal_error_is_502():
    err = SGL.error(500, flat("Internal server error: boom", "InternalServerError", 500))
    assert err.status == 502 and "SGLang" in err.message


# ---- TRT-LLM -----------------------------------------------------------------


@pytest.mark.parametrize(
    "message",
    [
        "The sum of prompt length (4000.0), query length (0) should not exceed max_num_tokens (2048)",
        "The sum of prompt length (4000) and query length (0) max_tokens (16) should not exceed max_seq_len (2048)",
    ],
)
def test_trtllm_context_messages(message):
    err = TRT.error(400, flat(message))
    assert err.code == "context_length_exceeded"


def test_trtllm_string_error_is_a_400():
    err = TRT.error(
        400,
        b(
            {
                "error": "1 validation error for ChatCompletionRequest\nparallel_tool_calls\n  "
                "Extra inputs are not permitted"
            }
        ),
    )
    assert err.status == 400 and "Extra inputs" in err.message


def test_trtllm_generation_failure_sent_as_400_is_502():
    err = TRT.error(400, flat("Generation failed: executor error"))
    assert (err.status, err.code) == (502, "upstream_error")


def test_trtllm_completions_in_stream_error_without_code():
    err = TRT.error(500, nested("boom", "server_error", None, param=None))
    assert err.status == 502


# ---- TGI -----------------------------------------------------------------------


def test_tgi_validation_422_is_400():
    err = TGI.error(
        422, b({"error": "Input validation error: `top_p` must be > 0.0 and < 1.0", "error_type": "validation"})
    )
    assert err.status == 400 and "top_p" in err.message


@pytest.mark.parametrize(
    "message",
    [
        "Input validation error: `inputs` tokens + `max_new_tokens` must be <= 4096. Given: 4000 `inputs` tokens and "
        "200 `max_new_tokens`",
        "Input validation error: `inputs` must have less than 4096 tokens. Given: 5000",
    ],
)
def test_tgi_context_messages(message):
    err = TGI.error(422, b({"error": message, "error_type": "validation"}))
    assert (err.status, err.code) == (400, "context_length_exceeded")


def test_tgi_context_message_in_stream():
    err = TGI.error(
        500,
        b(
            {
                "error": {
                    "message": "Input validation error: `inputs` must have less than 100 tokens. Given: 150",
                    "http_status_code": 422,
                }
            }
        ),
    )
    assert err.code == "context_length_exceeded"


def test_tgi_overload_429_and_in_stream():
    err = TGI.error(429, b({"error": "Model is overloaded", "error_type": "overloaded"}))
    assert err.status == 429 and err.fails_over
    err = TGI.error(500, b({"error": {"message": "Model is overloaded", "http_status_code": 422}}))
    assert err.status == 429


def test_tgi_generation_424_and_incomplete_500_are_502():
    assert TGI.error(424, b({"error": "Request failed during generation: x", "error_type": "generation"})).status == 502
    assert TGI.error(500, b({"error": "Incomplete generation", "error_type": "incomplete_generation"})).status == 502
    err = TGI.error(500, b({"error": {"message": "Incomplete generation", "http_status_code": 422}}))
    assert err.status == 502


def test_tgi_plain_text_axum_rejection_is_400():
    err = TGI.error(422, b"Failed to deserialize the JSON body into the target type: stop: invalid type: string")
    assert err.status == 400 and "deserialize" in err.message


def test_tgi_empty_401():
    err = TGI.error(401, b"")
    assert err.status == 502 and err.fails_over


# ---- the one table, the same for every adapter ---------------------------------------

OPENAI = OpenAIDialect("openai-a")


@pytest.mark.parametrize("adapter", [OPENAI, VLLM, SGL, TRT, TGI], ids=lambda a: a.runtime)
@pytest.mark.parametrize(
    "upstream, status, code, fails",
    [
        (400, 400, None, False),
        (413, 400, None, False),
        (418, 400, None, False),
        (422, 400, None, False),
        # The gateway authenticated the client and maps the model itself: these are
        # deployment faults, and another backend may be set up right.
        (401, 502, "upstream_error", True),
        (403, 502, "upstream_error", True),
        (404, 502, "upstream_error", True),
        (429, 429, "upstream_overloaded", True),
        (408, 503, "backend_unavailable", True),
        (502, 503, "backend_unavailable", True),
        (503, 503, "backend_unavailable", True),
        (504, 503, "backend_unavailable", True),
        (500, 502, "upstream_error", True),
        (501, 400, "unsupported_by_backend", False),
    ],
)
def test_one_status_table_for_every_adapter(adapter, upstream, status, code, fails):
    err = adapter.error(upstream, b({"error": {"message": "nope"}}))
    assert (err.status, err.code, err.fails_over) == (status, code, fails)
    assert "nope" in err.message
    # A tenant reads the message: it never names the backend or its address (the log does).
    assert adapter.backend not in err.message and "127.0.0.1" not in err.message


def test_a_string_code_of_a_client_mistake_is_kept():
    body = b(
        {
            "error": {
                "message": "too long",
                "type": "invalid_request_error",
                "param": "messages",
                "code": "context_length_exceeded",
            }
        }
    )
    err = OPENAI.error(400, body)
    assert (err.status, err.code, err.param, err.type) == (
        400,
        "context_length_exceeded",
        "messages",
        "invalid_request_error",
    )
