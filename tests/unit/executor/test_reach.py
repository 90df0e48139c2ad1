"""DEC-16 building blocks: policy rules → protected-read globs, and recursive reach."""

from __future__ import annotations

from pathlib import Path

import pytest

from stockade.contract.protected import parse_policy_reads, protected_reads, read_glob
from stockade.errors import InvalidArgument
from stockade.executor.inspect import inspect_call
from stockade.executor.paths import PathSandbox, Root
from stockade.executor.reach import can_reach, recursive_reader


@pytest.mark.parametrize(
    ("content", "glob"),
    [
        ("**/.env", "**/.env"),
        ("*.pem", "*.pem"),
        (".env", "/ws/.env"),
        ("./.env", "/ws/.env"),
        ("./secrets/**", "/ws/secrets/**"),
        ("sub/../.env", "/ws/.env"),
        ("/ws/.env", "/ws/.env"),
        ("//ws//x/", "/ws/x"),
        ("~/.ssh/id_rsa", None),
        ("", None),
    ],
)
def test_rule_paths_become_executor_globs(content: str, glob: str | None) -> None:
    assert read_glob(content, "/ws") == glob


def test_only_deny_and_ask_on_reading_tools_count() -> None:
    reads = protected_reads(
        [
            ("deny", "read_file(**/.env)"),
            ("deny", "*(**/*.pem)"),
            ("ask", "read_file(./notes/**)"),
            ("allow", "read_file(**/ok)"),
            ("deny", "run_bash(cat *)"),
            ("deny", "file_write(**/x)"),
            ("deny", "read_file"),
            ("deny", "read_file(**/.env)"),  # duplicates once
        ],
        "/ws",
    )
    assert reads.deny == ("**/.env", "**/*.pem")
    assert reads.ask == ("/ws/notes/**",)


def test_policy_text_in_both_formats_and_errors() -> None:
    toml = '[permissions]\ndeny = [{pattern = "read_file(.env)", reason = "x"}]\n'
    assert parse_policy_reads(toml, "toml", "/ws").deny == ("/ws/.env",)
    yaml = "permissions:\n  ask: ['*(**/id_rsa*)']\n"
    assert parse_policy_reads(yaml, "yaml", "/ws").ask == ("**/id_rsa*",)
    for bad in ("[permissions\n", "permissions = 3\n", "[permissions]\ndeny = 3\n"):
        with pytest.raises(InvalidArgument):
            parse_policy_reads(bad, "toml", "/ws")


@pytest.mark.parametrize(
    ("name", "argv", "recursive"),
    [
        ("grep", ("-r", "x", "."), True),
        ("grep", ("-rn", "x"), True),
        ("grep", ("x", "-R"), True),
        ("grep", ("--recursive", "x"), True),
        ("grep", ("-d", "recurse", "x", "."), True),
        ("grep", ("x", "a.txt"), False),
        ("rg", ("x",), True),
        ("find", (".", "-exec", "cat", "{}", "+"), True),
        ("find", (".", "-name", "x"), False),
        ("tar", ("cf", "-", "."), True),
        ("tar", ("-czf", "a.tgz", "."), True),
        ("tar", ("tf", "a.tar"), False),
        ("cp", ("-a", "src", "dst"), True),
        ("cp", ("a", "b"), False),
        ("zip", ("-r", "a.zip", "."), True),
        ("rsync", ("-a", ".", "/tmp/x"), True),
        ("tree", (".",), False),
        ("cat", ("a",), False),
    ],
)
def test_recursive_readers(name: str, argv: tuple[str, ...], recursive: bool) -> None:
    assert recursive_reader(name, argv) is recursive


@pytest.mark.parametrize(
    ("directory", "glob", "reach"),
    [
        ("/ws", "**/.env", True),
        ("/anything", "*.pem", True),
        ("/ws", "/ws/secrets/**", True),
        ("/ws/secrets/deep", "/ws/secrets/**", True),
        ("/ws/other", "/ws/secrets/**", False),
        ("/", "/ws/.env", True),
        ("/ws2", "/ws/.env", False),
    ],
)
def test_can_reach(directory: str, glob: str, reach: bool) -> None:
    assert can_reach(directory, glob) is reach


def test_asked_about_paths_ask_every_reading_tool(tmp_path: Path) -> None:
    ws = tmp_path
    (ws / "notes").mkdir()
    (ws / "notes" / "a.txt").write_text("x")
    sb = PathSandbox([Root(str(ws), True)], str(ws))
    ask = (f"{ws}/notes/**",)
    for tool, args in [
        ("read_file", {"file_path": "notes/a.txt"}),
        ("grep_files", {"pattern": "x", "path": "."}),
        ("run_bash", {"command": "cat notes/a.txt"}),
        ("run_bash", {"command": "grep -r x ."}),
    ]:
        ins = inspect_call(tool, args, sandbox=sb, ask_read_globs=ask)
        assert ins.verdict == "ask" and any(r.bypass_immune for r in ins.rules), (tool, args)
    # a listing shows names only; elsewhere nothing is asked
    assert inspect_call(
        "glob_files", {"pattern": "**/*"}, sandbox=sb, ask_read_globs=ask
    ).verdict == ("allow")
    assert inspect_call("run_bash", {"command": "ls"}, sandbox=sb, ask_read_globs=ask).verdict == (
        "allow"
    )


def test_recursive_read_near_a_denied_path_is_a_plain_ask(tmp_path: Path) -> None:
    sb = PathSandbox([Root(str(tmp_path), True)], str(tmp_path), denied_read_globs=("**/.env",))
    ins = inspect_call("run_bash", {"command": "grep -r SECRET ."}, sandbox=sb)
    assert ins.verdict == "ask" and not ins.rules[-1].bypass_immune  # the masks hide .env
    plain = inspect_call("run_bash", {"command": "grep SECRET notes.txt"}, sandbox=sb)
    assert plain.verdict == "allow"
