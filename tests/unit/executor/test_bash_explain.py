"""Risk levels and one-sentence explanations (SPEC DEC-10)."""

from __future__ import annotations

from pathlib import Path

import pytest

from stockade.executor.bash import analyze
from stockade.executor.bash.explain import Finding, explain, risk_of
from stockade.executor.paths import PathSandbox, Root


@pytest.fixture
def sandbox(tmp_path: Path) -> PathSandbox:
    (tmp_path / "README.md").write_text("hi\n")
    return PathSandbox([Root(str(tmp_path), True)], str(tmp_path))


@pytest.mark.parametrize(
    ("command", "sentence"),
    [
        ("npm install", "Runs `npm install`: may modify node_modules/ and download packages."),
        ("ls -la", "Runs `ls -la`: read-only, and stays inside the allowed roots."),
        (
            "git status && cat README.md",
            "Runs `git status` and `cat README.md`: read-only, and stays inside the allowed roots.",
        ),
        ("mkdir build", "Runs `mkdir build`: mkdir creates directories."),
        ("sudo id", "Refused `sudo id`: sudo runs commands as another user."),
        ("", "Refused: empty command (EXE-6)."),
        (
            "python -c 'print(1)'",
            "Runs `python -c 'print(1)'`: runs inline Python code.",
        ),
    ],
)
def test_sentences(command: str, sentence: str, sandbox: PathSandbox) -> None:
    assert analyze(command, sandbox=sandbox).explanation == sentence


@pytest.mark.parametrize(
    ("command", "risk"),
    [
        ("ls", "low"),
        ("mkdir build", "low"),
        ("echo x > out.txt", "low"),
        ("npm install", "medium"),
        ("python script.py", "medium"),
        ("rm -rf build", "high"),
        ("python -c 'import os'", "high"),
        ("cat /usr/share/dict/words", "high"),
        ("curl x", "high"),
        ("rm -rf /", "high"),
    ],
)
def test_risk_levels(command: str, risk: str, sandbox: PathSandbox) -> None:
    assert analyze(command, sandbox=sandbox).risk == risk


def test_the_most_serious_finding_explains_a_compound_command(sandbox: PathSandbox) -> None:
    result = analyze("ls; mkdir out; git status; rm -rf ~", sandbox=sandbox)
    assert result.verdict == "deny"
    assert result.explanation.startswith("Refused `rm -rf ~` (among 4 commands): ")
    assert result.reasons[0].startswith("`rm -rf ~`: ")


def test_long_commands_are_shortened_in_the_sentence(sandbox: PathSandbox) -> None:
    result = analyze("touch " + " ".join(f"file{i}.txt" for i in range(40)), sandbox=sandbox)
    assert result.verdict == "ask"
    assert "…" in result.explanation and len(result.explanation) < 160


def test_risk_of_takes_the_worst_ask() -> None:
    findings = [
        Finding("ask", "a", "low", False, "x"),
        Finding("ask", "b", "high", False, "y"),
        Finding("ask", "c", "medium", False, "z"),
    ]
    assert risk_of("ask", findings) == "high"
    assert risk_of("deny", findings[:1]) == "high"
    assert risk_of("allow", []) == "low"


def test_network_use_is_mentioned_when_the_reason_does_not(sandbox: PathSandbox) -> None:
    sentence = explain(
        "ask", [Finding("ask", "builds the project", "medium", False, "cargo build")],
        ["cargo build"], True,
    )  # fmt: skip
    assert sentence == "Runs `cargo build`: builds the project and uses the network."


def test_finding_and_analysis_keep_the_dataclass_behaviour(sandbox: PathSandbox) -> None:
    """Finding and BashAnalysis have hand-written __init__s (init=False): still frozen
    dataclasses, built positionally or by keyword, compared, hashed and converted as
    before."""
    import dataclasses

    finding = Finding("ask", "deletes files", "high", True, "rm x")
    assert finding == Finding(
        verdict="ask", reason="deletes files", risk="high", immune=True, command="rm x"
    )
    assert hash(finding) == hash(Finding("ask", "deletes files", "high", True, "rm x"))
    assert finding != Finding("ask", "deletes files", "high", False, "rm x")
    assert dataclasses.asdict(finding) == {
        "verdict": "ask",
        "reason": "deletes files",
        "risk": "high",
        "immune": True,
        "command": "rm x",
    }
    assert repr(finding).startswith("Finding(verdict='ask', reason='deletes files'")
    with pytest.raises(dataclasses.FrozenInstanceError):
        finding.reason = "x"  # type: ignore[misc]
    result = analyze("rm -rf build", sandbox=sandbox)
    again = analyze("rm -rf build", sandbox=sandbox)
    assert result == again and hash(result) == hash(again)
    fields = dataclasses.asdict(result)
    assert list(fields) == [f.name for f in dataclasses.fields(result)]
    assert fields["verdict"] == result.verdict and fields["reasons"] == result.reasons
    assert (
        type(result)(**{f.name: getattr(result, f.name) for f in dataclasses.fields(result)})
        == result
    )
    with pytest.raises(dataclasses.FrozenInstanceError):
        result.verdict = "allow"  # type: ignore[misc]
