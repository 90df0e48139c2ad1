"""The errors every Stockade client raises: one small hierarchy, no gRPC types.

A typed client method that fails raises a :class:`ServiceError` (or one of its
subclasses), never a ``grpc.RpcError``: callers act on what happened without importing
gRPC, and the agent's core, which reads these errors to fail closed, stays free of it.
Every error carries the service it called (``service``), the gRPC status code's name
(``code``, e.g. ``"UNAVAILABLE"``) and the server's message (``details``, cut to
:data:`MAX_DETAILS_CHARS`). Nothing else of the call is kept: not the request, not its
metadata (a forwarded ``authorization`` never reaches a log through an error).

Pick the class by what the caller must do:

- :class:`UnavailableError` (UNAVAILABLE): not reached, or it went away; the call may be
  tried again.
- :class:`DeadlineExceededError` (DEADLINE_EXCEEDED): the caller stopped waiting; the
  outcome is **unknown** (``outcome_unknown``: the server may have acted).
- :class:`PermissionDeniedError` (PERMISSION_DENIED, UNAUTHENTICATED): the server refused
  the caller.
- :class:`InvalidArgumentError` (INVALID_ARGUMENT, OUT_OF_RANGE): the request is
  malformed; sending it again cannot help.
- :class:`ResourceExhaustedError` (RESOURCE_EXHAUSTED): a bound was reached (``details``
  names it).
- :class:`NotFoundError` (NOT_FOUND): the object named does not exist.
- :class:`FailedPreconditionError` (FAILED_PRECONDITION): the state forbids it (an
  approval another resolver answered first).
- :class:`ServiceError` itself: any other code (INTERNAL, UNKNOWN, CANCELLED,
  UNIMPLEMENTED ...); ``code`` says which. Catch it to catch them all.

Permission answers never raise: ``DecisionClient.decide`` and ``await_approval`` turn
every failure into a DENY (fail closed, ``stockade.client.base``).
"""

from __future__ import annotations

from typing import ClassVar

MAX_DETAILS_CHARS = 2048
"""Longest ``details`` kept (a server cuts its own messages shorter; a transport error
quoting addresses can be long)."""


class ServiceError(Exception):
    """A call to a Stockade service failed.

    ``str(error)`` is ``"<service> service <CODE>: <details>"``.
    """

    codes: ClassVar[frozenset[str]] = frozenset()
    """The status code names this class stands for (empty for the base class)."""
    outcome_unknown: ClassVar[bool] = False
    """True when the server may have acted although the call failed."""

    def __init__(self, service: str, code: str, details: str = "") -> None:
        details = details or ""
        if len(details) > MAX_DETAILS_CHARS:
            details = f"{details[: MAX_DETAILS_CHARS - 40]}… [cut: {len(details):,} characters]"
        super().__init__(f"{service} service {code}: {details}")
        self.service = service
        """Which service was called (``decision``, ``executor``, ``audit``, ``agent`` …)."""
        self.code = code
        """The gRPC status code's name (``UNAVAILABLE``, ``DEADLINE_EXCEEDED`` …)."""
        self.details = details
        """The server's (or the transport's) message."""

    def __reduce__(self) -> tuple[type[ServiceError], tuple[str, str, str]]:
        # Pickle (multiprocessing, pytest-xdist) with the constructor's arguments.
        return (type(self), (self.service, self.code, self.details))


class UnavailableError(ServiceError):
    """The service could not be reached or went away mid-call (UNAVAILABLE)."""

    codes = frozenset({"UNAVAILABLE"})


class DeadlineExceededError(ServiceError):
    """The deadline passed before the answer came: the outcome is unknown."""

    codes = frozenset({"DEADLINE_EXCEEDED"})
    outcome_unknown = True


class PermissionDeniedError(ServiceError):
    """The server refused the caller (PERMISSION_DENIED, UNAUTHENTICATED)."""

    codes = frozenset({"PERMISSION_DENIED", "UNAUTHENTICATED"})


class InvalidArgumentError(ServiceError):
    """The request is malformed (INVALID_ARGUMENT, OUT_OF_RANGE); retrying cannot help."""

    codes = frozenset({"INVALID_ARGUMENT", "OUT_OF_RANGE"})


class ResourceExhaustedError(ServiceError):
    """A bound was reached (RESOURCE_EXHAUSTED); ``details`` names it."""

    codes = frozenset({"RESOURCE_EXHAUSTED"})


class NotFoundError(ServiceError):
    """The object the request names does not exist (NOT_FOUND)."""

    codes = frozenset({"NOT_FOUND"})


class FailedPreconditionError(ServiceError):
    """The current state forbids the request (FAILED_PRECONDITION), e.g. another
    resolver answered the approval first."""

    codes = frozenset({"FAILED_PRECONDITION"})


ERROR_CLASSES: tuple[type[ServiceError], ...] = (
    UnavailableError,
    DeadlineExceededError,
    PermissionDeniedError,
    InvalidArgumentError,
    ResourceExhaustedError,
    NotFoundError,
    FailedPreconditionError,
)
"""Every subclass, each standing for the codes it lists."""

_BY_CODE: dict[str, type[ServiceError]] = {code: cls for cls in ERROR_CLASSES for code in cls.codes}


def service_error(service: str, code: str, details: str = "") -> ServiceError:
    """The error for a call to ``service`` that ended with status ``code`` (its name)."""
    return _BY_CODE.get(code, ServiceError)(service, code, details)
