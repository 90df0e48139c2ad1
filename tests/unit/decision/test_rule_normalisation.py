"""DEC-1 rev 2: rule paths are normalised like call paths for every effect, and the wrapper
table shared with the executor decides what a rule looks through (DENY/ASK: every wrapper;
ALLOW: only those that pass the command its arguments unchanged).

Attack strings are data here, never run.
"""

from __future__ import annotations

import pytest

from stockade.contract.shell import PRIVILEGE_WRAPPERS, WRAPPERS
from stockade.decision.engine import DecisionRequest, Facts, decide
from stockade.decision.policy import PolicyDoc, compile_policy
from stockade.decision.rules import Effect, Rule, Source, normalize_command, rule_path
from stockade.decision.rules.content import call_content

D, A, L = Effect.DENY, Effect.ASK, Effect.ALLOW
CWD = "/w"


def _verdict(
    rules: list[tuple[Effect, str]],
    tool: str,
    args: dict[str, str],
    *,
    facts: Facts | None = None,
) -> Effect:
    doc = PolicyDoc(rules=tuple(Rule(e, p, Source.MANAGED) for e, p in rules))
    policy = compile_policy(doc, cwd=CWD)
    return decide(policy, DecisionRequest(tool, args, facts=facts or Facts())).verdict


# --- (a) rule paths ------------------------------------------------------------------------

SAME_FILE = ["./.env", ".env", "/w/.env", "/w/./.env", "/w//.env", "/w/x/../.env", "x/../.env"]
"""Every way a call may name the file /w/.env (cwd /w)."""


@pytest.mark.parametrize("effect", [D, A])
@pytest.mark.parametrize("pattern", ["./.env", ".env", "/w/.env", "/w/./.env", "**/.env"])
@pytest.mark.parametrize("call_path", SAME_FILE)
def test_deny_and_ask_path_forms_name_the_same_file(
    effect: Effect, pattern: str, call_path: str
) -> None:
    """`read_file(./.env)`, `read_file(.env)` and the absolute path are one file (DEC-1 rev 2)."""
    verdict = _verdict([(effect, f"read_file({pattern})")], "read_file", {"file_path": call_path})
    assert verdict is effect, (pattern, call_path)


@pytest.mark.parametrize("effect", [D, A])
@pytest.mark.parametrize("pattern", ["./secrets/**", "secrets/**", "/w/secrets/**", "./secrets/*"])
@pytest.mark.parametrize("call_path", ["secrets/k.pem", "./secrets/k.pem", "/w/secrets/k.pem"])
def test_dot_slash_globs_match_in_deny_and_ask(
    effect: Effect, pattern: str, call_path: str
) -> None:
    verdict = _verdict([(effect, f"read_file({pattern})")], "read_file", {"file_path": call_path})
    assert verdict is effect, (pattern, call_path)


def test_dot_slash_means_the_working_directory_while_bare_names_match_at_any_depth() -> None:
    """`./x` is the file in the working directory; `x` and `**/x` protect x at any depth."""
    deep = {"file_path": "/w/sub/.env"}
    assert _verdict([(D, "read_file(./.env)")], "read_file", deep) is L
    assert _verdict([(D, "read_file(.env)")], "read_file", deep) is D
    assert _verdict([(D, "read_file(**/.env)")], "read_file", deep) is D
    assert _verdict([(D, "read_file(./**/.env)")], "read_file", deep) is D
    outside = {"file_path": "/tmp/.env"}
    assert _verdict([(D, "read_file(./**/.env)")], "read_file", outside) is L
    assert _verdict([(D, "read_file(**/.env)")], "read_file", outside) is D
    # `../x` is relative to the working directory too
    assert (
        _verdict([(D, "read_file(../etc/shadow)")], "read_file", {"file_path": "/etc/shadow"}) is D
    )
    assert _verdict([(D, "read_file(./secrets/)")], "read_file", {"file_path": "secrets/a"}) is D


def test_allow_path_forms_name_the_same_file_and_never_more() -> None:
    ask = Facts(tool_rules=(Rule(A, "read_file", Source.TOOL, "tool check"),))
    for pattern in ["./README.md", "README.md", "/w/README.md", "/w/./x/../README.md"]:
        for call_path in ["README.md", "./README.md", "/w/README.md"]:
            verdict = _verdict(
                [(L, f"read_file({pattern})")], "read_file", {"file_path": call_path}, facts=ask
            )
            assert verdict is L, (pattern, call_path)
        for other in ["/w/sub/README.md", "/tmp/README.md", "/w/README.md.bak"]:
            verdict = _verdict(
                [(L, f"read_file({pattern})")], "read_file", {"file_path": other}, facts=ask
            )
            assert verdict is A, (pattern, other)
    assert (
        _verdict([(L, "read_file(./src/*)")], "read_file", {"file_path": "src/a"}, facts=ask) is L
    )
    assert (
        _verdict([(L, "read_file(./src/*)")], "read_file", {"file_path": "/src/a"}, facts=ask) is A
    )


@pytest.mark.parametrize(
    ("content", "exact", "expected"),
    [
        ("./.env", False, ("/w/.env", True)),
        ("./.env", True, ("/w/.env", True)),
        (".env", False, (".env", False)),
        (".env", True, ("/w/.env", True)),
        ("**/.env", False, ("**/.env", False)),
        ("**/.env", True, ("**/.env", False)),
        ("secrets//./a/../**", False, ("secrets/**", False)),
        ("/w/**/../x", False, ("/w/**/../x", True)),  # never fold a wildcard away
        ("../..", False, ("/", True)),
        ("/w/secrets/", False, ("/w/secrets", True)),
    ],
)
def test_rule_path(content: str, exact: bool, expected: tuple[str, bool]) -> None:
    assert rule_path(content, CWD, exact=exact) == expected


# --- (b) wrappers ----------------------------------------------------------------------------

WRAPPED_RM = [
    "nice -n 5 rm -rf x",
    "nice -n5 rm -rf x",
    "nice --adjustment=5 rm -rf x",
    "nice --adj 5 rm -rf x",  # an abbreviated long option
    "timeout -s KILL 5 rm -rf x",
    "timeout --signal=KILL -k 1 5 rm -rf x",
    "timeout 5 rm -rf x",
    "env -u X rm -rf x",
    "env -i A=1 B=2 rm -rf x",
    "env -C /tmp rm -rf x",
    "env -S 'rm -rf x'",
    "time -f %e rm -rf x",
    "time -o /tmp/t -f '%e s' rm -rf x",
    "sudo -u root rm -rf x",
    "sudo -Eu root rm -rf x",
    "sudo -uroot rm -rf x",
    "doas -u root rm -rf x",
    "su -c 'rm -rf x' root",
    "pkexec --user root rm -rf x",
    "chroot / rm -rf x",
    "chroot --userspec=0:0 / rm -rf x",
    "/usr/bin/env rm -rf x",
    "/usr/bin/nice -n 5 /bin/rm -rf x",
    "'nice' -n 5 rm -rf x",
    "\\nice -n 5 \\rm -rf x",
    "n\\ice -n 5 'r'm -rf x",
    "nohup nice ionice -c3 stdbuf -oL timeout 5 rm -rf x",
    "xargs -n 1 rm -rf",
    "xargs -I{} rm -rf {}",
    "command rm -rf x",
    "command -v rm -rf x",  # -v only describes: DENY/ASK over-match on purpose
    "exec -a name rm -rf x",
    "flock /tmp/l rm -rf x",
    "flock /tmp/l -c 'rm -rf x'",
    "taskset 1 rm -rf x",
    "setsid rm -rf x",
    "X=1 Y='a b' rm -rf x",
    "nice -- rm -rf x",
]


@pytest.mark.parametrize("command", WRAPPED_RM)
@pytest.mark.parametrize("effect", [D, A])
def test_wrapped_commands_are_caught_by_deny_and_ask(command: str, effect: Effect) -> None:
    """DENY/ASK look through every wrapper of the shared table with its options."""
    assert normalize_command(command).startswith("rm "), command
    for facts in (Facts(), Facts(sub_commands=(command,))):
        verdict = _verdict(
            [(effect, "run_bash(rm *)")], "run_bash", {"command": command}, facts=facts
        )
        assert verdict is effect, command


def test_time_format_is_an_option_value_not_the_command() -> None:
    """The case the two sides once disagreed on: `time -f %e rm x` runs rm, not `%e`."""
    assert normalize_command("time -f %e rm x") == "rm x"
    assert normalize_command("time -f %e rm x", look_through_privilege=False) == "rm x"


TOOL_ASK = Facts(tool_rules=(Rule(A, "run_bash", Source.TOOL, "not read-only"),))


@pytest.mark.parametrize(
    "command",
    [
        "xargs npm test",
        "xargs -n 1 npm test",
        "find . -exec npm test \\;",
        "sudo npm test",
        "sudo -u root npm test",
        "doas npm test",
        "env npm test",
        "env LD_PRELOAD=/tmp/x.so npm test",
        "LD_PRELOAD=/tmp/x.so npm test",
        "NODE_OPTIONS='--require /tmp/x.js' npm test",
        "env -S 'npm test'",
        "command -v npm test",
        "nice -n 5 xargs npm test",
        "timeout 5 sudo npm test",
        "/tmp/npm test",
        "./npm test",
        "setsid npm test",
        "chroot / npm test",
        "npm test --extra",
    ],
)
def test_allow_is_not_widened_by_wrappers(command: str) -> None:
    """DEC-1 rev 2: an exact ALLOW looks through a wrapper only if it passes the command its
    arguments unchanged; wrappers that add arguments, change the environment or the user
    leave the tool's ASK standing."""
    for facts in (TOOL_ASK, Facts(tool_rules=TOOL_ASK.tool_rules, sub_commands=(command,))):
        verdict = _verdict(
            [(L, "run_bash(npm test)")], "run_bash", {"command": command}, facts=facts
        )
        assert verdict is A, command


@pytest.mark.parametrize(
    "command",
    [
        "npm test",
        "time npm test",
        "time -f %e npm test",
        "nice -n 5 npm test",
        "timeout -s KILL 5 npm test",
        "nohup npm test",
        "stdbuf -oL npm test",
        "command npm test",
        "/usr/bin/npm test",
        "nice timeout 5 npm test",
        "'npm' test",
    ],
)
def test_allow_looks_through_transparent_wrappers(command: str) -> None:
    for facts in (TOOL_ASK, Facts(tool_rules=TOOL_ASK.tool_rules, sub_commands=(command,))):
        verdict = _verdict(
            [(L, "run_bash(npm test)")], "run_bash", {"command": command}, facts=facts
        )
        assert verdict is L, command


def test_every_table_wrapper_is_looked_through_by_deny() -> None:
    """Every wrapper of the shared table (and the privilege wrappers) hides nothing from a
    DENY, whatever the table holds tomorrow."""
    for name, spec in {**WRAPPERS, **PRIVILEGE_WRAPPERS}.items():
        positionals = " ".join(["P"] * spec.positionals)
        command = " ".join(w for w in (name, positionals, "rm -rf x") if w)
        assert normalize_command(command) == "rm -rf x", command
        transparent = normalize_command(command, look_through_privilege=False)
        assert (transparent == "rm -rf x") is spec.transparent, command


# git's own options before the subcommand, and a command given no arguments (red team,
# issue 11): `git -C . push origin` and a bare `git push` are pushes a DENY on
# `git push *` is written to stop (a bypass mode settles the executor's ASK for them).
GIT_PUSHES = [
    "git push",
    "git push origin",
    "git -C . push origin",
    "git --git-dir=.git push",
    "git --git-dir .git --work-tree . push origin main",
    "git -c user.name=x --no-pager push",
    "git --no-replace-objects -P push --force",
    "env git -C . push",
    "/usr/bin/git --bare push",
]


@pytest.mark.parametrize("command", GIT_PUSHES)
@pytest.mark.parametrize("effect", [D, A])
def test_git_global_options_and_bare_commands_are_caught_by_deny_and_ask(
    command: str, effect: Effect
) -> None:
    for facts in (Facts(), Facts(sub_commands=(command,))):
        verdict = _verdict(
            [(effect, "run_bash(git push *)")], "run_bash", {"command": command}, facts=facts
        )
        assert verdict is effect, command


@pytest.mark.parametrize(
    "command",
    ["git status", "git -C sub log --oneline", "git --no-pager pushd-notes", "git log push"],
)
def test_git_look_alikes_are_not_pushes(command: str) -> None:
    verdict = _verdict([(D, "run_bash(git push *)")], "run_bash", {"command": command})
    assert verdict is not D, command


def test_allow_is_not_widened_by_git_options() -> None:
    """An ALLOW names what it allows: only the DENY/ASK forms drop git's options."""
    content = call_content("run_bash", {"command": "git -c a.b=c status"}, cwd=CWD)
    assert content.allow_sub_commands == ("git -c a.b=c status",)
    assert "git status" in content.sub_commands


# A DENY/ASK on `NAME [WORD] -OPTS… *` names options, not their spelling (red team,
# issue 11): `rm -fr x` dodged `run_bash(rm -rf *)`, which a bypass mode then allowed.
@pytest.mark.parametrize(
    ("rule", "command"),
    [
        ("run_bash(rm -rf *)", "rm -rf x"),
        ("run_bash(rm -rf *)", "rm -fr x"),
        ("run_bash(rm -rf *)", "rm -r -f x"),
        ("run_bash(rm -rf *)", "rm -f -r x"),
        ("run_bash(rm -rf *)", "rm -Rf x"),
        ("run_bash(rm -rf *)", "rm -rfv x"),
        ("run_bash(rm -rf *)", "rm -v -r -i -f x y"),
        ("run_bash(rm -rf *)", "rm --recursive --force x"),
        ("run_bash(rm -rf *)", "rm -rf"),
        ("run_bash(rm -rf *)", "sudo rm -fr /"),
        ("run_bash(git push --force *)", "git push origin --force"),
        ("run_bash(git push --force *)", "git push -f"),
        ("run_bash(git push --force *)", "git -C . push -f origin main"),
    ],
)
@pytest.mark.parametrize("effect", [D, A])
def test_option_rules_match_options_as_a_set(rule: str, command: str, effect: Effect) -> None:
    for facts in (Facts(), Facts(sub_commands=(command,))):
        assert _verdict([(effect, rule)], "run_bash", {"command": command}, facts=facts) is effect


@pytest.mark.parametrize(
    ("rule", "command"),
    [
        ("run_bash(rm -rf *)", "rm -r x"),
        ("run_bash(rm -rf *)", "rm -f x"),
        ("run_bash(rm -rf *)", "rm x-rf"),
        ("run_bash(rm -rf *)", "ls -rf"),
        ("run_bash(git push --force *)", "git push origin"),
        ("run_bash(git push --force *)", "git pull --force"),
    ],
)
def test_option_rules_do_not_catch_other_options(rule: str, command: str) -> None:
    assert _verdict([(D, rule)], "run_bash", {"command": command}) is not D, command


def test_allow_option_rules_stay_literal() -> None:
    """ALLOW never matches more than written: `rm -rf build` is not `rm -fr build`."""
    content = call_content("run_bash", {"command": "rm -fr build"}, cwd=CWD)
    assert content.allow_sub_commands == ("rm -fr build",)
