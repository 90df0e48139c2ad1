"""A full disk (issue #12 item 9), on real small filesystems (tmpfs mounts that fill up).

The agent's spool: with ``disk_full_action="refuse"`` (the default) the recorder asks for
further calls to be refused as soon as an event cannot be written; with ``"backlog"`` it
keeps up to ``max_backlog`` events in memory first. Either way every event kept is written
when space returns and stored exactly once. The audit store: a full disk answers
RESOURCE_EXHAUSTED (never INTERNAL), producers keep their events, and once space returns
every event is stored and the chain verifies.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest

from stockade.client.audit import AuditBacklogFull, AuditClient, AuditRecorder
from stockade.client.errors import ResourceExhaustedError
from stockade.v1 import audit_service_pb2 as a_pb2
from tests.faults.conftest import StartStack, all_rows, fill, verify_chain, wait_for


def _event(n: int, session: str = "disk") -> a_pb2.AuditEvent:
    return a_pb2.AuditEvent(
        event_id=f"{session}-{n}",
        session_id=session,
        step=n,
        tool_name="read_file",
        status=a_pb2.AUDIT_STATUS_OK,
        agent_name="lead",
        output_preview="p" * 200,
        arguments_json='{"file_path":"' + "f" * 400 + '"}',
    )


def _recorder(address: str, spool: Path, **kwargs: object) -> AuditRecorder:
    return AuditRecorder(
        address,
        spool,
        linger_s=0.002,
        backoff_initial_s=0.02,
        backoff_max_s=0.1,
        deadline_s=5.0,
        **kwargs,  # type: ignore[arg-type]
    )


async def test_full_spool_refuses_calls_then_writes_everything_when_space_returns(
    fault_stack: StartStack, small_fs: Callable[[int], Path]
) -> None:
    stack = await fault_stack(["audit"])
    address = stack.addresses["audit"]
    await stack.kill("audit")  # the events must stay on this side
    spool_fs = small_fs(256)
    recorder = _recorder(address, spool_fs / "audit.spool")
    await recorder.start()
    for n in range(20):
        recorder.enqueue(_event(n))
    assert recorder.spooled == 20 and recorder.blocked_reason() == ""
    disk = fill(spool_fs)
    for n in range(20, 50):
        recorder.enqueue(_event(n))
    # The spool's last page may still take an event or two; then nothing more fits.
    assert recorder.backlog >= 20 and recorder.spooled + recorder.backlog == 50
    assert "cannot be written" in recorder.blocked_reason()
    disk.release()
    await wait_for(lambda: recorder.backlog == 0, what="the backlog written to the spool")
    assert recorder.spooled == 50 and recorder.blocked_reason() == ""
    await stack.spawn("audit")
    await stack.wait_serving("audit")
    assert await recorder.flush(60)
    await recorder.close()
    assert (recorder.lost, recorder.rejected) == (0, 0)
    rows = await all_rows(address)
    assert [r.event.event_id for r in rows] == [f"disk-{n}" for n in range(50)]
    assert (await verify_chain(address)).ok


async def test_backlog_mode_goes_on_until_the_backlog_is_full(
    fault_stack: StartStack, small_fs: Callable[[int], Path]
) -> None:
    stack = await fault_stack(["audit"])
    address = stack.addresses["audit"]
    await stack.kill("audit")
    spool_fs = small_fs(256)
    recorder = _recorder(
        address, spool_fs / "audit.spool", disk_full_action="backlog", max_backlog=20
    )
    await recorder.start()
    disk = fill(spool_fs)
    for n in range(19):
        recorder.enqueue(_event(n))
    assert recorder.backlog == 19 and recorder.blocked_reason() == ""
    recorder.enqueue(_event(19))
    assert "backlog is full (20 of 20 events)" in recorder.blocked_reason()
    # Calls already running when the limit is reached still get their events kept, up
    # to twice the backlog; past that the loss is raised, never silent.
    for n in range(20, 40):
        recorder.enqueue(_event(n))
    with pytest.raises(AuditBacklogFull):
        recorder.enqueue(_event(40))
    assert recorder.lost == 1
    disk.release()
    await stack.spawn("audit")
    await stack.wait_serving("audit")
    assert await recorder.flush(60)
    await recorder.close()
    rows = await all_rows(address)
    assert [r.event.event_id for r in rows] == [f"disk-{n}" for n in range(40)]
    assert (await verify_chain(address)).ok


async def test_backlog_is_sent_straight_to_a_reachable_service_while_the_disk_is_full(
    fault_stack: StartStack, small_fs: Callable[[int], Path]
) -> None:
    stack = await fault_stack(["audit"])
    address = stack.addresses["audit"]
    spool_fs = small_fs(256)
    recorder = _recorder(address, spool_fs / "audit.spool")
    await recorder.start()
    disk = fill(spool_fs)
    for n in range(30):
        recorder.enqueue(_event(n))
    assert await recorder.flush(60)
    assert recorder.blocked_reason() == ""  # nothing waits in memory any more
    disk.release()
    await recorder.close()
    assert [r.event.event_id for r in await all_rows(address)] == [f"disk-{n}" for n in range(30)]


async def test_full_audit_store_refuses_with_resource_exhausted_and_loses_nothing(
    fault_stack: StartStack, small_fs: Callable[[int], Path], tmp_path: Path
) -> None:
    store_fs = small_fs(2048)
    stack = await fault_stack(
        ["audit"], env={"audit": {"STOCKADE_AUDIT_STATE_DIR": str(store_fs / "audit")}}
    )
    address = stack.addresses["audit"]
    recorder = _recorder(address, tmp_path / "spool" / "audit.spool", batch_events=50)
    await recorder.start()
    for n in range(100):
        recorder.enqueue(_event(n))
    assert await recorder.flush(60)
    disk = fill(store_fs)
    async with AuditClient(address) as client:
        with pytest.raises(ResourceExhaustedError) as refused:
            await client.record(_event(10_000, session="probe"))
    assert refused.value.code == "RESOURCE_EXHAUSTED"
    assert "disk is full" in refused.value.details
    for n in range(100, 400):
        recorder.enqueue(_event(n))
    await wait_for(lambda: recorder.spooled >= 250, what="events held in the spool")
    assert recorder.blocked_reason() == ""  # they are durable on the agent's side
    disk.release()
    assert await recorder.flush(120)
    await recorder.close()
    rows = await all_rows(address, session_id="disk")
    ids = [r.event.event_id for r in rows]
    assert ids == [f"disk-{n}" for n in range(400)]
    verdict = await verify_chain(address)
    assert verdict.ok and verdict.rows_checked == 400


@pytest.mark.parametrize(
    ("mode", "runs_before_refusal"),
    # backlog: steps run while fewer than 10 events wait (steps 0-3: 12 events); the
    # refused calls' rows and the stop row still fit under the hard limit of 20.
    [("refuse", 3), ("backlog", 12)],
)
async def test_agent_with_a_full_spool_refuses_calls_and_records_every_one(
    fault_stack: StartStack,
    small_fs: Callable[[int], Path],
    tmp_path: Path,
    workspace: Path,
    mode: str,
    runs_before_refusal: int,
) -> None:
    from stockade.client.agent import AgentClient
    from stockade.client.base import aio_channel
    from stockade.v1 import agent_service_pb2 as ag_pb2
    from stockade.v1 import common_pb2 as c_pb2
    from tests.faults.test_agent_kill import _script

    spool_fs = small_fs(256)
    scripts = tmp_path / "scripts"
    scripts.mkdir()
    (scripts / "many.yaml").write_text(_script())
    for n in range(18):
        (workspace / "notes" / f"f{n}.txt").write_text(f"file {n}\n")
    stack = await fault_stack(
        env={
            "executor": {"STOCKADE_EXECUTOR_WORKSPACE": str(workspace)},
            "agent": {
                "STOCKADE_AGENT_SCRIPT_DIR": str(scripts),
                "STOCKADE_AGENT_SPOOL_DIR": str(spool_fs),
                "STOCKADE_AGENT_AUDIT_DISK_FULL_ACTION": mode,
                "STOCKADE_AGENT_AUDIT_MAX_BACKLOG": "10",
            },
        }
    )
    await stack.kill("audit")  # nothing drains the events: they must be kept
    disk = fill(spool_fs)
    async with aio_channel(stack.addresses["agent"]) as channel:
        request = ag_pb2.RunTurnRequest(session_id="full", message="go", script="many")
        events = [e async for e in AgentClient(channel).run_turn(request)]
    results = [
        e.tool_call_finished for e in events if e.WhichOneof("event") == "tool_call_finished"
    ]
    ran = [r for r in results if r.verdict == c_pb2.VERDICT_ALLOW]
    refused = [r for r in results if r.verdict == c_pb2.VERDICT_DENY]
    assert len(ran) == runs_before_refusal
    assert refused and len(ran) + len(refused) == len(results)
    assert all("audit trail cannot be written" in r.content for r in refused), refused[0].content
    disk.release()
    await stack.spawn("audit")
    await stack.wait_serving("audit")
    assert await stack.stop("agent") == 0
    rows = await all_rows(stack.addresses["audit"], session_id="full")
    by_call = {r.event.call_id: r.event for r in rows if r.event.call_id}
    assert len(by_call) == len(results) == len(rows) - 1  # every call once, plus the stop
    assert {r.call_id for r in ran} == {
        c for c, e in by_call.items() if e.status == a_pb2.AUDIT_STATUS_OK
    }
    assert (await verify_chain(stack.addresses["audit"])).ok
