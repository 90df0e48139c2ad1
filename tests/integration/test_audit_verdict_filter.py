"""Query filters by the decision's verdict (the console's audit page offers it): only
matching rows, paged with tokens bound to the filter, an unknown verdict refused."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import grpc
import pytest

from stockade.audit.app import AuditApp
from stockade.audit.settings import AuditSettings
from stockade.server.app import create_server, stop_server
from stockade.v1 import audit_service_pb2 as a_pb2
from stockade.v1 import audit_service_pb2_grpc as a_grpc
from stockade.v1 import common_pb2 as c_pb2

VERDICTS = [c_pb2.VERDICT_ALLOW, c_pb2.VERDICT_DENY, c_pb2.VERDICT_ASK]


@pytest.fixture
async def stub(tmp_path: Path) -> AsyncIterator[a_grpc.AuditServiceAsyncStub]:
    settings = AuditSettings(listen="127.0.0.1:0", state_dir=tmp_path / "audit", grace_seconds=1)
    async with AuditApp(settings).open() as registrations:
        running = await create_server("audit", settings, registrations)
        async with grpc.aio.insecure_channel(running.address) as channel:
            yield a_grpc.AuditServiceStub(channel)  # type: ignore[misc]
        await stop_server(running)


async def test_rows_filtered_by_verdict_and_paged(stub: a_grpc.AuditServiceAsyncStub) -> None:
    for n in range(12):
        verdict = VERDICTS[n % 3]
        await stub.Record(
            a_pb2.RecordRequest(
                event=a_pb2.AuditEvent(
                    event_id=f"e{n}", session_id="s", tool_name="run_bash", call_id=f"c{n}",
                    status=a_pb2.AUDIT_STATUS_DENIED if verdict == c_pb2.VERDICT_DENY
                    else a_pb2.AUDIT_STATUS_OK,
                    verdict=verdict, agent_name="lead",
                )
            ),
            timeout=10,
        )  # fmt: skip
    first = await stub.Query(a_pb2.QueryRequest(verdict=c_pb2.VERDICT_DENY, page_size=3))
    assert [r.event.call_id for r in first.records] == ["c10", "c7", "c4"]
    assert first.next_page_token
    second = await stub.Query(
        a_pb2.QueryRequest(
            verdict=c_pb2.VERDICT_DENY, page_size=3, page_token=first.next_page_token
        )
    )
    assert [r.event.call_id for r in second.records] == ["c1"]
    assert all(r.event.verdict == c_pb2.VERDICT_DENY for r in second.records)
    # The token belongs to the DENY query: reusing it for another verdict is refused.
    with pytest.raises(grpc.aio.AioRpcError) as err:
        await stub.Query(
            a_pb2.QueryRequest(verdict=c_pb2.VERDICT_ALLOW, page_token=first.next_page_token)
        )
    assert err.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    every = await stub.Query(a_pb2.QueryRequest(page_size=100))
    assert len(every.records) == 12  # UNSPECIFIED matches any verdict


async def test_an_unknown_verdict_is_invalid(stub: a_grpc.AuditServiceAsyncStub) -> None:
    with pytest.raises(grpc.aio.AioRpcError) as err:
        await stub.Query(a_pb2.QueryRequest(verdict=99))  # type: ignore[arg-type]
    assert err.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert "verdict" in (err.value.details() or "")
