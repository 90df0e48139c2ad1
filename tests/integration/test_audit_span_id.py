"""The span id an event carries only links traces: it is not stored, and a malformed one
never costs the event (the row is kept, the link skipped)."""

from __future__ import annotations

from pathlib import Path

from stockade.client.audit import AuditClient
from stockade.stack import LocalStack
from stockade.v1 import audit_service_pb2 as au_pb2


async def test_malformed_span_id_keeps_the_event(
    stack_factory: type[LocalStack], tmp_path: Path
) -> None:
    stack = stack_factory(tmp_path / "s")
    await stack.start(["audit"])
    client = AuditClient(stack.addresses["audit"])
    try:
        for i, span in enumerate(["zz-not-hex", "0" * 16, "ab" * 8]):
            await client.record(
                au_pb2.AuditEvent(
                    event_id=f"e{i}",
                    session_id="s",
                    tool_name="read_file",
                    status=au_pb2.AUDIT_STATUS_OK,
                    trace_id="1" * 32,
                    span_id=span,
                )
            )
        rows = [r async for r in client.query_all(au_pb2.QueryRequest(session_id="s"))]
    finally:
        await client.close()
    assert sorted(r.event.event_id for r in rows) == ["e0", "e1", "e2"]
    assert all(r.event.span_id == "" for r in rows)  # not stored
    assert all(r.event.trace_id == "1" * 32 for r in rows)
