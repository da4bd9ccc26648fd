"""The `switchyard` command's dispatch (gateway/cli/main.py) in process: which word is the
command, the parser that registers only the chosen group, a group whose extra is missing
(refused in one line, exit 2, whatever follows it) against a missing module of our own or
of the base (a bug: raised), and the exit status a command's result becomes."""

from __future__ import annotations

import argparse
import sys
import types

import pytest

from gateway.cli import main as cli
from gateway.cli.main import COMMANDS, CommandGroup, MissingExtra, _chosen, _missing_extra, build_parser, main
from processes.install import install_hint


def missing(name: str | None) -> ModuleNotFoundError:
    return ModuleNotFoundError(f"No module named {name!r}", name=name)


def test_the_command_is_the_first_word_that_is_not_an_option():
    assert _chosen(["-v", "--x", "keys", "list"]) == "keys"
    assert _chosen(["--help"]) is None and _chosen([]) is None


def test_only_the_chosen_group_is_registered_and_the_others_by_name():
    parser = build_parser(["rollout", "status"])
    choices = parser._subparsers._group_actions[0].choices  # type: ignore[union-attr]
    assert list(choices) == ["rollout", *[n for n in COMMANDS if n != "rollout"]]
    assert "status" in choices["rollout"].format_help()  # the rollout group's own parser
    assert choices["serve"].add_help is False and choices["serve"]._actions == []  # by name only
    text = " ".join(build_parser([]).format_help().split())
    for name, group in COMMANDS.items():
        assert f"{name} {' '.join(group.help.split())}" in text
    assert (
        text.startswith("usage: switchyard ")
        and "\nAn OpenAI-compatible LLM gateway.\n" in build_parser([]).format_help()
    )
    with pytest.raises(SystemExit):
        build_parser([]).parse_args([])  # a command is required


def test_the_parser_reads_the_processs_own_arguments_by_default(monkeypatch):
    monkeypatch.setattr(sys, "argv", ["switchyard", "rollout", "status", "--key", "k"])
    choices = build_parser()._subparsers._group_actions[0].choices  # type: ignore[union-attr]
    assert "status" in choices["rollout"].format_help() and choices["serve"]._actions == []


def test_which_missing_module_names_an_extra():
    assert _missing_extra("nope", missing("torch")) is None  # no such command
    assert _missing_extra("serve", missing("torch")) is None  # the base: a bug, not an extra
    assert _missing_extra("engine", missing(None)) is None
    assert _missing_extra("engine", missing("")) is None
    assert _missing_extra("engine", missing("engine.model")) is None  # our own package
    assert _missing_extra("bench", missing("processes.x")) is None
    found = _missing_extra("engine", missing("torch.nn"))
    assert isinstance(found, MissingExtra)
    assert str(found) == (
        f"switchyard engine needs the `engine` extra, which is not installed (no module 'torch'): {install_hint('engine')}"
    )


def fake_group(monkeypatch, module_name: str, extra: str | None, func=None) -> None:
    """A command `fake` whose group is `module_name` (a module put in sys.modules when `func`
    is given: it registers `fake` running `func`)."""
    if func is not None:
        module = types.ModuleType(module_name)

        def register(sub: argparse._SubParsersAction) -> None:
            sub.add_parser("fake").set_defaults(func=func)

        module.register = register  # type: ignore[attr-defined]
        monkeypatch.setitem(sys.modules, module_name, module)
    monkeypatch.setitem(COMMANDS, "fake", CommandGroup((module_name,), "a fake group", extra))


def test_a_group_whose_extra_is_missing_is_refused_in_one_line_whatever_follows(monkeypatch, capsys):
    fake_group(monkeypatch, "no_such_package_of_a_test.cli", "fakeextra")
    assert main(["fake", "run", "--anything", "x"]) == 2
    err = capsys.readouterr().err
    assert err == (
        "switchyard fake needs the `fakeextra` extra, which is not installed (no module 'no_such_package_of_a_test'): "
        f"{install_hint('fakeextra')}\n"
    )
    choices = build_parser(["fake"])._subparsers._group_actions[0].choices  # type: ignore[union-attr]
    assert choices["fake"].add_help is False and "a fake group" in build_parser(["fake"]).format_help()


def test_a_missing_module_of_the_base_or_of_our_own_is_raised(monkeypatch):
    fake_group(monkeypatch, "no_such_package_of_a_test.cli", None)
    with pytest.raises(ModuleNotFoundError):
        build_parser(["fake"])
    fake_group(monkeypatch, "gateway.no_such_module_of_a_test", "fakeextra")
    with pytest.raises(ModuleNotFoundError):
        build_parser(["fake"])


def test_a_command_missing_its_extra_as_it_runs_is_refused_too(monkeypatch, capsys):
    def needs_torch(args):
        raise missing("torch")

    fake_group(monkeypatch, "fake_cli_module_of_a_test", "engine", needs_torch)
    assert main(["fake"]) == 2
    assert capsys.readouterr().err.startswith("switchyard fake needs the `engine` extra")

    def broken(args):
        raise missing("gateway.gone")

    fake_group(monkeypatch, "fake_cli_module_of_a_test", "engine", broken)
    with pytest.raises(ModuleNotFoundError):
        main(["fake"])


@pytest.mark.parametrize(("result", "status"), [(None, 0), (0, 0), (3, 3), (True, 1)])
def test_a_commands_result_is_the_exit_status(monkeypatch, result, status):
    fake_group(monkeypatch, "fake_cli_module_of_a_test", None, lambda args: result)
    assert main(["fake"]) == status


def test_main_reads_the_processs_own_arguments_by_default(monkeypatch):
    fake_group(monkeypatch, "fake_cli_module_of_a_test", None, lambda args: 7)
    monkeypatch.setattr(sys, "argv", ["switchyard", "fake"])
    assert main() == 7
    assert cli.OWN_PACKAGES >= {"gateway", "engine", "processes", "bench", "conformance"}


def test_an_unknown_command_is_argparses_usage_error_in_process(capsys):
    with pytest.raises(SystemExit) as exc:
        main(["serv", "--config", "x.yaml"])
    assert exc.value.code == 2 and "invalid choice: 'serv'" in capsys.readouterr().err
