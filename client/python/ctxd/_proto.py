"""The ctxd wire format (proto/PROTOCOL.md): msgpack maps, one per ZeroMQ
message, with the str/bin distinction.

The encoder writes requests with their keys in the order PROTOCOL.md lists
them (v, t, id, then the request's fields), integers in their smallest form
and floats as float64, so its bytes equal the golden vectors in
proto/vectors/ and the C codec's. The decoder is strict like the daemon's:
nesting at most 16 deep, no trailing bytes, str map keys only and no repeated
key, str values valid UTF-8.
"""

from __future__ import annotations

import msgpack

from ._errors import ProtocolError

VERSION = 1
MAX_DEPTH = 16
MAX_ID_BYTES = 64

# Fields of each request, in PROTOCOL.md's order (section 5).
REQUEST_FIELDS = {
    "hello": (),
    "execute": ("ctx", "code", "timeout", "env", "silent", "stop_on_error"),
    "interrupt": ("ctx", "run"),
    "ctx.create": ("name", "cwd", "env"),
    "ctx.list": ("after", "limit"),
    "ctx.delete": ("ctx",),
    "ctx.restart": ("ctx",),
    "complete": ("ctx", "code", "cursor", "timeout"),
    "inspect": ("ctx", "code", "cursor", "detail_level", "timeout"),
    "is_complete": ("ctx", "code", "timeout"),
}

TERMINAL = ("done", "ok", "err")


def pack(obj) -> bytes:
    """msgpack bytes of obj: str as str, bytes as bin, smallest ints,
    float64 floats, dict keys in insertion order."""
    try:
        return msgpack.packb(obj, use_bin_type=True, use_single_float=False, strict_types=False)
    except (TypeError, ValueError, OverflowError, UnicodeEncodeError) as e:
        raise ValueError(f"cannot encode {type(obj).__name__}: {e}") from e


def build_request(t: str, rid, **fields) -> dict:
    """The request map: v, t, id, then the fields in PROTOCOL.md's order
    (None values are left out; fields PROTOCOL.md does not list for t come
    last, in the order given)."""
    if isinstance(rid, bool) or not isinstance(rid, (int, str)):
        raise ValueError("a request id is a str or a non-negative int")
    if isinstance(rid, int) and rid < 0:
        raise ValueError("a request id is a str or a non-negative int")
    if isinstance(rid, str) and not 1 <= len(rid.encode("utf-8", "surrogatepass")) <= MAX_ID_BYTES:
        raise ValueError("a str request id has 1 to 64 bytes")
    msg = {"v": VERSION, "t": t, "id": rid}
    order = REQUEST_FIELDS.get(t, ())
    for k in order:
        if fields.get(k) is not None:
            msg[k] = fields[k]
    for k, v in fields.items():
        if k not in order and v is not None:
            msg[k] = v
    return msg


def encode_request(t: str, rid, **fields) -> bytes:
    """build_request, packed."""
    return pack(build_request(t, rid, **fields))


def _pairs(pairs):
    d = {}
    for k, v in pairs:
        if not isinstance(k, str):
            raise ProtocolError(f"map key {k!r} is not a str")
        if k in d:
            raise ProtocolError(f"map key {k!r} repeated")
        d[k] = v
    return d


def _depth_ok(obj, limit):
    """Iterative depth check (a map or array counts one level)."""
    stack = [(obj, 1)]
    while stack:
        o, d = stack.pop()
        if isinstance(o, dict):
            if d > limit:
                return False
            stack.extend((v, d + 1) for v in o.values())
        elif isinstance(o, list):
            if d > limit:
                return False
            stack.extend((v, d + 1) for v in o)
    return True


def unpack(data: bytes):
    """Decodes exactly one msgpack object, as strictly as the daemon does.
    Raises ProtocolError for malformed input."""
    if not data:
        raise ProtocolError("empty message")
    try:
        obj = msgpack.unpackb(
            data,
            raw=False,
            strict_map_key=False,
            object_pairs_hook=_pairs,
            use_list=True,
        )
    except ProtocolError:
        raise
    except msgpack.ExtraData:
        raise ProtocolError("trailing bytes after the message") from None
    except UnicodeDecodeError:
        raise ProtocolError("a str is not valid UTF-8") from None
    except (ValueError, TypeError, msgpack.UnpackException, RecursionError) as e:
        raise ProtocolError(f"malformed msgpack: {e}") from None
    if not _depth_ok(obj, MAX_DEPTH):
        raise ProtocolError(f"nesting deeper than {MAX_DEPTH}")
    return obj


def decode_message(data: bytes) -> dict:
    """A daemon message: a map with v == 1 and a str t. `re` is read by the
    caller (absent or nil when the daemon could not read the request's id)."""
    msg = unpack(data)
    if not isinstance(msg, dict):
        raise ProtocolError("a message is not a map")
    if msg.get("v") != VERSION or isinstance(msg.get("v"), bool):
        raise ProtocolError(f"message of protocol version {msg.get('v')!r}")
    if not isinstance(msg.get("t"), str):
        raise ProtocolError("message without a str 't'")
    return msg
