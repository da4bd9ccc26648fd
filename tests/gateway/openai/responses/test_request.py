"""The request translator: every supported field, and every refusal a 400 naming its param."""

from __future__ import annotations

import pytest

from adapters.errors import GatewayError
from gateway.openai.request_fields import refuse_unknown
from gateway.openai.responses.conversation import build_generation
from gateway.openai.responses.request import parse_request


def parse(**body):
    return parse_request({"model": "m", "input": "hi", **body})


def generation(**body):
    return build_generation(parse(**body), [], request_id="r", tenant="t")


def refused(body: dict) -> GatewayError:
    with pytest.raises(GatewayError) as info:
        build_generation(parse_request(body), [], request_id="r", tenant="t")
    assert info.value.status == 400
    return info.value


def test_string_input_is_one_user_message_and_defaults():
    req = parse()
    assert req.store is True and req.stream is False and req.parallel_tool_calls is True
    assert req.tool_choice == "auto" and req.tools == [] and req.metadata == {}
    assert req.text == {"format": {"type": "text"}}
    gen = generation()
    assert gen.kind == "chat" and gen.model == "m" and gen.tenant == "t" and gen.request_id == "r"
    assert gen.messages == [{"role": "user", "content": "hi"}]
    assert gen.include_usage is True and gen.sampling.n == 1
    assert gen.tools is None and gen.tool_choice is None and gen.response_format is None


def test_instructions_lead_as_a_system_message():
    gen = generation(instructions="be brief")
    assert gen.messages[0] == {"role": "system", "content": "be brief"}
    assert gen.messages[1] == {"role": "user", "content": "hi"}


def test_message_items_every_role_and_content_form():
    gen = generation(
        input=[
            {"role": "system", "content": "s"},
            {"type": "message", "role": "developer", "content": [{"type": "input_text", "text": "d"}]},
            {"role": "user", "content": [{"type": "input_text", "text": "a"}, {"type": "input_text", "text": "b"}]},
            {"role": "assistant", "content": "earlier answer"},
            {
                "type": "message",
                "role": "assistant",
                "id": "msg_x",
                "status": "completed",
                "content": [{"type": "output_text", "text": "replayed", "annotations": []}],
            },
        ]
    )
    assert gen.messages == [
        {"role": "system", "content": "s"},
        {"role": "developer", "content": "d"},
        {"role": "user", "content": [{"type": "text", "text": "a"}, {"type": "text", "text": "b"}]},
        {"role": "assistant", "content": "earlier answer"},
        {"role": "assistant", "content": "replayed"},
    ]


def test_function_call_items_join_the_assistant_turn_and_outputs_become_tool_messages():
    gen = generation(
        input=[
            {"role": "user", "content": "weather in Paris and Rome?"},
            {"type": "function_call", "call_id": "c1", "name": "weather", "arguments": '{"city":"Paris"}'},
            {"type": "function_call", "call_id": "c2", "name": "weather", "arguments": '{"city":"Rome"}'},
            {"type": "function_call_output", "call_id": "c1", "output": "sunny"},
            {"type": "function_call_output", "call_id": "c2", "output": [{"type": "input_text", "text": "rain"}]},
        ]
    )
    assert gen.messages[1] == {
        "role": "assistant",
        "content": None,
        "tool_calls": [
            {"id": "c1", "type": "function", "function": {"name": "weather", "arguments": '{"city":"Paris"}'}},
            {"id": "c2", "type": "function", "function": {"name": "weather", "arguments": '{"city":"Rome"}'}},
        ],
    }
    assert gen.messages[2] == {"role": "tool", "tool_call_id": "c1", "content": "sunny"}
    assert gen.messages[3] == {"role": "tool", "tool_call_id": "c2", "content": "rain"}


def test_function_call_after_assistant_text_is_the_same_turn():
    gen = generation(
        input=[
            {"role": "user", "content": "q"},
            {"role": "assistant", "content": "let me look"},
            {"type": "function_call", "call_id": "c1", "name": "f", "arguments": "{}"},
            {"type": "function_call_output", "call_id": "c1", "output": "x"},
        ]
    )
    assert gen.messages[1]["content"] == "let me look"
    assert [c["id"] for c in gen.messages[1]["tool_calls"]] == ["c1"]


def test_tools_flat_shape_becomes_chat_nested_shape_and_is_echoed_as_sent():
    tool = {"type": "function", "name": "f", "description": "d", "parameters": {"type": "object"}, "strict": True}
    req = parse(tools=[tool, {"type": "function", "name": "g"}])
    assert req.tools[0] == tool
    assert req.tools[1] == {"type": "function", "name": "g", "description": None, "parameters": None, "strict": None}
    gen = generation(tools=[tool, {"type": "function", "name": "g"}])
    assert gen.tools == [
        {
            "type": "function",
            "function": {"name": "f", "description": "d", "parameters": {"type": "object"}, "strict": True},
        },
        {"type": "function", "function": {"name": "g"}},
    ]
    assert gen.tool_choice == "auto"


@pytest.mark.parametrize("choice", ["auto", "none", "required"])
def test_tool_choice_strings(choice):
    gen = generation(tools=[{"type": "function", "name": "f"}], tool_choice=choice)
    assert gen.tool_choice == choice


def test_tool_choice_named_function():
    req = parse(tools=[{"type": "function", "name": "f"}], tool_choice={"type": "function", "name": "f"})
    assert req.tool_choice == {"type": "function", "name": "f"}
    gen = build_generation(req, [], request_id="r", tenant="t")
    assert gen.tool_choice == {"type": "function", "function": {"name": "f"}}


def test_tool_choice_auto_or_none_without_tools_is_vacuous():
    assert generation(tool_choice="none").tool_choice is None
    assert parse(tool_choice="none").tool_choice == "none"  # echoed as sent


def test_parallel_tool_calls_false():
    assert generation(parallel_tool_calls=False).parallel_tool_calls is False


def test_text_formats():
    schema = {"type": "object", "properties": {"a": {"type": "string"}}}
    fmt = {"type": "json_schema", "name": "thing", "schema": schema, "strict": True, "description": "a thing"}
    gen = generation(text={"format": fmt})
    assert gen.response_format == {
        "type": "json_schema",
        "json_schema": {"name": "thing", "schema": schema, "strict": True, "description": "a thing"},
    }
    assert parse(text={"format": fmt}).text == {"format": fmt}
    assert generation(text={"format": {"type": "json_object"}}).response_format == {"type": "json_object"}
    assert generation(text={"format": {"type": "text"}}).response_format is None
    assert parse(text={"verbosity": "medium"}).text == {"format": {"type": "text"}, "verbosity": "medium"}


def test_sampling_and_limits():
    gen = generation(temperature=0.5, top_p=0.9, max_output_tokens=64)
    assert gen.sampling.temperature == 0.5 and gen.sampling.top_p == 0.9 and gen.sampling.max_tokens == 64
    assert gen.sampling.logprobs is False


@pytest.mark.parametrize("sent", [{}, {"temperature": None, "top_p": None}])
def test_unset_temperature_and_top_p_are_the_defaults_sent_and_echoed(sent):
    # OpenAI reports the values used (1 and 1), never null; the runtime gets the same
    # values, so the echo is true whatever the runtime's own default
    request = parse(**sent)
    assert (request.temperature, request.top_p) == (1.0, 1.0)
    gen = generation(**sent)
    assert (gen.sampling.temperature, gen.sampling.top_p) == (1.0, 1.0)
    assert (parse(temperature=0).temperature, parse(top_p=0.5).top_p) == (0.0, 0.5)


def test_logprobs_through_include_and_top_logprobs():
    gen = generation(include=["message.output_text.logprobs"], top_logprobs=3)
    assert gen.sampling.logprobs is True and gen.sampling.top_logprobs == 3


def test_echo_only_fields_are_kept():
    req = parse(
        metadata={"k": "v"},
        user="u",
        safety_identifier="s",
        prompt_cache_key="p",
        max_tool_calls=2,
        store=False,
        previous_response_id="resp_abc",
        stream=True,
        stream_options={"include_obfuscation": False},
    )
    assert req.metadata == {"k": "v"} and req.user == "u" and req.safety_identifier == "s"
    assert req.prompt_cache_key == "p" and req.max_tool_calls == 2 and req.store is False
    assert req.previous_response_id == "resp_abc" and req.stream is True


@pytest.mark.parametrize(
    "field, value",
    [
        ("background", False),
        ("truncation", "disabled"),
        ("service_tier", "auto"),
        ("service_tier", "default"),
        ("reasoning", None),
        ("conversation", None),
        ("prompt", None),
        ("prompt_cache_retention", "in_memory"),
    ],
)
def test_default_values_of_unsupported_features_are_accepted(field, value):
    assert parse(**{field: value}).model == "m"


UNSUPPORTED = [
    ({"background": True}, "background"),
    ({"background": 1}, "background"),
    ({"truncation": "auto"}, "truncation"),
    ({"service_tier": "flex"}, "service_tier"),
    ({"reasoning": {"effort": "low"}}, "reasoning"),
    ({"reasoning": {}}, "reasoning"),
    ({"conversation": "conv_1"}, "conversation"),
    ({"prompt": {"id": "p"}}, "prompt"),
    ({"context_management": [{"type": "compaction"}]}, "context_management"),
    ({"prompt_cache_retention": "24h"}, "prompt_cache_retention"),
    ({"tools": [{"type": "web_search"}]}, "tools[0].type"),
    ({"tools": [{"type": "function", "name": "f"}, {"type": "file_search"}]}, "tools[1].type"),
    ({"tools": [{"type": "computer_use_preview"}]}, "tools[0].type"),
    ({"tools": [{"type": "function", "name": "f", "defer_loading": True}]}, "tools[0].defer_loading"),
    ({"tools": [{"type": "function", "name": "f"}], "tool_choice": {"type": "allowed_tools"}}, "tool_choice.type"),
    ({"tool_choice": {"type": "web_search_preview"}}, "tool_choice.type"),
    ({"include": ["reasoning.encrypted_content"]}, "include[0]"),
    ({"include": ["message.output_text.logprobs", "file_search_call.results"]}, "include[1]"),
    ({"input": [{"type": "reasoning", "summary": []}]}, "input[0].type"),
    ({"input": [{"type": "item_reference", "id": "msg_1"}]}, "input[0].type"),
    ({"input": [{"type": "web_search_call", "id": "ws_1"}]}, "input[0].type"),
    (
        {"input": [{"role": "user", "content": [{"type": "input_image", "image_url": "http://x"}]}]},
        "input[0].content[0].type",
    ),
    (
        {"input": [{"role": "user", "content": [{"type": "input_text", "text": "a"}, {"type": "input_file"}]}]},
        "input[0].content[1].type",
    ),
    ({"text": {"verbosity": "low"}}, "text.verbosity"),
    ({"stream": True, "stream_options": {"include_obfuscation": True}}, "stream_options.include_obfuscation"),
]


@pytest.mark.parametrize("extra, param", UNSUPPORTED)
def test_unsupported_features_are_refused_by_name(extra, param):
    err = refused({"model": "m", "input": "hi", **extra})
    assert err.param == param and err.code == "unsupported_parameter"


INVALID = [
    ({"model": None}, "model"),
    ({"model": ""}, "model"),
    ({"input": 5}, "input"),
    ({"input": []}, "input"),
    ({"input": None}, "input"),
    ({"input": ["hi"]}, "input[0]"),
    ({"input": [{"role": "robot", "content": "x"}]}, "input[0].role"),
    ({"input": [{"role": "user"}]}, "input[0].content"),
    ({"input": [{"role": "user", "content": []}]}, "input[0].content"),
    ({"input": [{"role": "user", "content": {"text": "x"}}]}, "input[0].content"),
    ({"input": [{"role": "user", "content": ["x"]}]}, "input[0].content[0]"),
    ({"input": [{"role": "user", "content": [{"type": "input_text"}]}]}, "input[0].content[0].text"),
    ({"input": [{"role": "user", "content": [{"type": "output_text", "text": "x"}]}]}, "input[0].content[0].type"),
    ({"input": [{"role": "assistant", "content": [{"type": "refusal"}]}]}, "input[0].content[0].refusal"),
    ({"input": [{"type": 3}]}, "input[0].type"),
    ({"input": [{"type": "function_call", "name": "f", "arguments": "{}"}]}, "input[0].call_id"),
    ({"input": [{"type": "function_call", "call_id": "c", "arguments": "{}"}]}, "input[0].name"),
    ({"input": [{"type": "function_call", "call_id": "c", "name": "f", "arguments": {}}]}, "input[0].arguments"),
    ({"input": [{"type": "function_call_output", "call_id": "c"}]}, "input[0].output"),
    ({"input": [{"type": "function_call_output", "call_id": "nope", "output": "x"}]}, "input[0].call_id"),
    ({"instructions": 3}, "instructions"),
    ({"tools": {}}, "tools"),
    ({"tools": ["f"]}, "tools[0]"),
    ({"tools": [{"name": "f"}]}, "tools[0].type"),
    ({"tools": [{"type": "function", "name": "bad name"}]}, "tools[0].name"),
    ({"tools": [{"type": "function", "name": "f", "parameters": "{}"}]}, "tools[0].parameters"),
    ({"tools": [{"type": "function", "name": "f", "strict": "yes"}]}, "tools[0].strict"),
    ({"tools": [{"type": "function", "name": "f", "description": 1}]}, "tools[0].description"),
    ({"tools": [{"type": "function", "name": "f"}, {"type": "function", "name": "f"}]}, "tools[1].name"),
    ({"tools": [{"type": "function", "name": f"f{i}"} for i in range(129)]}, "tools"),
    ({"tool_choice": "sometimes"}, "tool_choice"),
    ({"tool_choice": "required"}, "tool_choice"),
    ({"tool_choice": 1}, "tool_choice"),
    (
        {"tools": [{"type": "function", "name": "f"}], "tool_choice": {"type": "function", "name": "g"}},
        "tool_choice.name",
    ),
    ({"tool_choice": {"type": "function", "name": "f"}}, "tool_choice.name"),
    ({"parallel_tool_calls": "yes"}, "parallel_tool_calls"),
    ({"text": "json"}, "text"),
    ({"text": {"format": {"type": "yaml"}}}, "text.format.type"),
    ({"text": {"format": "json_object"}}, "text.format.type"),
    ({"text": {"colour": "red"}}, "text.colour"),
    ({"text": {"format": {"type": "json_schema", "schema": {}}}}, "text.format.name"),
    ({"text": {"format": {"type": "json_schema", "name": "a b", "schema": {}}}}, "text.format.name"),
    ({"text": {"format": {"type": "json_schema", "name": "n"}}}, "text.format.schema"),
    ({"text": {"format": {"type": "json_schema", "name": "n", "schema": []}}}, "text.format.schema"),
    ({"text": {"format": {"type": "json_schema", "name": "n", "schema": {}, "strict": 1}}}, "text.format.strict"),
    ({"text": {"format": {"type": "json_schema", "name": "n", "schema": {}, "x": 1}}}, "text.format.x"),
    ({"max_output_tokens": 15}, "max_output_tokens"),
    ({"max_output_tokens": "16"}, "max_output_tokens"),
    ({"max_output_tokens": 1 << 40}, "max_output_tokens"),
    ({"max_tool_calls": -1}, "max_tool_calls"),
    ({"temperature": 3}, "temperature"),
    ({"temperature": True}, "temperature"),
    ({"top_p": -0.1}, "top_p"),
    ({"top_logprobs": 21}, "top_logprobs"),
    ({"top_logprobs": 2}, "top_logprobs"),
    ({"include": "message.output_text.logprobs"}, "include"),
    ({"include": [1]}, "include[0]"),
    ({"metadata": []}, "metadata"),
    ({"metadata": {f"k{i}": "v" for i in range(17)}}, "metadata"),
    ({"metadata": {"k" * 65: "v"}}, "metadata"),
    ({"metadata": {"k": "v" * 513}}, "metadata.k"),
    ({"metadata": {"k": 1}}, "metadata.k"),
    ({"user": 1}, "user"),
    ({"safety_identifier": "s" * 65}, "safety_identifier"),
    ({"prompt_cache_key": []}, "prompt_cache_key"),
    ({"store": "no"}, "store"),
    ({"stream": 1}, "stream"),
    ({"previous_response_id": 7}, "previous_response_id"),
    ({"stream_options": {}}, "stream_options"),
    ({"stream": True, "stream_options": []}, "stream_options"),
    ({"stream": True, "stream_options": {"include_obfuscation": "no"}}, "stream_options.include_obfuscation"),
    ({"stream": True, "stream_options": {"include_usage": True}}, "stream_options.include_usage"),
]


@pytest.mark.parametrize("extra, param", INVALID)
def test_invalid_values_are_refused_by_name(extra, param):
    err = refused({"model": "m", "input": "hi", **extra})
    assert err.param == param


def test_fields_openai_does_not_define_are_named_for_the_models_policy():
    # chat's fields are unknown to the Responses API: the model's `unknown_params`
    # (request_fields.refuse_unknown, applied after the model check) refuses or ignores them
    request = parse(frequency_penalty=0.5, messages=[], temperature=0.5)
    assert request.unknown_fields == ("frequency_penalty", "messages")
    assert generation(frequency_penalty=0.5).unknown_fields == ("frequency_penalty",)
    assert parse().unknown_fields == ()


def test_instructions_alone_are_not_an_input():
    assert refused({"model": "m", "instructions": "be brief"}).param == "input"


def test_a_body_that_is_not_an_object():
    with pytest.raises(GatewayError) as info:
        parse_request(["model", "m"])
    assert info.value.status == 400


def test_error_messages_stay_short_whatever_the_client_sends():
    err = refused({"model": "m", "input": "hi", "tools": [{"type": "x" * 100_000}]})
    assert len(err.message) < 400
    with pytest.raises(GatewayError) as info:
        refuse_unknown(parse(**{"y" * 100_000: 1}).unknown_fields, "reject")
    err = info.value
    assert len(err.message) < 400 and len(err.param or "") < 100 and err.code == "unknown_parameter"


def test_conversation_keys_reach_session_affinity_as_for_chat():
    # Routing's session affinity reads GenerationRequest.session_keys; chat fills it
    # from the same two fields (gateway/openai/requests.py session_keys).
    gen = generation(input="hi", prompt_cache_key="conv-7", user="u-1")
    assert gen.session_keys == {"prompt_cache_key": "conv-7", "user": "u-1"}
    assert generation(input="hi", user="").session_keys == {}
    assert generation(input="hi").session_keys == {}
