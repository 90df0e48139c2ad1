"""One glob matcher for the executor: the sandbox, the bash analysis and the mask walk agree.

The reference semantics are the sandbox's former regex translation (kept here as an
oracle: correct, but backtracking), and fnmatch component by component.
"""

from __future__ import annotations

import fnmatch
import re
import shlex
from collections.abc import Iterator
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from pydantic import ValidationError

from stockade.executor.bash import analyze
from stockade.executor.confine.masks import GlobMatcher, find_masked
from stockade.executor.globs import compile_globs, glob_problem, match_relative, validate_globs
from stockade.executor.paths import PathSandbox, Root, is_protected_write, match_relative_glob
from stockade.executor.settings import ExecutorSettings

# --- the oracle: the sandbox's former translation (search with a backtracking regex) ---


def _old_component(part: str) -> str:
    out: list[str] = []
    i, n = 0, len(part)
    while i < n:
        ch = part[i]
        if ch == "*":
            out.append("[^/]*")
        elif ch == "?":
            out.append("[^/]")
        elif ch == "[":
            j = i + 1
            if j < n and part[j] == "!":
                j += 1
            if j < n and part[j] == "]":
                j += 1
            close = part.find("]", j)
            if close < 0:
                out.append(re.escape(ch))
            else:
                cls = fnmatch.translate(part[i : close + 1])[len("(?s:") : -len(")\\Z")]
                out.append("(?!/)" + cls if cls.startswith("[^") else cls)
                i = close
        else:
            out.append(re.escape(ch))
        i += 1
    return "".join(out)


def _oracle(glob: str, path: str) -> bool:
    parts = [p for p in glob.split("/") if p]
    if not parts:
        return False
    body = "".join("(?:/[^/]+)*" if p == "**" else "/" + _old_component(p) for p in parts)
    regex = re.compile(("^" if glob.startswith("/") else "") + body + r"\Z")
    return regex.search(path) is not None


_GLOB_PART = st.sampled_from(
    [
        "a",
        "b",
        "*",
        "?",
        "**",
        "a*",
        "*.b",
        ".*",
        "[ab]",
        "[!a]*",
        "[^a]",
        "[z-a]",
        "[]a]",
        "[!]]",
        "*a*b",
        "a?b",
        ".env",
        "[a",
        "ab",
        "*b",
        "[!z-a]",
    ]
)
_PATH_PART = st.sampled_from(
    ["a", "b", "ab", "abb", ".a", "a.b", "^", "]", "z", "aab", "ba", ".env", "a.env", "[a", "x y"]
    + ["a\nb"]
)
_GLOB = st.builds(
    lambda anchored, parts: ("/" if anchored else "") + "/".join(parts),
    st.booleans(),
    st.lists(_GLOB_PART, min_size=0, max_size=5),
)


@settings(max_examples=3000, deadline=None)
@given(globs=st.lists(_GLOB, min_size=1, max_size=3), path_parts=st.lists(_PATH_PART, max_size=7))
def test_matcher_agrees_with_the_former_sandbox_regex(
    globs: list[str], path_parts: list[str]
) -> None:
    """Same verdict, and the same glob named, as the former regex tried glob by glob."""
    path = "/" + "/".join(path_parts)
    expected = next((g for g in globs if _oracle(g, path)), None)
    assert compile_globs(globs).match(path) == expected, (globs, path)
    assert compile_globs(globs).matches(path) == (expected is not None)


def test_a_segment_before_double_star_ends_at_a_component_boundary() -> None:
    """``/a/**/x`` does not match ``/ab/x`` (the first segment is a whole component)."""
    assert compile_globs(["/a/**/x"]).match("/ab/x") is None
    assert compile_globs(["/a/**/x"]).match("/a/b/x") == "/a/**/x"
    assert compile_globs(["a/**/x"]).match("/w/ab/x") is None
    assert compile_globs(["a/**/b/**/x"]).match("/w/a/bc/x") is None
    assert compile_globs(["a/**/b/**/x"]).match("/w/a/c/b/x") == "a/**/b/**/x"
    assert compile_globs(["/**/x"]).match("w/x") is None  # anchored: absolute paths only


def _parts_match(pattern: list[str], parts: list[str]) -> bool:
    if not pattern:
        return not parts
    if pattern[0] == "**":
        return any(_parts_match(pattern[1:], parts[i:]) for i in range(len(parts) + 1))
    return (
        bool(parts)
        and fnmatch.fnmatchcase(parts[0], pattern[0])
        and _parts_match(pattern[1:], parts[1:])
    )


@settings(max_examples=1500, deadline=None)
@given(
    pattern=st.lists(_GLOB_PART | st.just("."), min_size=0, max_size=4),
    rel=st.lists(_PATH_PART | st.just("."), min_size=0, max_size=5),
)
def test_relative_matching_is_fnmatch_per_component(pattern: list[str], rel: list[str]) -> None:
    drop = ("", ".")
    expected = _parts_match(
        [p for p in pattern if p not in drop], [p for p in rel if p not in drop]
    )
    assert match_relative("/".join(pattern), "/".join(rel)) == expected
    assert match_relative_glob("/".join(pattern), "/".join(rel)) == expected


# --- the three users agree -----------------------------------------------------------


@pytest.fixture(scope="module")
def workspace(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    ws = tmp_path_factory.mktemp("ws").resolve()
    yield ws


def _sandbox_denies(ws: Path, globs: list[str], path: str) -> bool:
    sandbox = PathSandbox([Root(str(ws), True)], str(ws), denied_read_globs=globs)
    decision = sandbox.check(path)
    assert decision.allowed or "denied by policy" in decision.reason, decision.reason
    return not decision.allowed


def _analysis_denies(ws: Path, globs: list[str], path: str) -> bool:
    # A sandbox without the globs, so the analysis's own matcher is what is tested.
    sandbox = PathSandbox([Root(str(ws), True)], str(ws))
    result = analyze(f"cat {shlex.quote(path)}", sandbox=sandbox, denied_read_globs=globs)
    denied = any("policy denies reading" in r for r in result.reasons)
    assert denied or result.verdict == "allow", result.reasons
    return denied


def _mask_hides(globs: list[str], path: str) -> bool:
    return GlobMatcher.compile(globs).file(path)


_WS_GLOB_PART = st.sampled_from(
    ["a", "b", "*", "?", "**", "a*", "*.env", ".*", "[ab]", "[!a]*", "[^a]", "[]a]", ".env"]
)
_WS_PATH_PART = st.sampled_from(["a", "b", "ab", ".a", "a.env", "^", "]", "z", ".env", "b.env"])


@settings(
    max_examples=300, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(
    glob_parts=st.lists(st.lists(_WS_GLOB_PART, min_size=1, max_size=4), min_size=1, max_size=3),
    anchor=st.sampled_from(["", "/", "ws"]),
    path_parts=st.lists(_WS_PATH_PART, min_size=1, max_size=5),
)
def test_sandbox_analysis_and_masks_agree(
    workspace: Path, glob_parts: list[list[str]], anchor: str, path_parts: list[str]
) -> None:
    prefix = {"": "", "/": "/", "ws": f"{workspace}/"}[anchor]
    globs = [prefix + "/".join(parts) for parts in glob_parts]
    path = f"{workspace}/" + "/".join(path_parts)
    sandbox = _sandbox_denies(workspace, globs, path)
    assert _analysis_denies(workspace, globs, path) == sandbox, (globs, path)
    assert _mask_hides(globs, path) == sandbox, (globs, path)


def test_a_character_class_is_a_class_everywhere(workspace: Path) -> None:
    """``[ab].env``: the analysis used to read the class literally and let ``cat a.env`` by."""
    globs = ["[ab].env"]
    for name, denied in (("a.env", True), ("b.env", True), ("c.env", False), ("[ab].env", False)):
        path = f"{workspace}/sub/{name}"
        assert _sandbox_denies(workspace, globs, path) is denied, name
        assert _analysis_denies(workspace, globs, path) is denied, name
        assert _mask_hides(globs, path) is denied, name


def test_caret_is_not_a_negation(workspace: Path) -> None:
    """``[^a]`` is "``^`` or ``a``" (fnmatch's rule) for all three; the masks used to read
    it as a negation and hide ``b`` while the sandbox let it be read."""
    globs = ["[^a]"]
    for name, denied in (("a", True), ("^", True), ("b", False), ("z", False)):
        path = f"{workspace}/{name}"
        assert _sandbox_denies(workspace, globs, path) is denied, name
        assert _analysis_denies(workspace, globs, path) is denied, name
        assert _mask_hides(globs, path) is denied, name
    # The negation is spelled `[!...]`, and never matches the separator.
    assert compile_globs(["x[!a]y"]).match("/w/xby") == "x[!a]y"
    assert compile_globs(["x[!a]y"]).match("/w/xay") is None
    assert compile_globs(["x[!a]y"]).match("/w/x/y") is None
    # `]` first in a negated class is a member: "[!]]" is "anything but ]".
    assert compile_globs(["[!]]"]).match("/w/a") == "[!]]"
    assert compile_globs(["[!]]"]).match("/w/]") is None


def test_reversed_range_never_raises_and_is_refused_by_settings(
    workspace: Path, tmp_path: Path
) -> None:
    """``[z-a]`` made the mask compiler raise (every bash command failed at setup)."""
    globs = ["secret[z-a]", "**/.env"]
    GlobMatcher.compile(globs)  # used to raise re.error
    (tmp_path / "secretz").write_text("x")
    (tmp_path / ".env").write_text("x")
    assert find_masked([str(tmp_path)], globs) == ([str(tmp_path / ".env")], [])
    for path in (f"{workspace}/secretz", f"{workspace}/secreta", f"{workspace}/secret[z-a]"):
        assert not _sandbox_denies(workspace, globs, path)
        assert not _analysis_denies(workspace, globs, path)
        assert not _mask_hides(globs, path)
    # ... because such a glob names nothing, settings refuse it, naming it.
    problem = glob_problem("secret[z-a]")
    assert problem is not None and "secret[z-a]" in problem
    assert glob_problem("[!z-a]") is not None
    assert glob_problem("x[!b-az]") is not None
    assert glob_problem("**/.env") is None and glob_problem("[a") is None
    assert glob_problem("[a-z0-9_-]*") is None and glob_problem("[!]-]") is None
    with pytest.raises(ValueError, match=re.escape("secret[z-a]")):
        validate_globs(["ok", "secret[z-a]"])
    with pytest.raises(ValidationError, match=re.escape("secret[z-a]")):
        ExecutorSettings(denied_read_globs="**/.env,secret[z-a]")  # type: ignore[arg-type]
    with pytest.raises(ValidationError, match=re.escape("x[b-a]")):
        ExecutorSettings(protected_write_globs=["x[b-a]"])
    assert ExecutorSettings(denied_read_globs="**/.env,[ab].env").denied_read_globs == [  # type: ignore[arg-type]
        "**/.env",
        "[ab].env",
    ]


def test_trailing_slash_and_root_glob(workspace: Path) -> None:
    """Paths are matched as normalised; a glob with no component names nothing."""
    assert compile_globs(["**/.env"]).match("/w/.env/") == "**/.env"
    assert compile_globs(["**/.env"]).match("/w//.env") == "**/.env"
    assert compile_globs(["/", "//", ""]).match("/w/x") is None
    assert not compile_globs(["/"])
    # The analysis used to deny everything for the glob "/" (the sandbox ignores it).
    path = f"{workspace}/notes.txt"
    assert not _sandbox_denies(workspace, ["/"], path)
    assert not _analysis_denies(workspace, ["/"], path)
    assert not _mask_hides(["/"], path)


def test_examples_of_the_syntax() -> None:
    globs = compile_globs(["**/.env", "vault/**", "/etc/secret*", "*.pem", "a/**/b/*.key"])
    assert globs.match("/w/.env") == "**/.env"
    assert globs.match("/w/a/b/.env") == "**/.env"
    assert globs.match("/w/.env.example") is None
    assert globs.match("/w/vault") == "vault/**"
    assert globs.match("/w/x/vault/k/l") == "vault/**"
    assert globs.match("/etc/secret1") == "/etc/secret*"
    assert globs.match("/w/etc/secret1") is None
    assert globs.match("/w/k.pem") == "*.pem" and globs.match("/w/k.pem/x") is None
    assert globs.match("/w/a/b/k.key") == "a/**/b/*.key"
    assert globs.match("/w/a/x/y/b/k.key") == "a/**/b/*.key"
    assert globs.match("/w/a/x/y/b/c/k.key") is None
    assert compile_globs(["**"]).match("/anything/at/all") == "**"
    assert compile_globs(["/**"]).match("/anything") == "/**"
    assert compile_globs(["x[a"]).match("/w/x[a") == "x[a"  # an unclosed [ is literal


# --- denial of service: nested ** over very long paths -------------------------------

_LONG = "/" + "/".join(["a", "b"] * 2500) + "/x"  # 5,001 components, never a match
_NESTED = ["**/a/**/b/**/c", "**/a/**/a/**/b/**/b/**/c/**", "/**/*a*/**/*b*/**/c"]


def test_nested_double_stars_over_thousands_of_components(workspace: Path) -> None:
    """The former backtracking regex took ~5.5 s on 600 characters; this is 15,000."""
    # Ends like the glob but lacks a middle segment: every scan has to run to the end.
    no_b = "/" + "/".join(["b"] * 2500 + ["a"] * 2500 + ["c"])
    for glob in _NESTED:
        assert compile_globs([glob]).match(no_b) is None
        assert compile_globs([glob]).match(_LONG) is None
        assert compile_globs([glob]).match(_LONG[:-1] + "c") == glob
        assert not GlobMatcher.compile([glob]).file(_LONG)
        assert is_protected_write(_LONG, [glob]) is None
    deep = f"{workspace}{_LONG}"
    assert not _sandbox_denies(workspace, _NESTED, deep)
    assert _sandbox_denies(workspace, _NESTED, deep[:-1] + "c")
    rel = "/".join(["a", "b"] * 2500)
    assert not match_relative("/".join(["**", "a", "**", "b"] * 20) + "/x", rel)
    assert match_relative("**/a/**/b/**/b", rel)


def test_many_stars_in_one_long_component() -> None:
    """Within a component too: ``*a*a*a*a*b`` against 20,000 ``a`` (no b) stays linear."""
    name = "a" * 20_000
    assert compile_globs(["*a*a*a*a*a*b"]).match("/w/" + name) is None
    assert compile_globs(["*a*a*a*a*a*b"]).match("/w/" + name + "b") == "*a*a*a*a*a*b"
    assert not match_relative("*a*a*a*a*a*b", name)
