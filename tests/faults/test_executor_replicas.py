"""STORE-3 with real executor processes: a grant is single-use across replicas and across a
SIGKILL and restart (PostgreSQL for several replicas, the SQLite file for one node); a read
on one replica lets the session edit on another (EXE-11) and nothing else does; the
executor accepts the grant keys it lists during a rotation and no other; a store that
cannot be reached refuses the grant and does not spend it.

Grants are signed here with the decision service's own signer and key format (the
decision service itself is not needed to say what the executor accepts)."""

from __future__ import annotations

import uuid
from collections.abc import Awaitable, Mapping
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import asyncpg
import grpc
import pytest
from google.protobuf import struct_pb2

from stockade.contract.grant import load_private_key
from stockade.decision.grants import GrantSigner, SignedGrant, generate_keypair
from stockade.v1 import common_pb2 as c_pb2
from stockade.v1 import decision_service_pb2 as d_pb2
from stockade.v1 import executor_service_pb2 as x_pb2
from stockade.v1 import executor_service_pb2_grpc as x_grpc
from tests.faults.conftest import FaultStack, StartStack, wait_for
from tests.secretvolume import SecretVolume

APPROVED = {"by": "approval", "approval": "ap-1", "resolver": "token:alice"}


class Replica:
    """One executor process and a way to call it."""

    def __init__(self, stack: FaultStack) -> None:
        self.stack = stack

    async def execute(
        self, grant: SignedGrant | None, session: str, call: str, tool: str, args: dict[str, Any]
    ) -> x_pb2.ExecuteResult:
        """Run a call; the result, or the RPC error raised."""
        arguments = struct_pb2.Struct()
        arguments.update(args)
        request = x_pb2.ExecuteRequest(
            call=c_pb2.ToolCall(
                session_id=session, call_id=call, tool_name=tool, arguments=arguments
            ),
            grant=d_pb2.Grant(payload=grant.payload, signature=grant.signature) if grant else None,
        )
        async with grpc.aio.insecure_channel(self.stack.addresses["executor"]) as channel:
            result = None
            async for message in x_grpc.ExecutorServiceStub(channel).Execute(request, timeout=60):
                if message.HasField("result"):
                    result = message.result
        assert result is not None
        return result


class Grants:
    """Signs grants like the decision service does."""

    def __init__(self, key_dir: Path) -> None:
        private, self.public = generate_keypair(key_dir)
        self.signer = GrantSigner(load_private_key(private))

    def sign(
        self,
        session: str,
        call: str,
        tool: str,
        args: Mapping[str, Any],
        settle: Mapping[str, str] | None = None,
    ) -> SignedGrant:
        """A grant for exactly this call (findings unknown: the executor's own checks
        must then be settled by ``settle``)."""
        extra = {"settle": settle} if settle else {}
        return self.signer.sign(
            session_id=session, call_id=call, tool_name=tool, arguments=args, **extra
        )


def _executor_env(workspace: Path, keys: list[Path], dsn: str | None) -> dict[str, str]:
    env = {
        "STOCKADE_EXECUTOR_WORKSPACE": str(workspace),
        "STOCKADE_EXECUTOR_GRANT_PUBLIC_KEY_FILE": str(keys[0]),
        "STOCKADE_EXECUTOR_GRANT_PUBLIC_KEY_FILES": ",".join(str(k) for k in keys[1:]),
    }
    if dsn is not None:
        env["STOCKADE_EXECUTOR_STATE_DSN"] = dsn
    return env


async def _replica(
    fault_stack: StartStack, base: Path, workspace: Path, keys: list[Path], dsn: str | None
) -> Replica:
    stack = await fault_stack(
        ["executor"], env={"executor": _executor_env(workspace, keys, dsn)}, base=base
    )
    return Replica(stack)


async def _refused(replica: Replica, code: grpc.StatusCode, *call: Any) -> str:
    with pytest.raises(grpc.aio.AioRpcError) as err:
        await replica.execute(*call)
    assert err.value.code() == code, err.value.details()
    return err.value.details() or ""


@pytest.fixture
def workspace(tmp_path: Path) -> Path:
    folder = tmp_path / "ws"
    folder.mkdir()
    (folder / "notes.txt").write_text("one\ntwo\n")
    return folder


@pytest.fixture(params=["postgresql", "sqlite"])
def shared_dsn(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    """PostgreSQL: replicas anywhere; SQLite: two executors of one node on one file."""
    if request.param == "postgresql":
        return str(request.getfixturevalue("pg_dsn"))
    return f"sqlite:///{tmp_path / 'node-state' / 'executor.sqlite3'}"


async def test_a_grant_is_spent_once_across_replicas_and_restarts(
    fault_stack: StartStack, tmp_path: Path, workspace: Path, shared_dsn: str
) -> None:
    dsn = shared_dsn
    grants = Grants(tmp_path / "keys")
    a = await _replica(fault_stack, tmp_path / "a", workspace, [grants.public], dsn)
    b = await _replica(fault_stack, tmp_path / "b", workspace, [grants.public], dsn)
    args = {"file_path": str(workspace / "notes.txt")}
    spent = [grants.sign("s1", f"c{n}", "read_file", args) for n in range(5)]
    for n, grant in enumerate(spent):
        result = await a.execute(grant, "s1", f"c{n}", "read_file", args)
        assert result.status == x_pb2.EXECUTION_STATUS_OK, result.error
        assert "two" in result.content
    for replica in (a, b):
        for n, grant in enumerate(spent):
            details = await _refused(
                replica, grpc.StatusCode.PERMISSION_DENIED, grant, "s1", f"c{n}", "read_file", args
            )
            assert "already used" in details
    # The replica that spent them is killed and comes back: still refused, all five.
    await a.stack.restart("executor")
    for n, grant in enumerate(spent):
        await _refused(
            a, grpc.StatusCode.PERMISSION_DENIED, grant, "s1", f"c{n}", "read_file", args
        )
    # A fresh grant still runs after the restart (the store is not simply refusing).
    fresh = grants.sign("s1", "c9", "read_file", args)
    assert (await a.execute(fresh, "s1", "c9", "read_file", args)).status == (
        x_pb2.EXECUTION_STATUS_OK
    )


async def test_a_single_node_keeps_spent_grants_in_its_state_dir(
    fault_stack: StartStack, tmp_path: Path, workspace: Path
) -> None:
    """No STATE_DSN at all: the embedded default (SQLite in STATE_DIR) survives SIGKILL."""
    grants = Grants(tmp_path / "keys")
    only = await _replica(fault_stack, tmp_path / "n", workspace, [grants.public], None)
    args = {"file_path": str(workspace / "notes.txt")}
    grant = grants.sign("s", "c", "read_file", args)
    assert (await only.execute(grant, "s", "c", "read_file", args)).status == (
        x_pb2.EXECUTION_STATUS_OK
    )
    await only.stack.restart("executor")
    assert (tmp_path / "n" / "state" / "executor" / "executor-state.sqlite3").exists()
    await _refused(only, grpc.StatusCode.PERMISSION_DENIED, grant, "s", "c", "read_file", args)


async def test_read_on_one_replica_edit_on_another(
    fault_stack: StartStack, tmp_path: Path, workspace: Path, pg_dsn: str
) -> None:
    grants = Grants(tmp_path / "keys")
    a = await _replica(fault_stack, tmp_path / "a", workspace, [grants.public], pg_dsn)
    b = await _replica(fault_stack, tmp_path / "b", workspace, [grants.public], pg_dsn)
    target = str(workspace / "notes.txt")
    read = {"file_path": target}

    async def edit(replica: Replica, session: str, call: str, old: str, new: str) -> Any:
        args = {"file_path": target, "old_string": old, "new_string": new}
        grant = grants.sign(session, call, "file_edit", args, APPROVED)
        return await replica.execute(grant, session, call, "file_edit", args)

    # No read in this session on any replica: refused on both.
    for n, replica in enumerate((a, b)):
        result = await edit(replica, "s1", f"e{n}", "one", "uno")
        assert result.status == x_pb2.EXECUTION_STATUS_ERROR
        assert "not been read" in result.error
    assert (workspace / "notes.txt").read_text() == "one\ntwo\n"

    # Read on A, edit on B: allowed.
    assert (await a.execute(grants.sign("s1", "r1", "read_file", read), "s1", "r1",
                            "read_file", read)).status == x_pb2.EXECUTION_STATUS_OK  # fmt: skip
    result = await edit(b, "s1", "e2", "one", "uno")
    assert result.status == x_pb2.EXECUTION_STATUS_OK, result.error
    # B's own write counts as the session's latest read: A may edit next.
    result = await edit(a, "s1", "e3", "two", "dos")
    assert result.status == x_pb2.EXECUTION_STATUS_OK, result.error
    assert (workspace / "notes.txt").read_text() == "uno\ndos\n"

    # Another session's read does not count.
    result = await edit(b, "s2", "e4", "uno", "eins")
    assert "not been read" in result.error

    # Changed on disk since the read: refused on both replicas.
    (workspace / "notes.txt").write_text("uno\ndos\nchanged\n")
    for n, replica in enumerate((a, b)):
        result = await edit(replica, "s1", f"e5{n}", "uno", "one")
        assert result.status == x_pb2.EXECUTION_STATUS_ERROR
        assert "changed since" in result.error
    assert (workspace / "notes.txt").read_text() == "uno\ndos\nchanged\n"


async def test_key_rotation(fault_stack: StartStack, tmp_path: Path, workspace: Path) -> None:
    old, new = Grants(tmp_path / "old"), Grants(tmp_path / "new")
    stranger = Grants(tmp_path / "stranger")
    args = {"file_path": str(workspace / "notes.txt")}
    # During the rotation: both keys listed, grants of either run.
    replica = await _replica(fault_stack, tmp_path / "x", workspace, [old.public, new.public], None)
    for n, keys in enumerate((old, new)):
        grant = keys.sign("s", f"c{n}", "read_file", args)
        assert (await replica.execute(grant, "s", f"c{n}", "read_file", args)).status == (
            x_pb2.EXECUTION_STATUS_OK
        )
    details = await _refused(
        replica, grpc.StatusCode.PERMISSION_DENIED,
        stranger.sign("s", "c2", "read_file", args), "s", "c2", "read_file", args,
    )  # fmt: skip
    assert "does not accept" in details
    # The old key removed (a restart with only the new one): old grants are refused, even
    # a fresh one never used, and new ones run.
    replica.stack.extra_env["executor"].update(_executor_env(workspace, [new.public], None))
    await replica.stack.restart("executor")
    unused_old = old.sign("s", "c3", "read_file", args)
    details = await _refused(
        replica, grpc.StatusCode.PERMISSION_DENIED, unused_old, "s", "c3", "read_file", args
    )
    assert "does not accept" in details
    grant = new.sign("s", "c4", "read_file", args)
    assert (await replica.execute(grant, "s", "c4", "read_file", args)).status == (
        x_pb2.EXECUTION_STATUS_OK
    )


async def test_keys_rotate_in_a_running_executor(
    fault_stack: StartStack, tmp_path: Path, workspace: Path
) -> None:
    """The key file is a mounted Secret that changes under the running executor (no
    restart): the new key is put in force and the old one dropped, an unusable content
    keeps the last good key and is reported (GetCapabilities, log), a fix takes effect."""
    old, new, third = (Grants(tmp_path / name) for name in ("old", "new", "third"))
    volume = SecretVolume(tmp_path / "grant-verify")
    volume.publish({"grant-signing.pub": old.public.read_bytes()})
    env = _executor_env(workspace, [volume.path("grant-signing.pub")], None)
    env["STOCKADE_EXECUTOR_GRANT_KEY_POLL_S"] = "0.05"
    replica = Replica(await fault_stack(["executor"], env={"executor": env}))
    args = {"file_path": str(workspace / "notes.txt")}
    calls = iter(range(10_000))

    async def runs(keys: Grants) -> bool:
        """A fresh grant of ``keys`` runs (True) or is refused for its key (False)."""
        call = f"c{next(calls)}"
        try:
            result = await replica.execute(keys.sign("s", call, "read_file", args), "s", call,
                                           "read_file", args)  # fmt: skip
        except grpc.aio.AioRpcError as err:
            assert err.code() == grpc.StatusCode.PERMISSION_DENIED, err.details()
            assert "does not accept" in (err.details() or "")
            return False
        assert result.status == x_pb2.EXECUTION_STATUS_OK
        return True

    async def grant_layer() -> str:
        async with grpc.aio.insecure_channel(replica.stack.addresses["executor"]) as channel:
            caps = await x_grpc.ExecutorServiceStub(channel).GetCapabilities(
                x_pb2.GetCapabilitiesRequest(), timeout=30
            )
        (layer,) = [x for x in caps.layers if x.name == "grant_verification"]
        return str(layer.detail)

    assert await runs(old) and not await runs(new)
    minted_before = old.sign("s", "early", "read_file", args)
    volume.publish({"grant-signing.pub": new.public.read_bytes()})
    await wait_for(lambda: runs(new), interval_s=0.1, what="the new key in force")
    assert not await runs(old)
    details = await _refused(
        replica, grpc.StatusCode.PERMISSION_DENIED, minted_before, "s", "early", "read_file", args
    )
    assert "does not accept" in details  # unexpired and never used: refused for its key

    volume.publish({"grant-signing.pub": b""})  # an empty Secret value
    await wait_for(
        lambda: _contains(grant_layer(), "KEY FILE PROBLEM"), interval_s=0.1, what="reported"
    )
    assert await runs(new) and not await runs(third)  # the last good key, nothing else
    log = replica.stack.log_tail("executor", 200)
    assert "keeping its last good key" in log and "grant-signing.pub" in log

    volume.publish({"grant-signing.pub": third.public.read_bytes()})
    await wait_for(lambda: runs(third), interval_s=0.1, what="the fixed key in force")
    assert not await runs(new)
    assert "KEY FILE PROBLEM" not in await grant_layer()


async def _contains(text: Awaitable[str], part: str) -> bool:
    return part in await text


async def test_an_unreachable_store_refuses_the_grant_and_keeps_it_unspent(
    fault_stack: StartStack, tmp_path: Path, workspace: Path, pg_dsn: str, pg_server: str
) -> None:
    grants = Grants(tmp_path / "keys")
    replica = await _replica(fault_stack, tmp_path / "a", workspace, [grants.public], pg_dsn)
    args = {"file_path": str(workspace / "notes.txt")}
    grant = grants.sign("s", f"c-{uuid.uuid4().hex}", "read_file", args)
    call = grant_call = parse_call(grant)
    database = urlsplit(pg_dsn).path.lstrip("/")
    admin = await asyncpg.connect(pg_server)
    try:
        await admin.execute(f'ALTER DATABASE "{database}" ALLOW_CONNECTIONS false')
        await admin.execute(
            "SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE datname = $1",
            database,
        )
        details = await _refused(
            replica, grpc.StatusCode.UNAVAILABLE, grant, "s", call, "read_file", args
        )
        assert "spent grants cannot be reached" in details
    finally:
        await admin.execute(f'ALTER DATABASE "{database}" ALLOW_CONNECTIONS true')
        await admin.close()
    # Refused, not spent: the same grant runs once the store is back, and only once.
    result = await replica.execute(grant, "s", grant_call, "read_file", args)
    assert result.status == x_pb2.EXECUTION_STATUS_OK, result.error
    await _refused(replica, grpc.StatusCode.PERMISSION_DENIED, grant, "s", call, "read_file", args)


def parse_call(grant: SignedGrant) -> str:
    """The call id a grant was issued for."""
    from stockade.contract.grant import parse_claims

    return parse_claims(grant.payload).call_id
