"""Who may call which RPC (X-3): every RPC of every service declares its access, a server
never starts with an undeclared one, and admin RPCs refuse other callers before the
servicer runs (over a real gRPC server on port 0)."""

from __future__ import annotations

import importlib
import pkgutil
from collections.abc import AsyncIterator, Mapping
from pathlib import Path
from typing import Any, ClassVar

import grpc
import pytest

import stockade
import stockade.v1
from stockade.server.access import Access, AdminAuth, Caller, current_caller
from stockade.server.app import Registration, StartupError, create_server, stop_server
from stockade.server.settings import ServerSettings
from stockade.v1 import decision_service_pb2 as d_pb2
from stockade.v1 import decision_service_pb2_grpc as d_grpc

SERVED_ELSEWHERE = {
    # Hook servers are the deployment's own (the agent calls them); Stockade serves none.
    "stockade.v1.HookService",
}
DECISION = "stockade.v1.DecisionService"


def _product_servicers() -> dict[str, list[type]]:
    """Service full name → the servicer classes Stockade's own packages define for it."""
    # Service packages may be namespace packages (no __init__.py), which pkgutil skips:
    # look for their servicer modules on disk.
    for root in stockade.__path__:
        for servicer in sorted(Path(root).glob("*/servicer.py")):
            importlib.import_module(f"stockade.{servicer.parent.name}.servicer")
    found: dict[str, list[type]] = {}
    for mod in pkgutil.iter_modules(stockade.v1.__path__):
        if not mod.name.endswith("_pb2_grpc"):
            continue
        grpc_mod = importlib.import_module(f"stockade.v1.{mod.name}")
        pb2 = importlib.import_module(f"stockade.v1.{mod.name.removesuffix('_grpc')}")
        for service in pb2.DESCRIPTOR.services_by_name.values():
            base = getattr(grpc_mod, f"{service.name}Servicer")
            seen: list[type] = []
            todo = list(base.__subclasses__())
            while todo:
                cls = todo.pop()
                todo.extend(cls.__subclasses__())
                if cls.__module__.startswith("stockade."):
                    seen.append(cls)
            found[service.full_name] = seen
    return found


def test_every_rpc_of_every_service_declares_its_access() -> None:
    servicers = _product_servicers()
    assert DECISION in servicers and "stockade.v1.ExecutorService" in servicers
    for full_name, classes in servicers.items():
        if full_name in SERVED_ELSEWHERE:
            continue
        assert classes, f"{full_name}: no servicer found (or list it in SERVED_ELSEWHERE)"
        service = importlib.import_module("google.protobuf.descriptor_pool").Default()
        rpcs = {m.name for m in service.FindServiceByName(full_name).methods}
        for cls in classes:
            table = getattr(cls, "ACCESS", None)
            assert table is not None, f"{cls.__qualname__} has no ACCESS table"
            assert set(table) == rpcs, (
                f"{cls.__qualname__}.ACCESS: missing {sorted(rpcs - set(table))}, "
                f"not RPCs {sorted(set(table) - rpcs)}"
            )
            assert all(isinstance(a, Access) for a in table.values())


def test_the_decision_services_admin_rpcs_are_declared_admin() -> None:
    """The RPCs that change what gets allowed, or answer for a person, are admin-only."""
    from stockade.decision.servicer import DecisionServicer

    admin = {rpc for rpc, a in DecisionServicer.ACCESS.items() if a is Access.ADMIN}
    assert admin == {
        "DeleteSession",
        "AddRule",
        "RemoveRule",
        "SetMode",
        "ResolveApproval",
        "RevokeGrant",
    }
    assert DecisionServicer.ACCESS["CreateSession"] is Access.ADMIN_FOR_SOME_REQUESTS


class Recording(d_grpc.DecisionServiceServicer):
    """Two decision RPCs that record whether (and as whom) they ran."""

    ACCESS: ClassVar[Mapping[str, Access]] = {
        rpc.name: Access.ANY_CALLER
        for rpc in d_pb2.DESCRIPTOR.services_by_name["DecisionService"].methods
    } | {"DeleteSession": Access.ADMIN, "CreateSession": Access.ADMIN_FOR_SOME_REQUESTS}

    def __init__(self) -> None:
        self.ran: list[tuple[str, Caller | None]] = []

    async def DeleteSession(
        self, request: d_pb2.DeleteSessionRequest, context: Any
    ) -> d_pb2.DeleteSessionResponse:
        self.ran.append(("DeleteSession", current_caller()))
        return d_pb2.DeleteSessionResponse(deleted=True)

    async def CreateSession(
        self, request: d_pb2.CreateSessionRequest, context: Any
    ) -> d_pb2.CreateSessionResponse:
        self.ran.append(("CreateSession", current_caller()))
        return d_pb2.CreateSessionResponse()

    async def GetSession(
        self, request: d_pb2.GetSessionRequest, context: Any
    ) -> d_pb2.GetSessionResponse:
        # An RPC open to any caller gets no caller worked out (nothing to pay per call).
        self.ran.append(("GetSession", None))
        with pytest.raises(RuntimeError, match="ACCESS"):
            current_caller()
        return d_pb2.GetSessionResponse()


def _registration(servicer: Any, admin: AdminAuth | None) -> Registration:
    return Registration(
        d_grpc.add_DecisionServiceServicer_to_server, servicer, DECISION, admin=admin
    )


@pytest.fixture
async def served() -> AsyncIterator[tuple[Recording, d_grpc.DecisionServiceAsyncStub]]:
    servicer = Recording()
    srv = await create_server(
        "access",
        ServerSettings(listen="127.0.0.1:0", grace_seconds=0),
        [_registration(servicer, AdminAuth(["ops=tok-ops"]))],
    )
    try:
        async with grpc.aio.insecure_channel(srv.address) as ch:
            yield servicer, d_grpc.DecisionServiceStub(ch)  # type: ignore[misc]
    finally:
        await stop_server(srv)


BAD_CREDENTIALS = [
    (),
    (("authorization", "Bearer wrong"),),
    (("authorization", "tok-ops"),),  # no scheme
    (("authorization", "Basic tok-ops"),),
    (("authorization", "Bearer tok-op"),),  # a prefix of the token
    (("x-stockade-on-behalf-of", "admin"),),  # naming someone is not being them
]


@pytest.mark.parametrize("metadata", BAD_CREDENTIALS)
async def test_an_admin_rpc_refuses_other_callers_before_the_servicer_runs(
    served: tuple[Recording, d_grpc.DecisionServiceAsyncStub], metadata: Any
) -> None:
    servicer, stub = served
    request = d_pb2.DeleteSessionRequest(session_id="s1")
    with pytest.raises(grpc.aio.AioRpcError) as err:
        await stub.DeleteSession(request, metadata=metadata)
    assert err.value.code() == grpc.StatusCode.PERMISSION_DENIED
    assert "DeleteSession is an admin RPC" in (err.value.details() or "")
    assert servicer.ran == []


async def test_the_core_gets_the_authenticated_caller(
    served: tuple[Recording, d_grpc.DecisionServiceAsyncStub],
) -> None:
    servicer, stub = served
    await stub.DeleteSession(
        d_pb2.DeleteSessionRequest(session_id="s1"),
        metadata=(("authorization", "Bearer tok-ops"),),
    )
    await stub.CreateSession(d_pb2.CreateSessionRequest())
    await stub.CreateSession(
        d_pb2.CreateSessionRequest(), metadata=(("authorization", "Bearer tok-ops"),)
    )
    await stub.GetSession(d_pb2.GetSessionRequest(session_id="s1"))
    assert [
        (rpc, c.identity if c else None, c.admin if c else None) for rpc, c in servicer.ran
    ] == [
        ("DeleteSession", "token:ops", True),
        ("CreateSession", None, False),  # runs: the core decides whether it needs an admin
        ("CreateSession", "token:ops", True),
        ("GetSession", None, None),
    ]


async def test_a_server_never_starts_with_an_undeclared_rpc() -> None:
    class Missing(Recording):
        ACCESS: ClassVar[Mapping[str, Access]] = {
            k: v for k, v in Recording.ACCESS.items() if k != "LintPolicy"
        }

    class Extra(Recording):
        ACCESS: ClassVar[Mapping[str, Access]] = {**Recording.ACCESS, "Backdoor": Access.ANY_CALLER}

    settings = ServerSettings(listen="127.0.0.1:0", grace_seconds=0)
    with pytest.raises(StartupError, match="missing: LintPolicy"):
        await create_server("x", settings, [_registration(Missing(), AdminAuth(["t"]))])
    with pytest.raises(StartupError, match="not RPCs of the service: Backdoor"):
        await create_server("x", settings, [_registration(Extra(), AdminAuth(["t"]))])
    # Admin RPCs with nobody to check the caller: refused at start, not open at run time.
    with pytest.raises(StartupError, match="no AdminAuth"):
        await create_server("x", settings, [_registration(Recording(), None)])
