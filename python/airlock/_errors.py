"""The exceptions of the airlock package: every one is an :class:`AirlockError`."""

from __future__ import annotations

from typing import Any, Dict, List, Optional

__all__ = [
    "AirlockError",
    "BinaryNotFound",
    "CommandFailed",
    "SandboxNotFound",
    "SandboxDead",
    "ProtocolError",
    "AdminError",
    "Unauthorized",
    "NotFound",
    "EndpointNotFound",
    "InvalidPolicy",
    "PolicyConflict",
]


class AirlockError(Exception):
    """Something airlock itself refused or could not do.

    ``message`` is airlock's own explanation (its ``airlock: ...`` lines on standard error,
    or the error of an admin API answer); ``exit_status`` is the exit status of the
    ``airlock`` command that failed (125 when airlock could not set something up), or
    ``None`` when no command was involved.
    """

    def __init__(self, message: str, *, exit_status: Optional[int] = None) -> None:
        super().__init__(message)
        self.message = message
        self.exit_status = exit_status

    def __str__(self) -> str:
        if self.exit_status is None:
            return self.message
        return f"{self.message} (airlock exit status {self.exit_status})"


class BinaryNotFound(AirlockError):
    """No ``airlock`` executable: not installed beside this package, not in ``AIRLOCK_BIN``,
    not on ``PATH``."""


class CommandFailed(AirlockError):
    """An ``airlock`` command failed (its status and standard error are carried)."""

    def __init__(self, message: str, *, exit_status: Optional[int], argv: List[str]) -> None:
        super().__init__(message, exit_status=exit_status)
        self.argv = argv


class SandboxNotFound(CommandFailed):
    """The sandbox does not exist."""


class SandboxDead(AirlockError):
    """The sandbox exists but its daemon or confinement is gone; only ``teardown`` (or
    ``airlock sandbox export``) can still be used on it."""


class ProtocolError(AirlockError):
    """``airlock`` answered in a form this package does not understand (for example a newer
    version of the JSON line protocol than it knows)."""


class AdminError(AirlockError):
    """An admin API call was answered with an error status.

    ``status`` is the HTTP status, ``body`` the decoded JSON answer (or ``None``)."""

    def __init__(self, message: str, *, status: int, body: Any = None) -> None:
        super().__init__(message)
        self.status = status
        self.body = body


class Unauthorized(AdminError):
    """401: the bearer token is missing or wrong."""


class NotFound(AdminError):
    """404: the thing asked for does not exist (for example a pending request that was
    already answered or timed out)."""


class EndpointNotFound(NotFound):
    """404 for the route itself: this airlock proxy does not offer the call (for example
    ``/v1/pending`` on a proxy without asking support)."""


class InvalidPolicy(AdminError):
    """400: the policy was refused and nothing changed. ``errors`` lists
    ``{"location": ..., "message": ...}`` objects, one per problem."""

    def __init__(self, message: str, *, status: int, body: Any, errors: List[Dict[str, str]]) -> None:
        super().__init__(message, status=status, body=body)
        self.errors = errors


class PolicyConflict(AdminError):
    """412: ``If-Match`` named another etag than the one in force; ``etag`` is the current
    one (when the server said)."""

    def __init__(self, message: str, *, status: int, body: Any, etag: Optional[str]) -> None:
        super().__init__(message, status=status, body=body)
        self.etag = etag
