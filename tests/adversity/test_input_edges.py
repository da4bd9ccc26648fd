"""Clean input edges (issue 25, findings 8 and 10): query parameters read strictly,
a client's names clipped in error bodies and in the access log, and control
characters a client sends never written raw into a log line. Through a real
gateway process; its stdout and stderr (the access log and the text log) are one
file, read back whole."""

from __future__ import annotations

import json

import httpx
import pytest

from tests.procs import eventually

MSG = [{"role": "user", "content": "hi"}]
FORGED = '{"ts":1,"request_id":"forged","tenant":"admin","status":200}'


def access_line(gateway, request_id: str) -> str:
    def find() -> str:
        return next((line for line in gateway.log().splitlines() if f'"request_id":"{request_id}"' in line), "")

    line = eventually(find, timeout_s=10)
    assert line, f"no access-log line for {request_id}"
    return line


@pytest.mark.parametrize(
    "limit",
    ["%C2%B2", "%D9%A3", "%EF%BC%93", "+3", "%203", "3%20", "-1", "0", "101", "3.0", "0x3", "", "9" * 5000],
    ids=["superscript two", "arabic-indic three", "fullwidth three", "plus", "space before", "space after",
         "negative", "zero", "over", "decimal", "hex", "empty", "5000 digits"],
)  # fmt: skip
def test_a_query_integer_is_ascii_digits_in_range_or_a_400_naming_it(gateway, limit):
    answer = httpx.get(f"{gateway.url}/v1/responses/resp_abc/input_items?limit={limit}", timeout=10)
    assert answer.status_code == 400, answer.text
    error = answer.json()["error"]
    assert error["param"] == "limit" and error["type"] == "invalid_request_error"
    assert len(answer.content) < 1024


def test_a_well_formed_limit_reaches_the_store(gateway):
    answer = httpx.get(f"{gateway.url}/v1/responses/resp_abc/input_items?limit=3", timeout=10)
    assert answer.status_code == 404 and answer.json()["error"]["param"] == "response_id"


def test_a_3mb_unknown_model_gets_a_short_404_and_a_short_access_line(gateway):
    model = "x" * (3 << 20)
    answer = httpx.post(
        gateway.url + "/v1/chat/completions",
        json={"model": model, "messages": MSG},
        headers={"x-request-id": "huge-model"},
        timeout=30,
    )
    assert answer.status_code == 404 and answer.json()["error"]["code"] == "model_not_found"
    assert len(answer.content) < 1024
    assert f"({len(model)} characters)" in answer.json()["error"]["message"]
    line = access_line(gateway, "huge-model")
    assert len(line) < 2048 and json.loads(line)["status"] == 404


def test_a_long_query_parameter_name_gets_a_short_400(gateway):
    name = "p" * 12_000  # under the request head limit (431 above it)
    answer = httpx.get(f"{gateway.url}/v1/responses/resp_abc/input_items?{name}=1", timeout=30)
    assert answer.status_code == 400 and len(answer.content) < 1024


def test_control_characters_in_a_model_name_stay_inside_one_log_line(gateway):
    model = f"m\n{FORGED}\r\x1b[31mred\x1b[0m\u2028\x85end"
    answer = httpx.post(
        gateway.url + "/v1/chat/completions",
        json={"model": model, "messages": MSG},
        headers={"x-request-id": "control-model"},
        timeout=10,
    )
    assert answer.status_code == 404
    line = access_line(gateway, "control-model")
    assert json.loads(line)["model"] == model  # the JSON line still says exactly what was sent
    assert "\x1b" not in line and "\u2028" not in line and "\x85" not in line
    log = gateway.log()
    assert not any(entry.startswith(FORGED) for entry in log.splitlines())
    assert "\x1b" not in log


def test_control_characters_in_a_path_never_reach_the_log_raw(gateway):
    path = "/v1/responses/resp_%1B%5B31m%0A%0DINFO%20forged%E2%80%A8/input_items?limit=%C2%B2"
    answer = httpx.get(gateway.url + path, timeout=10)
    assert answer.status_code == 400 and answer.json()["error"]["param"] == "limit"
    other = httpx.get(gateway.url + path.replace("?limit=%C2%B2", ""), timeout=10)
    assert other.status_code == 404 and "\x1b" not in other.text
    log = gateway.log()
    assert "\x1b" not in log and "\u2028" not in log
    assert not any(entry.startswith("INFO forged") for entry in log.splitlines())
