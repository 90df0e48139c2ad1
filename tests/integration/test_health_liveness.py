"""Liveness apart from readiness on a real gRPC server (port 0): a service that cannot
serve (its database down) turns readiness NOT_SERVING and never liveness, so Kubernetes
takes the pod out of the Service and does not restart it in a loop; the overall readiness
needs every service of the server; the drain ends readiness for good and leaves liveness
(on the health-only listener the kubelet probes under mTLS)."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable

import grpc
from grpc_health.v1 import health_pb2, health_pb2_grpc

from stockade.server import LIVENESS, READINESS, Registration, ServingState, load_settings
from stockade.server.app import _HEALTH_UPDATES, create_server, stop_server
from stockade.server.settings import ServerSettings

SERVING = health_pb2.HealthCheckResponse.SERVING
NOT_SERVING = health_pb2.HealthCheckResponse.NOT_SERVING


async def _status(address: str, service: str) -> int:
    async with grpc.aio.insecure_channel(address) as channel:
        reply = await health_pb2_grpc.HealthStub(channel).Check(
            health_pb2.HealthCheckRequest(service=service), timeout=10
        )
    return int(reply.status)


async def _statuses(address: str, *services: str) -> dict[str, int]:
    return {s: await _status(address, s) for s in services}


async def _until(condition: Callable[[], Awaitable[bool]], what: str) -> None:
    """Poll ``condition`` with a generous deadline (health updates run as tasks)."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + 60
    while not await condition():
        assert loop.time() < deadline, f"timed out waiting for {what}"
        await asyncio.sleep(0.02)


def _registration(name: str, state: ServingState) -> Registration:
    # A service with no RPCs of its own: only its health statuses matter here.
    return Registration(lambda servicer, server: None, object(), name, serving=state)


async def test_a_service_that_cannot_serve_is_not_ready_and_still_alive() -> None:
    store_a, store_b = ServingState(), ServingState()
    settings = load_settings(ServerSettings, listen="127.0.0.1:0", health_listen="127.0.0.1:0")
    running = await create_server(
        "t",
        settings,
        [_registration("stockade.test.A", store_a), _registration("stockade.test.B", store_b)],
    )
    main, probes = running.address, running.health_address
    everything = (LIVENESS, READINESS, "", "stockade.test.A", "stockade.test.B")
    try:
        for address in (main, probes):
            assert await _statuses(address, *everything) == dict.fromkeys(everything, SERVING)
        # A's database goes down: A and the server as a whole are not ready, B still is,
        # and the process is alive.
        store_a.set(False)
        want = {
            LIVENESS: SERVING,
            READINESS: NOT_SERVING,
            "": NOT_SERVING,
            "stockade.test.A": NOT_SERVING,
            "stockade.test.B": SERVING,
        }

        async def a_down() -> bool:
            return await _statuses(probes, *everything) == want

        await _until(a_down, "A not ready, the rest as wanted")
        assert await _statuses(main, *everything) == want
        # B goes down too, then A comes back: the server is ready only once both are.
        store_b.set(False)
        store_a.set(True)

        async def only_b_down() -> bool:
            got = await _statuses(probes, *everything)
            return got["stockade.test.A"] == SERVING and got["stockade.test.B"] == NOT_SERVING

        await _until(only_b_down, "A back and B down")
        assert await _statuses(probes, LIVENESS, READINESS, "") == {
            LIVENESS: SERVING,
            READINESS: NOT_SERVING,
            "": NOT_SERVING,
        }
        store_b.set(True)

        async def all_back() -> bool:
            return await _statuses(probes, *everything) == dict.fromkeys(everything, SERVING)

        await _until(all_back, "every status SERVING again")
        # The drain: readiness NOT_SERVING for good, whatever the services say after it;
        # liveness stays SERVING while the calls finish.
        await running.health.drain()
        store_a.set(False)
        store_a.set(True)
        await asyncio.gather(*list(_HEALTH_UPDATES))  # the mirrored updates have run
        assert await _statuses(probes, *everything) == {
            LIVENESS: SERVING,
            READINESS: NOT_SERVING,
            "": NOT_SERVING,
            "stockade.test.A": NOT_SERVING,
            "stockade.test.B": NOT_SERVING,
        }
    finally:
        await stop_server(running)


async def test_a_service_down_at_start_is_not_ready_from_the_first_probe() -> None:
    state = ServingState()
    state.set(False)
    settings = load_settings(ServerSettings, listen="127.0.0.1:0")
    running = await create_server("t", settings, [_registration("stockade.test.A", state)])
    try:

        async def reported() -> bool:
            return await _status(running.address, "stockade.test.A") == NOT_SERVING

        await _until(reported, "A to report NOT_SERVING")
        assert await _statuses(running.address, LIVENESS, READINESS, "") == {
            LIVENESS: SERVING,
            READINESS: NOT_SERVING,
            "": NOT_SERVING,
        }
    finally:
        await stop_server(running)
