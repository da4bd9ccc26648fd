"""`switchyard rollout` (gateway/cli/rollout.py): what it prints of the admin API's answers,
and its exit status when the gateway refuses or cannot be reached."""

from __future__ import annotations

from gateway.cli.main import main
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
