"""The `stockade` command: help for every command, usage errors exit 2."""

from __future__ import annotations

import subprocess
import sys

import pytest

from stockade.cli.main import build_parser, main

STOCKADE = [sys.executable, "-m", "stockade.cli.main"]


def _commands() -> list[list[str]]:
    parser = build_parser()
    out: list[list[str]] = [[]]
    for action in parser._subparsers._group_actions:  # type: ignore[union-attr]
        for name, sub in action.choices.items():
            out.append([name])
            for sub_action in sub._actions:
                if hasattr(sub_action, "choices") and isinstance(sub_action.choices, dict):
                    out.extend([name, child] for child in sub_action.choices)
    return out


def test_every_command_has_help(capsys: pytest.CaptureFixture[str]) -> None:
    # In process: one interpreter start per command cost 44 s; argparse's help path is the
    # same code either way (the usage-error tests below keep the real entry point covered).
    commands = _commands()
    assert ["serve"] in commands and ["demo"] in commands
    for cmd in commands:
        with pytest.raises(SystemExit) as exited:
            main([*cmd, "--help"])
        out = capsys.readouterr()
        assert exited.value.code == 0, (cmd, out.err)
        assert "usage: stockade" in out.out, cmd


def test_version() -> None:
    done = subprocess.run([*STOCKADE, "--version"], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0
    assert done.stdout.startswith("stockade ") and done.stdout.split()[1][0].isdigit()


@pytest.mark.parametrize("argv", [[], ["serve"], ["serve", "nonsense"], ["no-such-command"]])
def test_usage_errors_exit_2(argv: list[str]) -> None:
    done = subprocess.run([*STOCKADE, *argv], capture_output=True, text=True)
    assert done.returncode == 2
    assert "usage:" in done.stderr


def test_serve_with_bad_settings_says_why() -> None:
    env = {"STOCKADE_DECISION_LISTEN": "not-an-address", "PATH": "/usr/bin:/bin"}
    done = subprocess.run(
        [*STOCKADE, "serve", "decision"], capture_output=True, text=True, env=env, timeout=60
    )
    assert done.returncode == 2
    assert "STOCKADE_DECISION_LISTEN" in done.stderr
    assert "Traceback" not in done.stderr
