"""The demo as a user runs it: `stockade demo` starts five processes and shows every path
through Stockade; the audit database afterwards holds exactly what happened (X-6)."""

from __future__ import annotations

import sqlite3
import subprocess
import sys
from pathlib import Path

import pytest


@pytest.fixture(scope="module")
def demo(tmp_path_factory: pytest.TempPathFactory) -> tuple[str, Path]:
    state = tmp_path_factory.mktemp("demo") / "state"
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "stockade.cli.main",
            "demo",
            "--no-color",
            "--state-dir",
            str(state),
        ],
        capture_output=True,
        text=True,
        timeout=110,
    )
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    return done.stdout, state


def _rows(state: Path) -> dict[str, tuple[str, str, str, str, str]]:
    with sqlite3.connect(state / "state" / "audit" / "audit.db") as conn:
        found = conn.execute(
            "SELECT call_id, agent_name, status, verdict, matched_rule, rule_source "
            "FROM agent_audit_log WHERE session_id = 'demo-session' AND status != 'DECIDED' "
            "ORDER BY sequence"
        ).fetchall()
    return {r[0] or "session-stop": r[1:] for r in found}


def test_transcript_shows_every_path(demo: tuple[str, Path]) -> None:
    out, _ = demo
    assert "ALLOW  read_file by 'read_file' (MANAGED)" in out
    assert "bot    demo-resolver: approved file_write once" in out
    assert (
        "DENY   read_file by 'read_file(**/.env)' (MANAGED): environment files hold secrets" in out
    )
    assert "DENY   run_bash by 'run_bash(curl" in out and "network access is disabled" in out
    assert "spawn  subagent 'explorer' (explore)" in out
    assert "[explorer] ALLOW  grep_files" in out
    assert "approval DENY: nobody answered the approval in time" in out
    assert "end    COMPLETED" in out
    assert "hash chain: OK" in out
    assert "demo-secret-do-not-read" not in out


def test_the_read_only_batch_runs_in_parallel(demo: tuple[str, Path]) -> None:
    lines = demo[0].splitlines()
    starts = [
        i
        for i, line in enumerate(lines)
        if "call   glob_files" in line
        or "call   grep_files" in line
        or "call   search_papers" in line
    ]
    ends = [
        i
        for i, line in enumerate(lines)
        if "ALLOW  glob_files" in line or "ALLOW  search_papers" in line
    ]
    # All three calls of the batch start before the first of them finishes.
    assert len(starts) >= 3 and len(ends) == 2
    assert max(starts[:3]) < min(ends)


def test_audit_rows_record_each_decision(demo: tuple[str, Path]) -> None:
    rows = _rows(demo[1])
    assert rows["read-notes"][1:3] == ("OK", "ALLOW")
    for call in ("glob-md", "grep-todo", "papers"):
        assert rows[call][1:3] == ("OK", "ALLOW"), call
    assert rows["write-summary"][1:3] == ("OK", "ALLOW")
    assert rows["read-env"][1:5] == ("DENIED", "DENY", "read_file(**/.env)", "MANAGED")
    assert rows["curl-sh"][1:3] == ("DENIED", "DENY") and rows["curl-sh"][4] == "TOOL"
    assert rows["sub-grep"][0] == "explorer" and rows["sub-grep"][1] == "OK"
    assert rows["npm-install"][1:3] == ("DENIED", "DENY")
    assert rows["session-stop"][1] == "SESSION_STOP"


def test_the_decision_service_records_who_decided(demo: tuple[str, Path]) -> None:
    """Every Decide is a decision record too; the approved write names the approval and the
    resolver's authenticated identity (the demo resolver's admin token), not a typed name."""
    import json

    with sqlite3.connect(demo[1] / "state" / "audit" / "audit.db") as conn:
        found = conn.execute(
            "SELECT call_id, verdict, matched_rule, output_preview FROM agent_audit_log "
            "WHERE session_id = 'demo-session' AND status = 'DECIDED' ORDER BY sequence"
        ).fetchall()
    calls = {r[0] for r in found}
    assert {"read-notes", "read-env", "write-summary", "curl-sh"} <= calls
    answered = [r for r in found if r[0] == "write-summary" and r[2].startswith("approval:")]
    assert len(answered) == 1 and answered[0][1] == "ALLOW"
    settle = json.loads(answered[0][3])
    assert settle["by"] == "approval" and settle["resolver"].startswith("token:")
    assert "demo-secret-do-not-read" not in " ".join(r[3] for r in found)


def test_approved_write_happened_and_refused_calls_left_no_trace(demo: tuple[str, Path]) -> None:
    workspace = demo[1] / "workspace"
    assert (workspace / "summary.md").read_text().startswith("# Summary")
    assert not (workspace / "node_modules").exists()


def test_bad_demo_arguments_exit_2(tmp_path: Path) -> None:
    done = subprocess.run(
        [sys.executable, "-m", "stockade.cli.main", "demo", "--script", str(tmp_path / "nope")],
        capture_output=True,
        text=True,
        timeout=30,
    )
    assert done.returncode == 2 and "is not a file" in done.stderr


def test_services_log_no_error(demo: tuple[str, Path]) -> None:
    """Leaving streams (the resolver's WatchApprovals, the agent's RunTurn) and stopping
    the services are normal: no service logs an ERROR or a traceback."""
    import json

    logs = sorted((demo[1] / "logs").glob("*.log"))
    assert {p.stem for p in logs} >= {"decision", "executor", "audit", "agent"}
    for path in logs:
        for line in path.read_text().splitlines():
            assert "Traceback" not in line, f"{path.name}: {line}"
            if line.startswith("{"):
                record = json.loads(line)
                assert record["level"] not in {"ERROR", "CRITICAL"}, f"{path.name}: {line}"


def test_the_demo_honours_the_otel_variables(tmp_path: Path) -> None:
    """`OTEL_TRACES_EXPORTER=console stockade demo` shows the demo's spans and the
    services it starts trace too (their spans in their logs)."""
    import os

    env = {k: v for k, v in os.environ.items() if k != "OTEL_SDK_DISABLED"}
    env["OTEL_TRACES_EXPORTER"] = "console"
    state = tmp_path / "state"
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "stockade.cli.main",
            "demo",
            "--no-color",
            "--state-dir",
            str(state),
        ],
        capture_output=True,
        text=True,
        timeout=110,
        env=env,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    assert '"name": "/stockade.v1.AgentService/RunTurn"' in done.stderr
    agent_log = (state / "logs" / "agent.log").read_text()
    assert '"name": "/stockade.v1.DecisionService/Decide"' in agent_log
