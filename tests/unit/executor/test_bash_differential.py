"""Differential tests: every command real bash runs is one the parser reports.

The scripts only run `printf R%sZ N` markers (harmless), through every construct where a
grammar and bash might disagree: here-docs, backticks inside `${...}`, nesting, comments,
line continuations. A marker bash printed but the parser did not see is a command the
analysis would never have judged.
"""

from __future__ import annotations

import random
import re
import shutil
import subprocess
from collections.abc import Callable

import pytest

from stockade.executor.bash import analyze
from stockade.executor.bash.parser import parse

BASH = shutil.which("bash") or "/bin/bash"

HANDWRITTEN = [
    "cat <<EOF\n$(printf R%sZ 1)\nEOF\n",
    "cat <<EOF\n`printf R%sZ 1`\nEOF\n",
    "cat <<EOF\n${x:-`printf R%sZ 1`}\nEOF\n",
    "cat <<-EOF\n\t`printf R%sZ 1`\n\tEOF\nprintf R%sZ 2\n",
    "cat <<'EOF'\n`printf R%sZ 1`\nEOF\nprintf R%sZ 2\n",
    'echo "${x:-`printf R%sZ 1`}"',
    "echo ${x:-`printf R%sZ 1`} ${y/`printf R%sZ 2`/z}",
    "echo `echo \\`printf R%sZ 1\\``",
    "echo $(( $(printf 1; printf R%sZ 2 >&2) ))",
    "x=( `printf R%sZ 1` )",
    "echo ${#`printf R%sZ 1`}",
    "printf R%sZ 1 # ; printf R%sZ 2",
    "printf R%sZ 1 \\\n ; printf R%sZ 2",
    "f() { printf R%sZ 1; }; f",
    "case `printf R%sZ 1` in *) printf R%sZ 2;; esac",
    "for i in `printf R%sZ 1`; do printf R%sZ 2; done",
    "cat <(printf R%sZ 1) <(printf R%sZ 2)",
    'echo "$(echo "$(printf R%sZ 1)")"',
    "{ printf R%sZ 1; } > /dev/null; printf R%sZ 2",
    "cat <<A\n$(printf R%sZ 1)\nA\ncat <<B\n`printf R%sZ 2`\nB\n",
    "cat <<EOF | cat\n$(printf R%sZ 1)\nEOF\n",
    "cat <<EOF | cat\n$(printf R%sZ 1)\nEOF\nprintf R%sZ 2",
    "cat <<EOF && printf R%sZ 2\n$(printf R%sZ 1)\nEOF\n",
    "cat <<EOF || printf R%sZ 2\nx\nEOF\n",
    "time printf R%sZ 1",
    "time -p env X=1 nice printf R%sZ 1",
    "timeout 5 printf R%sZ 1 | xargs -0 printf R%sZ 2",
    "echo $( (printf R%sZ 1) )",
    "echo $[ $(printf 1; printf R%sZ 1 >&2) ]",
    "case x in x) printf R%sZ 1;& y) printf R%sZ 2;; esac",
    "function f { printf R%sZ 1; }; f",
    "f() (printf R%sZ 1); f",
    "exec 3< <(printf R%sZ 1); cat <&3",
    "echo $(printf R%sZ 1 # comment )\n)",
    "echo $(echo ')'; printf R%sZ 1)",
    'echo "$(echo "}"; printf R%sZ 1)"',
    "echo ${x:-$(echo }; printf R%sZ 1)}",
    "x=1; echo ${x/1/$(printf R%sZ 1)}",
    "printf R%sZ 1 <<< $(printf R%sZ 2)",
]

# tree-sitter gets these wrong (it hangs `; cmd` or argument words on the here-doc); the
# parser must refuse them rather than miss what bash runs.
REFUSED = [
    "cat <<EOF; printf R%sZ 2\n$(printf R%sZ 1)\nEOF\n",
    "cat <<EOF /etc/hostname\nx\nEOF\n",
    "cat <<EOF;printf R%sZ 1\nx\nEOF\n",
    "[[ x =~ `printf R%sZ 1` ]]",
    "cat <<EOF\nE\\\nOF\nprintf R%sZ 1\nEOF\n",
    "{ cat <<EOF || cat <<'EOF'\n$(printf R%sZ 1)\nEOF\n <<EOF\nx\nEOF\n\n`printf R%sZ 2`\nEOF\n }",
    "echo $((printf R%sZ 1) )",
    "for x in a; { printf R%sZ 1; }",
    "echo ${x:-`echo }`}; printf R%sZ 1",
]


def _marker() -> Callable[[], str]:
    count = 0

    def make() -> str:
        nonlocal count
        count += 1
        return f"printf R%sZ {count}"

    return make


def _generate(rng: random.Random, depth: int, mark: Callable[[], str]) -> str:
    if depth > 3:
        return rng.choice([mark(), "true", ":", "x=1"])

    def inner() -> str:
        return _generate(rng, depth + 1, mark)

    forms = [
        lambda: f"{inner()} ; {inner()}",
        lambda: f"{inner()} && {inner()}",
        lambda: f"{inner()} || {inner()}",
        lambda: f"{inner()} | {inner()}",
        lambda: f'echo "$({inner()})"',
        lambda: f"echo `{mark()}`",
        lambda: f"echo ${{u:-`{mark()}`}}",
        lambda: f"cat <({inner()})",
        lambda: f"{{ {inner()}; }}",
        lambda: f"( {inner()} )",
        lambda: f"if {inner()}; then {inner()}; fi",
        lambda: f"case x in x) {inner()};; esac",
        lambda: f"for i in 1; do {inner()}; done",
        lambda: f"cat <<EOF\n$({inner()})\nEOF\n",
        lambda: f"cat <<EOF\n`{mark()}`\nEOF\n",
        lambda: f"echo ${{u:-$({inner()})}}",
        lambda: f"[[ -n $({inner()}) ]]",
        lambda: f"{inner()} # {inner()}",
        lambda: f"{inner()}\n{inner()}",
    ]
    return rng.choice(forms)()


def _generated(count: int) -> list[str]:
    rng = random.Random(20261130)
    return [_generate(rng, 0, _marker()) for _ in range(count)]


def _check(script: str) -> None:
    done = subprocess.run(
        [BASH, "--norc", "--noprofile", "-c", script],
        capture_output=True,
        text=True,
        timeout=10,
        check=False,
    )
    ran = set(re.findall(r"R(\d+)Z", done.stdout + done.stderr))
    if parse(script).error is not None:
        return  # refused outright: nothing runs
    # The analysis's sub-commands: wrappers (`time`, `env`, `nice` ...) looked through.
    seen = {
        c.argv[1]
        for c in analyze(script).commands
        if c.name == "printf" and len(c.argv) == 2 and c.argv[0] == "R%sZ"
    }
    assert ran <= seen, f"bash ran markers {sorted(ran - seen)} the parser missed in {script!r}"


@pytest.mark.parametrize("script", HANDWRITTEN)
def test_handwritten_constructs(script: str) -> None:
    _check(script)


def test_handwritten_scripts_parse() -> None:
    # The differential check skips refused scripts; these must actually be understood.
    refused = [s for s in HANDWRITTEN if parse(s).error is not None]
    assert refused == []


@pytest.mark.parametrize("script", REFUSED)
def test_what_the_grammar_gets_wrong_is_refused(script: str) -> None:
    assert parse(script).error is not None


@pytest.mark.parametrize("script", _generated(150))
def test_generated_nesting(script: str) -> None:
    _check(script)
