"""engine/text/chat_template.py without a model: the template environment transformers gives
(whitespace control, loop controls, `tojson`, `raise_exception`, `strftime_now`, the sandbox),
what reaches the template, the content shapes a text model takes, and each refusal's wording."""

from __future__ import annotations

import re
from datetime import datetime

import pytest

from engine.text.chat_template import ChatTemplateError, content_text, normalize_messages, render_chat

USER = [{"role": "user", "content": "hi"}]


def _render(template: str, messages=None, **kwargs) -> str:
    return render_chat(template, messages or USER, **kwargs)


# ---- the environment ---------------------------------------------------------------------


def test_blocks_eat_their_newline_and_leading_whitespace():
    template = "a\n    {% if true %}\nb\n    {% endif %}\nc"
    assert _render(template) == "a\nb\nc"


def test_loop_controls_are_enabled():
    template = "{% for m in [1, 2, 3, 4] %}{% if m == 2 %}{% continue %}{% endif %}{% if m == 4 %}{% break %}{% endif %}{{ m }}{% endfor %}"
    assert _render(template) == "13"


def test_tojson_keeps_non_ascii_and_does_not_escape_html():
    assert _render("{{ {'b': 'é<&>', 'a': 1} | tojson }}") == '{"b": "é<&>", "a": 1}'


def test_tojson_passes_its_options_through():
    value = "{'b': [1], 'a': 'é'}"
    assert _render("{{ " + value + " | tojson(indent=2) }}") == '{\n  "b": [\n    1\n  ],\n  "a": "é"\n}'
    assert _render("{{ " + value + " | tojson(separators=(',', ':')) }}") == '{"b":[1],"a":"é"}'
    assert _render("{{ " + value + " | tojson(sort_keys=true) }}") == '{"a": "é", "b": [1]}'
    assert _render("{{ " + value + " | tojson(ensure_ascii=true) }}") == '{"b": [1], "a": "\\u00e9"}'


def test_raise_exception_refuses_with_the_templates_message():
    with pytest.raises(ChatTemplateError) as err:
        _render("{{ raise_exception('roles must alternate') }}")
    assert str(err.value) == "roles must alternate"


def test_strftime_now_formats_the_current_time():
    before = datetime.now().strftime("%Y-%m-%d")
    got = _render("{{ strftime_now('%Y-%m-%d') }}")
    assert got in (before, datetime.now().strftime("%Y-%m-%d"))
    assert re.fullmatch(r"\d{4}-\d{2}-\d{2}", got)


def test_the_sandbox_refuses_to_change_what_it_was_given():
    with pytest.raises(ChatTemplateError) as err:
        _render("{{ messages.append(1) }}")
    assert str(err.value).startswith("the chat template cannot render these messages: ")


def test_a_template_that_does_not_compile_is_refused_naming_why():
    with pytest.raises(ChatTemplateError) as err:
        _render("{% if %}")
    assert str(err.value).startswith("the model's chat template does not compile: ")
    assert "Expected an expression" in str(err.value)


@pytest.mark.parametrize(
    "template",
    ["{{ messages[0]['content'] + 1 }}", "{{ {}['missing'] | tojson }}", "{{ none.x() }}", "{{ nothing.there }}"],
    ids=["type", "key", "attribute", "undefined"],
)
def test_what_the_template_trips_on_is_refused(template):
    with pytest.raises(ChatTemplateError) as err:
        _render(template)
    assert str(err.value).startswith("the chat template cannot render these messages: ")


# ---- what reaches the template ---------------------------------------------------------


def test_the_generation_prompt_is_asked_by_default_and_can_be_left_out():
    template = "{{ add_generation_prompt }}"
    assert _render(template) == "True"
    assert _render(template, add_generation_prompt=False) == "False"


def test_tools_reach_the_template_and_an_empty_list_is_none():
    template = "{{ tools is none }}|{{ tools | tojson }}"
    assert _render(template) == "True|null"
    assert _render(template, tools=[]) == "True|null"
    assert _render(template, tools=[{"type": "function"}]) == 'False|[{"type": "function"}]'


def test_special_tokens_and_extra_arguments_are_template_variables():
    template = "{{ bos_token }}{{ messages[0]['content'] }}{{ eos_token }}|{{ enable_thinking }}"
    got = _render(template, special_tokens={"bos_token": "<s>", "eos_token": "</s>"}, enable_thinking=False)
    assert got == "<s>hi</s>|False"
    assert _render("{{ bos_token is defined }}") == "False"


def test_messages_reach_the_template_with_string_content():
    messages = [{"role": "user", "content": [{"type": "text", "text": "a"}, {"type": "input_text", "text": "b"}]}]
    assert _render("{{ messages[0]['content'] }}", messages) == "a\nb"


# ---- content and messages ----------------------------------------------------------------


def test_content_shapes_a_text_model_takes():
    assert content_text(None, "m") == ""
    assert content_text("plain", "m") == "plain"
    assert content_text([], "m") == ""
    assert content_text([{"type": "text", "text": "one"}], "m") == "one"
    parts = [{"type": "text", "text": "a"}, {"type": "input_text", "text": ""}, {"type": "text", "text": "c"}]
    assert content_text(parts, "m") == "a\n\nc"


@pytest.mark.parametrize(
    ("content", "message"),
    [
        ([{"type": "image_url"}], "where: content part of type 'image_url' is not supported by a text model"),
        ([{"text": "no type"}], "where: content part of type None is not supported by a text model"),
        (["bare"], "where: content part of type 'str' is not supported by a text model"),
        ([{"type": "text"}], "where: a text content part needs a string `text`"),
        ([{"type": "text", "text": 5}], "where: a text content part needs a string `text`"),
        (5, "where: content must be a string, null or a list of content parts"),
        ({"type": "text", "text": "x"}, "where: content must be a string, null or a list of content parts"),
    ],
)
def test_content_refusals_name_where_and_why(content, message):
    with pytest.raises(ChatTemplateError) as err:
        content_text(content, "where")
    assert str(err.value) == message


def test_normalize_copies_each_message_with_string_content():
    messages = [
        {"role": "user", "content": [{"type": "text", "text": "x"}], "name": "n"},
        {"role": "assistant", "content": None, "tool_calls": [{"id": "c"}]},
        {"role": "tool"},
    ]
    out = normalize_messages(messages)
    assert out == [
        {"role": "user", "content": "x", "name": "n"},
        {"role": "assistant", "content": "", "tool_calls": [{"id": "c"}]},
        {"role": "tool", "content": ""},
    ]
    assert messages[0]["content"] == [{"type": "text", "text": "x"}]
    assert "content" not in messages[2]


def test_tool_calls_of_none_are_accepted():
    assert normalize_messages([{"role": "assistant", "tool_calls": None}])[0]["tool_calls"] is None


@pytest.mark.parametrize(
    ("messages", "message"),
    [
        ([], "messages must be a non-empty list"),
        ({"role": "user"}, "messages must be a non-empty list"),
        (None, "messages must be a non-empty list"),
        ([{"role": "user"}, "x"], "messages[1] must be an object with a string `role`"),
        ([{"content": "x"}], "messages[0] must be an object with a string `role`"),
        ([{"role": 1}], "messages[0] must be an object with a string `role`"),
        (
            [{"role": "user"}, {"role": "user", "content": 5}],
            "messages[1]: content must be a string, null or a list of content parts",
        ),
        ([{"role": "assistant", "tool_calls": {}}], "messages[0].tool_calls must be a list"),
    ],
)
def test_message_refusals_name_the_message(messages, message):
    with pytest.raises(ChatTemplateError) as err:
        normalize_messages(messages)
    assert str(err.value) == message


def test_chat_template_error_is_a_value_error():
    assert issubclass(ChatTemplateError, ValueError)
