"""`switchyard rollout` (gateway/cli/rollout.py): what it prints of the admin API's answers,
and its exit status when the gateway refuses or cannot be reached; the requests it makes
(method, path, key) against a scripted admin API on loopback, and its command line."""

from __future__ import annotations

import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from gateway.cli.main import build_parser, main
from gateway.cli.rollout import describe, table


def test_the_table_and_the_description_say_phase_step_shares_and_failed_gates():
    rows = [
        {"model": "m", "rollout_id": "abc", "phase": "step", "step": 1, "candidate_share": 0.25, "mirror_share": 0.1}
    ]
    text = table(rows)
    assert "m" in text and "step" in text and "25%" in text and "10%" in text and "abc" in text
    assert table([]) == "no rollouts configured"
    body = {
        "model": "m",
        "steps": [0.25, 1.0],
        "candidate_share": 0.0,
        "mirror_share": 0.0,
        "state": {
            "phase": "rolled_back",
            "step": 0,
            "rollout_id": "abc",
            "version": 4,
            "reason": "gates failed: error_rate",
        },
        "evidence": [
            {
                "window": 9,
                "step": 0,
                "decision": "rollback",
                "stable_n": 40,
                "candidate_n": 12,
                "mirror_n": 0,
                "gates": [
                    {"gate": "error_rate", "verdict": "fail", "n": 12, "value": 0.083, "limit": 0.0},
                    {"gate": "tool_call_invalid_rate", "verdict": "pass", "n": 0},
                ],
                "examples": ["usage: prompt_tokens 13 != 10"],
            }
        ],
    }
    text = describe(body)
    assert "rolled_back" in text and "gates failed: error_rate" in text
    assert "error_rate" in text and "fail" in text and "0.083" in text
    assert "tool_call_invalid_rate" not in text  # a gate not exercised says nothing
    assert "example: usage: prompt_tokens 13 != 10" in text


def test_an_unreachable_gateway_is_exit_status_1(capsys):
    assert main(["rollout", "status", "--url", "http://127.0.0.1:9", "--key", "k"]) == 1
    assert "cannot reach" in capsys.readouterr().err


ROW = {"model": "m", "rollout_id": "abc", "phase": "step", "step": 1, "candidate_share": 0.25, "mirror_share": 0.1}
BODY = {
    "model": "m",
    "steps": [0.1, 0.5, 1.0],
    "candidate_share": 0.5,
    "mirror_share": 0.05,
    "state": {"phase": "step", "step": 1, "rollout_id": "abc", "version": 7, "reason": ""},
    "evidence": [
        {
            "window": 3,
            "step": 1,
            "decision": "hold",
            "stable_n": 50,
            "candidate_n": 20,
            "mirror_n": 4,
            "gates": [
                {"gate": "ttft_p95_ratio", "verdict": "pass", "n": 20, "value": 1.234567, "limit": 1.5},
                {"gate": "error_rate", "verdict": "insufficient", "n": 0, "value": None, "limit": None},
                {"gate": "tool_call_invalid_rate", "verdict": "pass", "n": 0, "value": 0.0, "limit": 0.01},
            ],
        }
    ],
}


class Admin:
    """A scripted admin API: each request recorded (method, path, authorization), each
    answered with the next (status, body bytes) of `answers`."""

    def __init__(self) -> None:
        self.seen: list[tuple[str, str, str | None]] = []
        self.answers: list[tuple[int, bytes]] = []
        admin = self

        class Handler(BaseHTTPRequestHandler):
            def _answer(self) -> None:
                # the request line's path as sent (self.path folds a leading "//")
                admin.seen.append((self.command, self.requestline.split()[1], self.headers.get("Authorization")))
                status, body = admin.answers.pop(0)
                self.send_response(status)
                self.send_header("content-length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            do_GET = do_POST = _answer

            def log_message(self, *args) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()


@pytest.fixture()
def admin(monkeypatch):
    monkeypatch.delenv("SWITCHYARD_ADMIN_KEY", raising=False)
    server = Admin()
    yield server
    server.server.shutdown()
    server.server.server_close()


def test_the_status_of_every_rollout_is_a_table(admin, capsys):
    admin.answers.append((200, json.dumps({"data": [ROW, {**ROW, "model": "n", "step": None}]}).encode()))
    assert main(["rollout", "status", "--url", admin.url + "/", "--key", "k1"]) == 0
    assert admin.seen == [("GET", "/admin/rollouts", "Bearer k1")]
    assert capsys.readouterr().out == table([ROW, {**ROW, "model": "n", "step": None}]) + "\n"


def test_the_url_may_carry_a_path_kept_to_its_last_slash(admin, capsys):
    admin.answers.append((200, b"{}"))
    assert main(["rollout", "status", "--url", admin.url + "/X//", "--key", "k"]) == 0
    assert admin.seen == [("GET", "/X/admin/rollouts", "Bearer k")]


def test_a_models_status_and_each_action_print_its_description(admin, capsys, monkeypatch):
    monkeypatch.setenv("SWITCHYARD_ADMIN_KEY", "from-env")
    admin.answers.append((200, json.dumps(BODY).encode()))
    assert main(["rollout", "status", "org/m x", "--url", admin.url]) == 0
    assert admin.seen == [("GET", "/admin/rollouts/org/m%20x", "Bearer from-env")]
    assert capsys.readouterr().out == describe(BODY) + "\n"
    for action in ("start", "pause", "resume", "promote", "abort"):
        admin.answers.append((200, json.dumps(BODY).encode()))
        assert main(["rollout", action, "m", "--url", admin.url, "--key", "k"]) == 0
        assert admin.seen[-1] == ("POST", f"/admin/rollouts/m/{action}", "Bearer k")
        assert capsys.readouterr().out == describe(BODY) + "\n"


def test_json_prints_the_apis_answer_and_an_empty_answer_is_no_rollout(admin, capsys):
    admin.answers.append((200, json.dumps({"data": [ROW]}).encode()))
    assert main(["rollout", "status", "--json", "--url", admin.url]) == 0
    assert admin.seen == [("GET", "/admin/rollouts", "Bearer ")]  # no key anywhere: an empty one
    assert capsys.readouterr().out == json.dumps({"data": [ROW]}, indent=2) + "\n"
    admin.answers.append((200, b""))
    assert main(["rollout", "status", "--url", admin.url]) == 0
    assert capsys.readouterr().out == "no rollouts configured\n"


def test_a_refusal_prints_its_status_and_message_and_exits_1(admin, capsys):
    admin.answers += [
        (404, json.dumps({"error": {"message": "no rollout for model 'q'", "code": "x"}}).encode()),
        (409, json.dumps({"detail": "busy"}).encode()),
        (500, b"<html>oops</html>"),
        (403, json.dumps({"error": {"code": "forbidden"}}).encode()),
    ]
    assert main(["rollout", "pause", "q", "--url", admin.url]) == 1
    assert capsys.readouterr() == ("", "HTTP 404: no rollout for model 'q'\n")
    assert main(["rollout", "status", "--url", admin.url]) == 1
    assert capsys.readouterr().err == "HTTP 409: {'detail': 'busy'}\n"
    assert main(["rollout", "status", "q", "--url", admin.url]) == 1
    assert capsys.readouterr().err == "HTTP 500: <html>oops</html>\n"
    assert main(["rollout", "status", "--url", admin.url]) == 1
    assert capsys.readouterr().err == "HTTP 403: {'error': {'code': 'forbidden'}}\n"


def test_an_unreachable_gateway_names_the_address_it_tried(capsys):
    assert main(["rollout", "abort", "m", "--url", "http://127.0.0.1:9", "--key", "k"]) == 1
    err = capsys.readouterr().err
    assert err.startswith("HTTP 0: cannot reach http://127.0.0.1:9/admin/rollouts/m/abort: ") and "refused" in err


def test_the_command_line_its_defaults_and_help():
    parser = build_parser(["rollout"])
    args = parser.parse_args(["rollout", "status"])
    assert (args.url, args.key, args.json, args.model, args.action) == (
        "http://127.0.0.1:8080",
        None,
        False,
        None,
        None,
    )
    assert parser.parse_args(["rollout", "promote", "m"]).action == "promote"
    with pytest.raises(SystemExit):
        parser.parse_args(["rollout", "start"])  # an action needs the model
    with pytest.raises(SystemExit):
        parser.parse_args(["rollout"])  # and the command its subcommand
    sub = parser._subparsers._group_actions[0].choices["rollout"]  # type: ignore[union-attr]
    overview = " ".join(sub.format_help().split())
    actions = " ".join(f"{a} {a} a rollout" for a in ("start", "pause", "resume", "promote", "abort"))
    assert f"status show every rollout, or one model's with its evidence {actions} options:" in overview
    status = sub._subparsers._group_actions[0].choices["status"]  # type: ignore[union-attr]
    assert " ".join(status.format_help().split()).endswith(
        "positional arguments: model the model under rollout options: -h, --help show this help message and exit"
        " --url URL the listener serving /admin (the ops one if set)"
        " --key KEY the admin key (default: $SWITCHYARD_ADMIN_KEY) --json print the API's JSON"
    )
    assert "rollout read and steer rollouts through the admin API" in " ".join(parser.format_help().split())


def test_a_missing_subcommand_is_named_in_the_refusal(capsys):
    with pytest.raises(SystemExit):
        build_parser(["rollout"]).parse_args(["rollout"])
    assert capsys.readouterr().err.endswith("error: the following arguments are required: rollout_command\n")


def test_each_call_waits_ten_seconds_at_most_and_an_undecodable_refusal_is_printed_as_it_can_be(
    admin, capsys, monkeypatch
):
    import urllib.request

    timeouts: list[object] = []
    urlopen = urllib.request.urlopen

    def recording(request, *args, **kwargs):
        timeouts.append(kwargs.get("timeout", args[1] if len(args) > 1 else "unset"))
        return urlopen(request, *args, **kwargs)

    monkeypatch.setattr(urllib.request, "urlopen", recording)
    admin.answers += [(200, b"{}"), (502, b"\xff bad gateway")]
    assert main(["rollout", "status", "--url", admin.url]) == 0
    assert main(["rollout", "status", "--url", admin.url]) == 1
    assert timeouts == [10, 10]
    assert capsys.readouterr().err == "HTTP 502: \ufffd bad gateway\n"


def test_the_table_and_the_description_to_the_character():
    assert table([ROW, {**ROW, "model": "n", "step": None, "phase": "promoted"}]).split("\n") == [
        "MODEL                        PHASE        STEP CANDIDATE  MIRROR  ROLLOUT",
        "m                            step            1       25%     10%  abc",
        "n                            promoted        -       25%     10%  abc",
    ]
    assert describe(BODY).split("\n") == [
        "model m: step (step 1 of 10% -> 50% -> 100%), candidate 50%, mirror 5%",
        "rollout abc version 7: -",
        "  window 3 step 1: hold (stable 50, candidate 20, mirror 4)",
        "    ttft_p95_ratio             pass         n 20 value 1.235 limit 1.5",
        "    error_rate                 insufficient n 0",
    ]
    plain = {**BODY, "evidence": [{**BODY["evidence"][0], "examples": ["a", "b"], "gates": []}]}
    assert describe(plain).split("\n")[3:] == ["    example: a", "    example: b"]
    assert describe({k: v for k, v in BODY.items() if k != "evidence"}).count("\n") == 1
