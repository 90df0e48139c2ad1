"""Serving the console: bind the listener, run uvicorn until SIGTERM/SIGINT, drain.

The socket is bound here (not by uvicorn) so that ``listen`` with port 0 works: the bound
address is known before serving starts, logged, and written to ``STOCKADE_READY_FILE``
(``console=http://HOST:PORT``) for the local stack and tests to find.
"""

from __future__ import annotations

import asyncio
import logging
import os
import socket
from pathlib import Path

import uvicorn

from stockade.console.app import build_app
from stockade.console.settings import ConsoleSettings

log = logging.getLogger("stockade.console")


def bind(listen: str) -> tuple[socket.socket, str]:
    """A listening socket for ``listen`` (``HOST:PORT`` or ``unix:///path``) and the URL
    it serves."""
    if listen.startswith("unix://"):
        path = Path(listen[len("unix://") :])
        path.parent.mkdir(parents=True, exist_ok=True)
        path.unlink(missing_ok=True)
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        sock.bind(str(path))
        sock.listen(128)
        return sock, listen
    host, _, port = listen.rpartition(":")
    host = host.strip("[]")
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind((host, int(port)))
    sock.listen(128)
    bound = sock.getsockname()[1]
    shown = f"[{host}]" if family == socket.AF_INET6 else host
    return sock, f"http://{shown}:{bound}"


def config(settings: ConsoleSettings) -> uvicorn.Config:
    """The uvicorn configuration: our logging, the settings' grace period for draining."""
    app, _ = build_app(settings)
    return uvicorn.Config(
        app,
        log_config=None,
        access_log=False,
        lifespan="on",
        timeout_graceful_shutdown=max(1, int(settings.grace_seconds)),
        # Only the auth proxy's address is trusted for its identity headers (people.py);
        # uvicorn must not rewrite the peer address from X-Forwarded-For.
        proxy_headers=False,
        server_header=False,
    )


async def serve(settings: ConsoleSettings) -> None:
    """Serve until a signal."""
    sock, url = bind(settings.listen)
    server = uvicorn.Server(config(settings))
    log.info("console serving on %s", url)
    ready = os.environ.get("STOCKADE_READY_FILE")
    if ready:
        Path(ready).parent.mkdir(parents=True, exist_ok=True)
        tmp = f"{ready}.tmp"
        Path(tmp).write_text(f"console={url}\n")
        os.replace(tmp, ready)
    try:
        await server.serve(sockets=[sock])
    finally:
        sock.close()


def run(settings: ConsoleSettings) -> int:
    """Process entry point: the strict environment check every service makes (an unknown
    ``STOCKADE_*`` variable stops it, naming the closest known one), then serve."""
    import sys

    from stockade.server.envcheck import check_environment
    from stockade.server.settings import SettingsError
    from stockade.server.telemetry import setup_logging, setup_telemetry

    try:
        check_environment(os.environ, [ConsoleSettings])
    except SettingsError as exc:
        print(f"stockade console: {exc}", file=sys.stderr)
        return 2
    setup_logging(settings.log_level)
    telemetry = setup_telemetry("console")
    try:
        asyncio.run(serve(settings))
    except OSError as exc:
        # A port in use, a folder it cannot write: the one line that names it.
        print(f"stockade console: cannot listen on {settings.listen}: {exc}", file=sys.stderr)
        return 2
    finally:
        telemetry.shutdown()
    return 0
