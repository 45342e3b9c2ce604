"""Exceptions of the ctxd package. Every one is a CtxdError with a `code`
(the daemon's err code for RefusedError, see PROTOCOL.md section 8; else the
kind of local failure) and a `message`."""

from __future__ import annotations


class CtxdError(Exception):
    """Base of every error this package raises."""

    code = "error"

    def __init__(self, message: str = "", code: str | None = None):
        super().__init__(message)
        self.message = message
        if code is not None:
            self.code = code


class RefusedError(CtxdError):
    """The daemon answered `err` (e.g. busy, unknown_context, exists,
    forbidden, bad_name). `code` is the daemon's code."""

    code = "refused"

    @staticmethod
    def make(code: str, message: str) -> "RefusedError":
        cls = {"unknown_context": NotFoundError, "too_large": TooLargeError}.get(code, RefusedError)
        return cls(message, code)


class TooLargeError(RefusedError, ValueError):
    """`err too_large`: a request larger than the daemon's max_request_bytes
    (refused by the client itself, before sending, when hello told the
    limit), or a field past its own limit (max_code_bytes, file size)."""

    code = "too_large"


class NotFoundError(RefusedError):
    """`err unknown_context`: no such context."""

    code = "unknown_context"


class UnreachableError(CtxdError, ConnectionError):
    """No daemon at the endpoint, or it stopped answering (no reply within
    the request timeout, or a failed liveness check during a run)."""

    code = "unreachable"


class AuthenticationError(UnreachableError):
    """tcp:// with CurveZMQ: the handshake failed (a socket monitor saw
    ZMQ_EVENT_HANDSHAKE_FAILED_*): the daemon refused the client's key (not
    in its authorized_keys), or the server key is not the daemon's. An
    UnreachableError too, for callers that catch that."""

    code = "auth"


class LostError(CtxdError, ConnectionError):
    """The daemon restarted while a run was in flight (a liveness check was
    answered by another daemon instance), or the connection to it dropped
    (DisconnectedError): the request's outcome is unknown."""

    code = "lost"


class DisconnectedError(LostError, UnreachableError):
    """The connection to the daemon dropped while the request was in flight
    (the daemon died or restarted, or refused a message past ZeroMQ's size
    limit): it will never be answered and its outcome is unknown. Both a
    LostError and an UnreachableError; ZeroMQ reconnects for later calls."""

    code = "disconnected"


class ProtocolError(CtxdError):
    """The daemon sent something that breaks PROTOCOL.md (also raised by the
    strict decoder for malformed msgpack)."""

    code = "protocol"


class ClosedError(CtxdError):
    """The client was closed while the call was waiting."""

    code = "closed"


class CtxdTimeoutError(CtxdError, TimeoutError):
    """A run exceeded its timeout. The native API reports this as a result
    with status "timeout" instead; the Daytona-compatible CodeInterpreter
    raises it (as DaytonaTimeoutError)."""

    code = "timeout"
