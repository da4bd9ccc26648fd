"""What scripts/record_sglang.py asks SGLang, and what its stub model answers.

Our own prompts and texts. Each case: the request, and per request the scheduler
receives (n > 1 and lists of prompts send several, answered in the order received)
the pieces of text it streams back, one token each, and how it finishes: "eos" (the
EOS token), "stop:<s>" (a stop string, already trimmed from the text as SGLang's
detokenizer does), "length", or "queue_full" (the scheduler's own abort of a request
its queue cannot hold).
"""

from __future__ import annotations

from typing import Any

SGLANG_VERSION = "0.5.23"
SERVED = "sgl-rec-model"
CONTEXT = 1000

# Every piece of text the stub scheduler ever sends is one token of the made-up
# tokenizer, so that a logprob's token text is exactly the piece it stands for.
CALL = '<tool_call>\n{"name": "get_weather", "arguments": {"city": "Lyon", "unit": "celsius"}}\n</tool_call>'
PIECES = {
    "plain": ["Rivers", " carry", " water", " to", " the", " sea", "."],
    "short": ["Rivers", " carry", " water"],
    "stop": ["Rivers", " carry", " water", " to", " the", " sea"],
    "tool": [
        "<tool_call>",
        "\n",
        '{"name": "get_weather", ',
        '"arguments": {"city": "Lyon", ',
        '"unit": "celsius"}}',
        "\n",
        "</tool_call>",
    ],
    "poem": [" A", " river", " runs"],
    "poem2": [" The", " tide", " turns"],
}


# Where an error is written by something other than the route's usual writer.
TOO_LONG = (
    "OpenAIServingBase.handle_request -> create_error_response (ValueError from TokenizerManager._validate_one_request)"
)
REFUSED = "OpenAIServingChat._validate_request -> OpenAIServingBase.create_error_response"
CASES: list[dict[str, Any]] = []


def case(name: str, path: str, body: dict[str, Any], answers: list[tuple[str, str]], note: str, **extra: Any) -> None:
    CASES.append({"name": name, "path": path, "body": body, "answers": answers, "note": note, **extra})


ASK = [{"role": "user", "content": "Tell me about rivers please"}]
WEATHER = [{"role": "user", "content": "What is the weather in Lyon please"}]
TOOL = {
    "type": "function",
    "function": {
        "name": "get_weather",
        "description": "Current weather in a city",
        "parameters": {
            "type": "object",
            "properties": {"city": {"type": "string"}, "unit": {"type": "string", "enum": ["celsius", "fahrenheit"]}},
            "required": ["city", "unit"],
        },
    },
}
M = SERVED
CHAT = "/v1/chat/completions"
COMPLETIONS = "/v1/completions"
WITH_USAGE = {"stream": True, "stream_options": {"include_usage": True}}
LINE = "Write a line on rivers"


def chat(messages: list[dict[str, str]] = ASK, **fields: Any) -> dict[str, Any]:
    """A chat request body: the served model, `messages`, and what the case sets."""
    return {"model": M, "messages": messages, **fields}


def completion(prompt: str | list[str] = LINE, **fields: Any) -> dict[str, Any]:
    return {"model": M, "prompt": prompt, **fields}


# Chat: whole, streamed, finishes, logprobs, n > 1.
case("chat", CHAT, chat(max_tokens=16), [("plain", "eos")], "a whole chat answer")
case("chat_stream", CHAT, chat(max_tokens=16, stream=True), [("plain", "eos")], "a stream without stream_options")
case(
    "chat_stream_usage",
    CHAT,
    chat(max_tokens=16, **WITH_USAGE),
    [("plain", "eos")],
    "a stream with stream_options.include_usage",
)
case("chat_length", CHAT, chat(max_tokens=3), [("short", "length")], "finish by max_tokens")
case(
    "chat_stop_string",
    CHAT,
    chat(max_tokens=16, stop=["."]),
    [("stop", "stop:.")],
    "finish by a stop string (matched_stop is the string)",
)
case(
    "chat_stream_length", CHAT, chat(max_tokens=3, **WITH_USAGE), [("short", "length")], "a stream ended by max_tokens"
)
TOP2 = {"max_tokens": 3, "logprobs": True, "top_logprobs": 2}
case("chat_logprobs", CHAT, chat(**TOP2), [("short", "length")], "chat logprobs with top_logprobs", logprobs=True)
case(
    "chat_stream_logprobs",
    CHAT,
    chat(**TOP2, stream=True),
    [("short", "length")],
    "streamed chat logprobs",
    logprobs=True,
)
TWO = [("short", "length"), ("poem", "eos")]
case("chat_n2", CHAT, chat(max_tokens=3, n=2), TWO, "two choices")
case("chat_stream_n2", CHAT, chat(max_tokens=3, n=2, **WITH_USAGE), TWO, "two streamed choices")

# Tool calls, parsed by the qwen parser.
TOOLS = {"max_tokens": 64, "tools": [TOOL]}
case(
    "tool_call",
    CHAT,
    chat(WEATHER, **TOOLS),
    [("tool", "eos")],
    "a tool call parsed by the qwen parser (tool_choice auto)",
)
case(
    "tool_call_stream",
    CHAT,
    chat(WEATHER, **TOOLS, **WITH_USAGE),
    [("tool", "eos")],
    "a streamed tool call parsed by the qwen parser",
)
case(
    "tool_call_named_stream",
    CHAT,
    chat(WEATHER, **TOOLS, tool_choice={"type": "function", "function": {"name": "get_weather"}}, stream=True),
    [("tool", "eos")],
    "a named tool: with the qwen parser SGLang constrains the output to the parser's own format (a structural tag)",
)

# Completions.
case("completion", COMPLETIONS, completion(max_tokens=16), [("plain", "eos")], "a whole completion")
case(
    "completion_stream",
    COMPLETIONS,
    completion(max_tokens=16, **WITH_USAGE),
    [("plain", "eos")],
    "a streamed completion with usage",
)
case(
    "completion_prompts",
    COMPLETIONS,
    completion([LINE, "Write a line"], max_tokens=3),
    [("poem", "length"), ("poem2", "length")],
    "a list of two prompts",
)
case(
    "completion_n2",
    COMPLETIONS,
    completion(max_tokens=3, n=2),
    [("poem", "length"), ("poem2", "eos")],
    "one prompt, two choices",
)
case(
    "completion_logprobs",
    COMPLETIONS,
    completion(max_tokens=3, logprobs=2),
    [("poem", "length")],
    "completion logprobs=2",
    logprobs=True,
)
case(
    "completion_stream_logprobs",
    COMPLETIONS,
    completion(max_tokens=3, logprobs=2, stream=True),
    [("poem", "length")],
    "streamed completion logprobs",
    logprobs=True,
)

# Refusals, and who writes them.
case(
    "unknown_model",
    CHAT,
    {**chat(max_tokens=3), "model": "no-such-model"},
    [("short", "length")],
    "0.5.23 does not check the model name: it echoes it",
)
LONG = [{"role": "user", "content": " ".join(["river"] * 1200)}]
case("context_length", CHAT, chat(LONG, max_tokens=8), [], "a prompt beyond --context-length", writer=TOO_LONG)
case(
    "context_length_stream",
    CHAT,
    chat(LONG, max_tokens=8, stream=True),
    [],
    "the same, streamed: refused before the first chunk",
    writer=TOO_LONG,
)
case(
    "completion_context_length",
    COMPLETIONS,
    completion(" ".join(["river"] * 1200), max_tokens=8),
    [],
    "a completion prompt beyond --context-length",
    writer=TOO_LONG,
)
case(
    "context_sum",
    CHAT,
    chat([{"role": "user", "content": " ".join(["river"] * 900)}], max_tokens=500),
    [],
    "prompt + max_tokens beyond the context, each within it",
    writer=TOO_LONG,
)
case("max_completion_tokens", CHAT, chat(max_tokens=5000), [], "max_tokens above the context", writer=REFUSED)
case(
    "bad_request",
    CHAT,
    {"model": M, "max_tokens": 3},
    [],
    "no messages: pydantic validation",
    writer="http_server.py validation_exception_handler (RequestValidationError)",
)
case(
    "tool_choice_without_tools",
    CHAT,
    chat(tool_choice="required"),
    [],
    "tool_choice required without tools",
    writer=REFUSED,
)
case(
    "queue_full",
    CHAT,
    chat(max_tokens=3),
    [("short", "queue_full")],
    "the scheduler's queue-full abort, unstreamed",
    writer="OpenAIServingBase.handle_request -> create_error_response (HTTPException from "
    "TokenizerManager._handle_abort_finish_reason)",
)
case(
    "queue_full_stream",
    CHAT,
    chat(max_tokens=3, stream=True),
    [("short", "queue_full")],
    "the same, streamed: an SSE error after a 200",
)
case(
    "chat_cache_report",
    CHAT,
    chat(max_tokens=3),
    [("short", "length")],
    "with --enable-cache-report: prompt_tokens_details",
    cache_report=True,
)
