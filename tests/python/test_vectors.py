"""The package's codec against proto/vectors/, byte for byte: what the C
codec (tests/unit/test_proto.c) and the daemon produce."""

import json
from pathlib import Path

import pytest

from ctxd import _proto
from ctxd import ProtocolError

VECTORS = Path(__file__).resolve().parents[2] / "proto" / "vectors"
DESC = json.loads((VECTORS / "vectors.json").read_text(encoding="utf-8"))


def from_json(o):
    if isinstance(o, dict):
        if set(o) == {"$bin"}:
            return bytes.fromhex(o["$bin"])
        return {k: from_json(v) for k, v in o.items()}
    if isinstance(o, list):
        return [from_json(v) for v in o]
    return o


GOOD = sorted(DESC["good"])
BAD = sorted(DESC["bad"])


def test_vectors_present():
    assert {"hello", "execute", "accepted", "stream", "done", "err"} <= set(GOOD)
    assert BAD


@pytest.mark.parametrize("name", GOOD)
def test_encoder_produces_vector_bytes(name):
    obj = from_json(DESC["good"][name])
    want = (VECTORS / f"{name}.msgpack").read_bytes()
    assert _proto.pack(obj) == want


@pytest.mark.parametrize("name", GOOD)
def test_decoder_reads_vector(name):
    obj = from_json(DESC["good"][name])
    got = _proto.unpack((VECTORS / f"{name}.msgpack").read_bytes())
    assert got == obj
    assert list(got) == list(obj)  # key order preserved


def test_request_builder_matches_vectors():
    """The builder puts fields in PROTOCOL.md's order whatever the call's
    keyword order, so the bytes equal the vectors'."""
    assert _proto.encode_request("hello", 1) == (VECTORS / "hello.msgpack").read_bytes()
    want = (VECTORS / "execute.msgpack").read_bytes()
    assert _proto.encode_request(
        "execute", "req-42", stop_on_error=True, silent=False, env={"A": "1"}, timeout=2.5,
        code="x = 1\nprint(x)", ctx="default") == want
    assert _proto.encode_request(
        "execute", "req-42", ctx="default", code="x = 1\nprint(x)", timeout=2.5,
        env={"A": "1"}, silent=False, stop_on_error=True) == want


def test_request_builder_omits_none_and_checks_ids():
    assert _proto.build_request("interrupt", 3, ctx="a", run=None) == {
        "v": 1, "t": "interrupt", "id": 3, "ctx": "a"}
    assert list(_proto.build_request("interrupt", 3, run=9, ctx="a")) == [
        "v", "t", "id", "ctx", "run"]
    for bad in ("", "x" * 65, -1, True, 1.5, None):
        with pytest.raises(ValueError):
            _proto.build_request("hello", bad)


@pytest.mark.parametrize("name", BAD)
def test_bad_vectors(name):
    """Malformed msgpack (bad_frame, invalid UTF-8) is refused by the strict
    decoder; maps that break the envelope (not a map, version, t) are
    refused by decode_message; the other vectors are well-formed msgpack
    with a request-level problem the daemon refuses, and decode here."""
    code = DESC["bad"][name]
    raw = (VECTORS / "bad" / f"{name}.msgpack").read_bytes()
    if code == "bad_frame" or name == "code_not_utf8":
        with pytest.raises(ProtocolError):
            _proto.unpack(raw)
    elif name in ("array_root", "no_version", "wrong_version", "type_not_str"):
        with pytest.raises(ProtocolError):
            _proto.decode_message(raw)
    else:
        assert isinstance(_proto.unpack(raw), dict)


def test_decoder_limits():
    nested = 1
    for _ in range(16):
        nested = [nested]
    assert _proto.unpack(_proto.pack(nested)) == nested
    with pytest.raises(ProtocolError):
        _proto.unpack(_proto.pack([nested]))
    with pytest.raises(ProtocolError):
        _proto.unpack(b"")
