/**
 * Errors of the ctxd client. Every one is a CtxdError with a `code`: the
 * daemon's err code for RefusedError (PROTOCOL.md section 8), else the kind of
 * local failure. The names match the Python package's (client/python/ctxd).
 */

/** Base of every error this package throws. */
export class CtxdError extends Error {
  code: string;
  constructor(message: string, code = "error") {
    super(message);
    this.name = new.target.name;
    this.code = code;
  }
}

/** The daemon answered `err` (busy, exists, forbidden, bad_name...). */
export class RefusedError extends CtxdError {
  constructor(message: string, code = "refused") {
    super(message, code);
  }
  /** The error class for a daemon `err` code. */
  static make(code: string, message: string): RefusedError {
    if (code === "unknown_context") return new NotFoundError(message, code);
    if (code === "too_large") return new TooLargeError(message, code);
    return new RefusedError(message, code);
  }
}

/** `err too_large`, or a request the client refused to send for its size. */
export class TooLargeError extends RefusedError {
  constructor(message: string, code = "too_large") {
    super(message, code);
  }
}

/** `err unknown_context`: no such context. */
export class NotFoundError extends RefusedError {
  constructor(message: string, code = "unknown_context") {
    super(message, code);
  }
}

/** No daemon at the endpoint, or it stopped answering. */
export class UnreachableError extends CtxdError {
  constructor(message: string, code = "unreachable") {
    super(message, code);
  }
}

/**
 * tcp:// with CurveZMQ: the handshake failed (the socket monitor saw
 * handshake:error:auth / :protocol / :other): the daemon refused the client's
 * key, or the server key is not the daemon's. An UnreachableError too.
 */
export class AuthenticationError extends UnreachableError {
  constructor(message: string) {
    super(message, "auth");
  }
}

/** The daemon restarted while requests were in flight: their outcome is unknown. */
export class LostError extends CtxdError {
  constructor(message: string, code = "lost") {
    super(message, code);
  }
}

/**
 * The connection dropped while the request was in flight (the daemon died or
 * restarted, or refused the handshake): it will never be answered and its
 * outcome is unknown. An UnreachableError (the Python client's is also a
 * LostError); ZeroMQ reconnects for later calls.
 */
export class DisconnectedError extends UnreachableError {
  constructor(message: string) {
    super(message, "disconnected");
  }
}

/** The daemon sent something that breaks PROTOCOL.md. */
export class ProtocolError extends CtxdError {
  constructor(message: string) {
    super(message, "protocol");
  }
}

/** The client was closed while the call waited. */
export class ClosedError extends CtxdError {
  constructor(message = "the client is closed") {
    super(message, "closed");
  }
}

/** A bounded wait ran out (the Daytona surface's timeout of a run). */
export class CtxdTimeoutError extends CtxdError {
  constructor(message: string) {
    super(message, "timeout");
  }
}
