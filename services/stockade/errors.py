"""Domain errors shared by every Stockade core.

Cores raise these; the server's exception interceptor maps each to a gRPC status with
``google.rpc.ErrorInfo{reason, domain="stockade", metadata}``. Cores never import grpc:
``code`` is the name of a ``grpc.StatusCode`` member and ``reason`` the name of an
``ErrorReason`` value without its prefix.
"""

from __future__ import annotations


class StockadeError(Exception):
    """Base class: a failure the caller caused or must know about, with a precise message."""

    code = "INTERNAL"
    reason = "INTERNAL"

    def __init__(self, message: str, **metadata: str) -> None:
        super().__init__(message)
        self.message = message
        self.metadata: dict[str, str] = {k: str(v) for k, v in metadata.items()}


class InvalidArgument(StockadeError):
    """A request field is missing or malformed."""

    code = "INVALID_ARGUMENT"
    reason = "INVALID_ARGUMENT"


class InvalidPattern(InvalidArgument):
    """A rule pattern does not parse; metadata names the pattern."""

    reason = "INVALID_PATTERN"


class InvalidPageToken(InvalidArgument):
    """A page token is malformed or belongs to another query."""

    reason = "INVALID_PAGE_TOKEN"


class NotFound(StockadeError):
    """The referenced object does not exist."""

    code = "NOT_FOUND"
    reason = "NOT_FOUND"


class SessionNotFound(NotFound):
    """The named decision session does not exist."""

    reason = "SESSION_NOT_FOUND"


class ApprovalNotFound(NotFound):
    """The named approval does not exist."""

    reason = "APPROVAL_NOT_FOUND"


class UnknownTool(NotFound):
    """The named tool is not registered."""

    reason = "UNKNOWN_TOOL"


class FailedPrecondition(StockadeError):
    """The request conflicts with the current state."""

    code = "FAILED_PRECONDITION"
    reason = "FAILED_PRECONDITION"


class ApprovalAlreadyResolved(FailedPrecondition):
    """Another resolver answered the approval first."""

    reason = "APPROVAL_ALREADY_RESOLVED"


class StaleWrite(FailedPrecondition):
    """A file changed since it was read, or was never read in this session."""

    reason = "STALE_WRITE"


class PermissionDenied(StockadeError):
    """The call is not permitted."""

    code = "PERMISSION_DENIED"
    reason = "NOT_AUTHORIZED"


class NotAuthorized(PermissionDenied):
    """The caller is not authorised for this RPC."""

    reason = "NOT_AUTHORIZED"


class PathRefused(PermissionDenied):
    """A path lies outside the allowed roots or is otherwise refused by the sandbox."""

    reason = "PATH_REFUSED"


class CommandRefused(PermissionDenied):
    """A bash command was refused by the executor's analysis."""

    reason = "COMMAND_REFUSED"


class GrantError(PermissionDenied):
    """A grant is missing or does not verify."""

    reason = "GRANT_INVALID"


class GrantMissing(GrantError):
    """Execute was called without a grant."""

    reason = "GRANT_MISSING"


class GrantExpired(GrantError):
    """The grant has expired."""

    reason = "GRANT_EXPIRED"


class GrantReplayed(GrantError):
    """The grant was already used."""

    reason = "GRANT_REPLAYED"


class GrantMismatch(GrantError):
    """The grant was issued for another session, call, tool or arguments."""

    reason = "GRANT_MISMATCH"


class GrantFindingsMismatch(GrantError):
    """The grant binds other executor findings than the executor's own (DEC-12 rev 2)."""

    reason = "GRANT_FINDINGS_MISMATCH"


class GrantAskUnsettled(GrantError):
    """The executor's own findings hold an ASK the grant does not settle (DEC-12 rev 2)."""

    reason = "GRANT_ASK_UNSETTLED"


class NotImplementedYet(StockadeError):
    """Part of the contract that is not built yet."""

    code = "UNIMPLEMENTED"
    reason = "NOT_IMPLEMENTED"


class DependencyUnavailable(StockadeError):
    """A service this one depends on could not be reached."""

    code = "UNAVAILABLE"
    reason = "DEPENDENCY_UNAVAILABLE"


class ResourceExhausted(StockadeError):
    """The server is overloaded; retry later."""

    code = "RESOURCE_EXHAUSTED"
    reason = "RESOURCE_EXHAUSTED"
