"""Property tests: analyze() never raises, and never allows a denied command anywhere."""

from __future__ import annotations

from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from stockade.executor.bash import BashAnalyzer, lists
from stockade.executor.paths import PathSandbox, Root

# Names that are refused wherever they stand (network disabled).
DENIED_NAMES = sorted(
    lists.SHELLS
    | set(lists.DENY_COMMANDS)
    | set(lists.NETWORK_COMMANDS)
    | {"eval", "trap", "alias", "enable", "fc", "bind", "complete"}
)

SAFE_PREFIXES = ["", "ls", "git status", "cat README.md", "echo hi", "grep -rn x .", "true"]
SEPARATORS = ["; ", " && ", " || ", " | ", "\n", " & ", " |& "]
WRAPPERS = ["", "env ", "env X=1 ", "nice ", "nice -n 5 ", "timeout 5 ", "command ", "exec ",
            "time ", "nohup ", "stdbuf -oL ", "xargs ", "setsid ", "/usr/bin/env "]  # fmt: skip
CONTAINERS = [
    "{}",
    "$({})",
    "`{}`",
    "echo $({})",
    'echo "$({})"',
    "cat <({})",
    "( {} )",
    "{{ {}; }}",
    "if true; then {}; fi",
    "for i in 1; do {}; done",
    "f() {{ {}; }}",
    "case x in x) {};; esac",
    "echo ${{x:-$({})}}",
    "cat <<EOF\n$({})\nEOF",
    "find . -exec {} \\;",
    "while false; do {}; done",
    "[[ -n $({}) ]]",
]

BASHISH = st.text(
    alphabet=st.sampled_from(list("abcdeghilmnorstuxyz-_/.~*?[]{}()<>|&;$`'\"\\ \n\t=:!#%0123")),
    max_size=60,
)

SANDBOX_DIR = Path(__file__).parent  # any existing folder: the analysis only reads metadata


def _sandbox() -> PathSandbox:
    return PathSandbox([Root(str(SANDBOX_DIR), True)], str(SANDBOX_DIR))


@settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.text(max_size=200))
def test_analyze_never_raises_on_arbitrary_text(analyzer: BashAnalyzer, text: str) -> None:
    result = analyzer.analyze(text, sandbox=_sandbox())
    assert result.verdict in ("allow", "ask", "deny")
    assert result.risk in ("low", "medium", "high")
    assert result.explanation
    if result.verdict == "allow":
        assert not result.reasons


@settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(st.sampled_from(["{", "}", ",", "$", "echo ", " "]) | st.characters(), max_size=30))
def test_braces_and_any_unicode_never_crash_the_parser(
    analyzer: BashAnalyzer, parts: list[str]
) -> None:
    # tree-sitter-bash segfaults on `{` + a plane 3-16 code point; analyze() must refuse
    # such text before parsing (a crash here kills the test process).
    result = analyzer.analyze("".join(parts), sandbox=_sandbox())
    assert result.verdict in ("allow", "ask", "deny")


@settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(BASHISH)
def test_bash_like_text_is_never_allowed_with_a_denied_command(
    analyzer: BashAnalyzer, text: str
) -> None:
    result = analyzer.analyze(text, sandbox=_sandbox())
    if result.verdict == "allow":
        assert not {c.name for c in result.commands} & set(DENIED_NAMES), result.commands


@settings(max_examples=600, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    prefix=st.sampled_from(SAFE_PREFIXES),
    separator=st.sampled_from(SEPARATORS),
    wrapper=st.sampled_from(WRAPPERS),
    container=st.sampled_from(CONTAINERS),
    name=st.sampled_from(DENIED_NAMES),
    args=st.sampled_from(["", " -c id", " x", " /tmp/y", " -- z", " 'a b'"]),
)
def test_a_denied_name_in_command_position_is_never_allowed(
    analyzer: BashAnalyzer,
    prefix: str,
    separator: str,
    wrapper: str,
    container: str,
    name: str,
    args: str,
) -> None:
    inner = container.format(wrapper + name + args)
    command = prefix + separator + inner if prefix else inner
    result = analyzer.analyze(command, sandbox=_sandbox())
    assert result.verdict != "allow", command
    # With a parseable command the refusal names the command it refused.
    if result.verdict == "deny" and not any("parsed" in r for r in result.reasons):
        assert name in {c.name for c in result.commands} or "fork-bomb" in str(result.reasons)


@pytest.mark.parametrize("name", DENIED_NAMES)
def test_every_denied_name_alone_is_denied(analyzer: BashAnalyzer, name: str) -> None:
    result = analyzer.analyze(f"{name} x", sandbox=_sandbox())
    assert result.verdict == "deny", (name, result.reasons)
