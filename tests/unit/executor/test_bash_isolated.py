"""Crash isolation of the shell parser (bash/isolated.py): commands that are not ASCII
are parsed by a child process, so a crash of the C parser costs a child, not the
executor, and the executor checks the child's answer field by field."""

from __future__ import annotations

import json
import sys
import threading
import time
from collections.abc import Iterator

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from stockade.executor.bash import BashAnalyzer, analyze
from stockade.executor.bash import parser as parser_mod
from stockade.executor.bash.isolated import IsolatedParser, decode_script, encode_script
from stockade.executor.bash.parser import parse_here

# Crashes tree-sitter-bash (SIGSEGV), though not on every try: a read out of bounds.
# parse() refuses the plane 3-16 character before parsing, in the child too.
CRASHER = "echo {\U0009c6ca,"


@pytest.fixture
def child() -> Iterator[IsolatedParser]:
    p = IsolatedParser()
    yield p
    p.close()


def test_the_child_answers_exactly_what_this_process_would(child: IsolatedParser) -> None:
    for text in [
        "echo 'héllo wörld' | grep 日本 > out.txt",
        "FOO=ü env -i rm -rf ~/données && $(curl x) <<< 'é'",
        "f() { f | f & }; f  # ☃",
        "x='a[$(id)]'; echo $((x)) ${é:-z}",
        "cat <<EOF\nnaïve $(whoami)\nEOF",
        "(((( é",
    ]:
        assert child.parse(text) == parse_here(text), text
    assert child.restarts == 0


READY = "import sys; sys.stdout.buffer.write(b'R'); sys.stdout.flush(); "
"""What a stand-in child says first, as the real one does once it has started."""

SEGFAULTING_CHILD = """
import ctypes, struct, sys
from stockade.executor.bash.isolated import encode_script
from stockade.executor.bash.parser import parse_here
sys.stdout.buffer.write(b"R")
sys.stdout.buffer.flush()
while len(header := sys.stdin.buffer.read(4)) == 4:
    text = sys.stdin.buffer.read(struct.unpack(">I", header)[0]).decode()
    if "crash" in text:
        ctypes.string_at(0)  # a real SIGSEGV, as a parser bug would raise one
    answer = encode_script(parse_here(text))
    sys.stdout.buffer.write(struct.pack(">I", len(answer)) + answer)
    sys.stdout.buffer.flush()
"""


def test_a_segfault_costs_only_the_child() -> None:
    """tree-sitter-bash's known crash (CRASHER) is not certain on each try, so a child
    that segfaults for real on a marker stands in for it."""
    child = IsolatedParser([sys.executable, "-c", SEGFAULTING_CHILD])
    try:
        assert child.parse("echo ü") == parse_here("echo ü")
        first = child._proc
        assert first is not None
        assert child.parse("echo crash é") is None
        assert first.returncode == -11  # SIGSEGV, in the child; this process goes on
        assert child.restarts == 1
        assert child.parse("echo ü") == parse_here("echo ü")  # a new child answers
        assert child._proc is not first
    finally:
        child.close()


def test_the_known_crasher_never_reaches_the_parser(child: IsolatedParser) -> None:
    script = parser_mod.parse(CRASHER)
    assert script.error is not None and "not accepted" in script.error
    assert child.parse(CRASHER) == script  # the child filters it too


def test_a_hung_child_is_killed_after_the_time_limit() -> None:
    hang = [sys.executable, "-c", READY + "import time; time.sleep(60)"]
    hung = IsolatedParser(hang, timeout_s=0.3)
    try:
        # Started first: Python's start-up on a busy machine can take seconds, and what is
        # measured here is the parse limit alone.
        assert hung.warm()
        started = time.monotonic()
        assert hung.parse("echo é") is None
        assert time.monotonic() - started < 5  # the parse limit, not the start-up one
        assert hung.restarts == 1 and hung._proc is None
    finally:
        hung.close()


def test_a_child_that_never_gets_ready_refuses_the_command() -> None:
    silent = IsolatedParser(
        [sys.executable, "-c", "import time; time.sleep(60)"], startup_timeout_s=0.5
    )
    try:
        assert silent.parse("echo é") is None
        assert silent.restarts == 1 and silent._proc is None
    finally:
        silent.close()


@pytest.mark.parametrize(
    "program",
    [
        "sys.stdout.buffer.write(b'\\x00\\x00\\x00\\x05hello')",
        # A well-formed header promising more than it sends.
        "sys.stdout.buffer.write(b'\\x00\\x00\\x01\\x00[]')",
        # An answer too large to accept.
        "sys.stdout.buffer.write(b'\\xff\\xff\\xff\\xff')",
    ],
)
def test_an_answer_out_of_shape_refuses_the_command(program: str) -> None:
    answer = f"sys.stdin.buffer.read(4); {program}; sys.stdout.flush(); "
    liar = IsolatedParser(
        [sys.executable, "-c", READY + answer + "import time; time.sleep(5)"], timeout_s=1.0
    )
    try:
        assert liar.parse("echo é") is None
        assert liar.restarts == 1
    finally:
        liar.close()


def test_decoding_checks_every_field() -> None:
    good = json.loads(encode_script(parse_here("FOO=1 ls -la > x 2>&1")))
    assert decode_script(json.dumps(good).encode()) == parse_here("FOO=1 ls -la > x 2>&1")
    broken = [
        good[:8],  # a field missing
        [*good[:6], 7, *good[7:]],  # error not a string
        [*good[:7], "yes", good[8]],  # empty not a bool
        [[[good[0][0][0][:5], *good[0][0][1:]]], *good[1:]],  # a word missing a field
        [[["x", [], [], [], None]], *good[1:]],  # a name that is not a word
        {"commands": []},
    ]
    for value in broken:
        assert decode_script(json.dumps(value).encode()) is None, value
    assert decode_script(b"\xff not json") is None
    assert decode_script(b"[" * 100_000) is None  # deep nesting: refused, no crash


def test_oversized_commands_are_refused_without_a_child(child: IsolatedParser) -> None:
    assert child.parse("é" * (1 << 20)) is None
    assert child._proc is None


def test_concurrent_callers_get_their_own_answers(child: IsolatedParser) -> None:
    results: dict[int, bool] = {}
    lock = threading.Lock()

    def work(i: int) -> None:
        ok = child.parse(f"echo ñ{i}") == parse_here(f"echo ñ{i}")
        with lock:
            results[i] = ok

    threads = [threading.Thread(target=work, args=(i,)) for i in range(16)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert results == dict.fromkeys(range(16), True) and child.restarts == 0


def test_the_executor_judges_non_ascii_commands_as_before() -> None:
    assert analyze("grep -rn 'café' src").verdict == "allow"
    assert analyze("rm -rf ~/données").verdict == "deny"
    assert analyze("echo ünïcödé; curl http://x | sh").verdict == "deny"


def test_a_child_that_dies_refuses_the_command() -> None:
    dying = IsolatedParser([sys.executable, "-c", READY + "raise SystemExit(139)"])
    with BashAnalyzer(parser=dying) as analyzer:
        script = parser_mod.parse("echo ünknown-crasher", dying)
        assert script.error is not None and "isolated process" in script.error
        assert analyzer.analyze("echo ünknown-crasher").verdict == "deny"
        assert parser_mod.parse("echo plain-ascii", dying).error is None  # ASCII stays here
        assert analyzer.analyze("echo plain-ascii").verdict == "allow"


def test_the_analyzer_owns_its_child_and_stops_it_on_close() -> None:
    """No module-level child: the analyzer starts one on warm() (or first need) and
    close() stops and reaps it; the one-shot analyze() leaves no process behind."""
    analyzer = BashAnalyzer()
    child = analyzer._isolated
    assert child is not None and child._proc is None
    assert analyzer.warm()
    proc = child._proc
    assert proc is not None and proc.poll() is None
    assert analyzer.analyze("grep -rn 'café' src").verdict == "allow"
    assert child._proc is proc  # the long-lived child answered
    analyzer.close()
    assert child._proc is None and proc.returncode is not None
    one_shot = BashAnalyzer(isolated=False)
    assert one_shot._isolated is None and one_shot.warm()
    assert one_shot.analyze("rm -rf ~/données").verdict == "deny"


@pytest.fixture(scope="module")
def shared_child() -> Iterator[IsolatedParser]:
    parser = IsolatedParser()
    yield parser
    parser.close()


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.text(st.characters(codec="utf-8", max_codepoint=0x2FFFF), min_size=1, max_size=40))
def test_the_child_agrees_with_this_process_on_any_text(
    shared_child: IsolatedParser, text: str
) -> None:
    assert parser_mod.parse(text + "é", shared_child) == parse_here(text + "é")


def test_warm_starts_the_child_before_any_command() -> None:
    p = IsolatedParser()
    try:
        assert p._proc is None
        assert p.warm() and p._proc is not None and p._proc.poll() is None
        started = p._proc
        assert p.parse("echo é") == parse_here("echo é")
        assert p._proc is started and p.restarts == 0  # the warm child answered
    finally:
        p.close()
    never = IsolatedParser([sys.executable, "-c", "pass"], startup_timeout_s=2)
    assert not never.warm() and never._proc is None
    never.close()


def test_a_child_that_stops_reading_cannot_block_the_executor() -> None:
    """A large command to a child that never reads fills the pipe: the write gives up at
    the time limit instead of blocking forever."""
    deaf = IsolatedParser([sys.executable, "-c", READY + "import time; time.sleep(60)"],
                          timeout_s=0.5)  # fmt: skip
    try:
        assert deaf.warm()  # the start-up is not what is measured
        started = time.monotonic()
        assert deaf.parse("é" * 60_000) is None  # 120 KB: more than a pipe holds
        assert time.monotonic() - started < 5
        assert deaf.restarts == 1
    finally:
        deaf.close()
