"""Typed settings: one pydantic-settings class per service, all built on ``ServerSettings``.

Settings are read once at start-up from the environment (``STOCKADE_<SERVICE>_*``) and an
optional ``.env``-style file, validated, frozen and passed in; handlers never read
``os.environ``. A validation failure becomes a ``SettingsError`` whose message names each
bad variable and why, so an operator can fix the deployment without reading a traceback.
"""

from __future__ import annotations

import functools
import os
import re
from pathlib import Path
from typing import Annotated, Any, TypeVar

from pydantic import ValidationError, field_validator, model_validator
from pydantic_settings import BaseSettings, NoDecode, SettingsConfigDict

_LISTEN = re.compile(
    r"^(unix://(?P<path>/.+)|(?P<host>\[[0-9a-fA-F:]+\]|[A-Za-z0-9_.\-]+):(?P<port>\d{1,5}))$"
)


def split_csv(value: object) -> object:
    """A comma-separated environment value as a list (blank items dropped); other values
    pass through for pydantic to validate."""
    if isinstance(value, str):
        return [part.strip() for part in value.split(",") if part.strip()]
    return value


class SettingsError(Exception):
    """Settings could not be loaded; the message lists every problem by variable name."""


class ServerSettings(BaseSettings):
    """Settings every Stockade server shares. Subclasses set ``env_prefix``."""

    model_config = SettingsConfigDict(frozen=True, extra="ignore", env_prefix="STOCKADE_")

    listen: str = "127.0.0.1:0"
    """Where to listen: ``HOST:PORT`` (port 0 picks a free port) or ``unix:///abs/path``."""
    grace_seconds: float = 10.0
    """How long in-flight calls may run after SIGTERM before they are cancelled."""
    log_level: str = "INFO"
    """Python logging level name."""
    state_dir: Path = Path(".stockade/state")
    """Folder for this service's SQLite files and other local state."""
    tls_cert_file: Path | None = None
    """Server certificate (PEM). With key and CA set, the server requires mTLS."""
    tls_key_file: Path | None = None
    """Server private key (PEM)."""
    tls_ca_file: Path | None = None
    """CA bundle that client certificates must chain to (PEM)."""
    health_listen: str | None = None
    """Optional plaintext ``HOST:PORT`` serving only grpc.health.v1 (for kubelet probes
    when the main listener requires mTLS)."""
    allow_plaintext: bool = False
    """Allow plaintext on a non-loopback address (dev clusters only; X-3)."""
    allowed_peer_uids: Annotated[list[int], NoDecode] = []
    """On a ``unix://`` listener, uids besides the server's own that may connect, comma-
    separated; every other peer (its uid read with SO_PEERCRED) gets PERMISSION_DENIED."""

    @field_validator("allowed_peer_uids", mode="before")
    @classmethod
    def _split_uids(cls, value: object) -> object:
        return split_csv(value)

    @field_validator("allowed_peer_uids")
    @classmethod
    def _check_uids(cls, value: list[int]) -> list[int]:
        if any(uid < 0 or uid > 0xFFFFFFFE for uid in value):
            raise ValueError("uids are 0 to 4294967294")
        return value

    @field_validator("listen", "health_listen")
    @classmethod
    def _check_listen(cls, value: str | None) -> str | None:
        if value is None:
            return None
        match = _LISTEN.match(value)
        if not match:
            raise ValueError(
                f"{value!r} is not HOST:PORT or unix:///absolute/path "
                "(examples: 127.0.0.1:50051, 0.0.0.0:50051, unix:///run/stockade/decision.sock)"
            )
        if match.group("port") is not None and int(match.group("port")) > 65535:
            raise ValueError(f"port {match.group('port')} is out of range (0-65535)")
        return value

    @field_validator("grace_seconds")
    @classmethod
    def _check_grace(cls, value: float) -> float:
        if value < 0 or value > 3600:
            raise ValueError("must be between 0 and 3600 seconds")
        return value

    @field_validator("log_level")
    @classmethod
    def _check_level(cls, value: str) -> str:
        upper = value.upper()
        if upper not in {"DEBUG", "INFO", "WARNING", "ERROR", "CRITICAL"}:
            raise ValueError("must be one of DEBUG, INFO, WARNING, ERROR, CRITICAL")
        return upper

    @model_validator(mode="after")
    def _check_tls(self) -> ServerSettings:
        files = [self.tls_cert_file, self.tls_key_file, self.tls_ca_file]
        if any(files) and not all(files):
            raise ValueError("tls_cert_file, tls_key_file and tls_ca_file must be set together")
        for f in files:
            if f is not None and not f.is_file():
                raise ValueError(f"TLS file {f} does not exist")
        return self

    @property
    def tls_enabled(self) -> bool:
        """True when the server requires mutual TLS."""
        return self.tls_cert_file is not None


def unix_path(address: str | None) -> str | None:
    """The socket path of a ``unix://`` address (None for HOST:PORT)."""
    if address and address.startswith("unix://"):
        return address[len("unix://") :]
    return None


@functools.lru_cache(maxsize=16)
def _socket_dirs(own: tuple[str, ...], environ: tuple[tuple[str, str], ...]) -> tuple[str, ...]:
    dirs: dict[str, None] = {}
    for address in own + tuple(value for _, value in environ):
        path = unix_path(address)
        if path and path.startswith("/"):
            dirs[os.path.dirname(os.path.normpath(path)) or "/"] = None
    return tuple(dirs)


def stockade_socket_dirs(
    settings: ServerSettings, extra: list[str] | tuple[str, ...] = ()
) -> list[str]:
    """Directories holding Stockade's own unix sockets: this service's listeners, every
    ``STOCKADE_*_LISTEN`` / ``STOCKADE_*_ADDR`` of the environment the services share
    (``stockade serve all``, one pod's containers), and ``extra``. Computed once per
    distinct input (the environment is read at start-up and does not change)."""
    environ = tuple(
        sorted(
            (key, value)
            for key, value in os.environ.items()
            if key.startswith("STOCKADE_") and key.endswith(("_LISTEN", "_ADDR"))
        )
    )
    own = tuple(a for a in (settings.listen, settings.health_listen) if a)
    dirs = list(_socket_dirs(own, environ))
    return list(dict.fromkeys([*dirs, *extra]))


S = TypeVar("S", bound=BaseSettings)


def load_settings(cls: type[S], **overrides: Any) -> S:
    """Build ``cls`` from the environment plus ``overrides``; raise a readable SettingsError."""
    try:
        return cls(**overrides)
    except ValidationError as exc:
        prefix = str(cls.model_config.get("env_prefix", ""))
        lines = []
        for err in exc.errors():
            loc = ".".join(str(p) for p in err["loc"]) or "(settings)"
            var = f"{prefix}{loc}".upper() if err["loc"] else cls.__name__
            lines.append(f"  {var}: {err['msg']}")
        raise SettingsError(f"invalid {cls.__name__}:\n" + "\n".join(lines)) from None
