"""Bad client input: each gets the right `err`, and the daemon keeps serving
(the same client and a fresh one)."""

import struct

import pytest

from conftest import pack, RECV_TIMEOUT, _key

MiB = 1024 * 1024


def p(x):
    return pack(x)


def mapn(n):
    """msgpack map header for n pairs."""
    if n < 16:
        return bytes([0x80 | n])
    return b"\xde" + struct.pack(">H", n)


def raw_map(*pairs):
    """A map from already-encoded (key, value) byte pairs, in order."""
    return mapn(len(pairs)) + b"".join(k + v for k, v in pairs)


def env(t="execute", rid=7):
    return [(p("v"), p(1)), (p("t"), p(t)), (p("id"), p(rid))]


def nested(depth):
    v = 0
    for _ in range(depth):
        v = {"a": v}
    return v


def nested_arrays(depth):
    v = []
    for _ in range(depth):
        v = [v]
    return v


def recv_err(client, timeout=RECV_TIMEOUT):
    """The next message on the connection (there is no usable id)."""
    msg = client._recv_one(timeout)
    assert msg is not None, f"no reply within {timeout} s"
    return msg


def check_still_serving(daemon, client):
    r = client.execute("40 + 2")
    assert r.status == "ok" and r.text == "42", r
    other = daemon.client("str")
    r = other.execute("'fine'")
    assert r.status == "ok" and r.text == "'fine'", r
    assert daemon.alive()


# (name, message bytes or list of frames, expected code, expected re or ... for "don't check")
CASES = [
    ("garbage", b"\xc1\xc1\xc1 this is not msgpack", "bad_frame", None),
    ("text_garbage", b"hello world", "bad_frame", None),
    ("empty_frame", b"", "bad_frame", None),
    ("truncated", p({"v": 1, "t": "execute", "id": 7, "code": "print(1)"})[:-3], "bad_frame", None),
    ("trailing_bytes", p({"v": 1, "t": "hello", "id": 7}) + b"\x00", "bad_frame", None),
    ("array_not_map", p([1, "hello", 7]), "bad_request", None),
    ("scalar_not_map", p(5), "bad_request", None),
    ("code_int", p({"v": 1, "t": "execute", "id": 7, "code": 5}), "bad_field", 7),
    ("code_bin", p({"v": 1, "t": "execute", "id": 7, "code": b"1"}), "bad_field", 7),
    ("code_nil", p({"v": 1, "t": "execute", "id": 7, "code": None}), "bad_field", 7),
    ("timeout_str", p({"v": 1, "t": "execute", "id": "s1", "code": "1", "timeout": "5"}),
     "bad_field", "s1"),
    ("ctx_bin", p({"v": 1, "t": "execute", "id": 7, "code": "1", "ctx": b"default"}),
     "bad_field", 7),
    ("env_list", p({"v": 1, "t": "execute", "id": 7, "code": "1", "env": ["A=1"]}),
     "bad_field", 7),
    ("env_int_value", p({"v": 1, "t": "execute", "id": 7, "code": "1", "env": {"A": 1}}),
     "bad_field", 7),
    ("timeout_negative", p({"v": 1, "t": "execute", "id": 7, "code": "1", "timeout": -1}),
     "bad_field", 7),
    ("timeout_negative_float", p({"v": 1, "t": "execute", "id": 7, "code": "1",
                                  "timeout": -0.5}), "bad_field", 7),
    ("timeout_too_big", p({"v": 1, "t": "execute", "id": 7, "code": "1", "timeout": 1e10}),
     "bad_field", 7),
    ("timeout_nan", p({"v": 1, "t": "execute", "id": 7, "code": "1",
                       "timeout": float("nan")}), "bad_field", 7),
    ("interrupt_run_float", p({"v": 1, "t": "interrupt", "id": 7, "run": 1.5}), "bad_field", 7),
    ("silent_str", p({"v": 1, "t": "execute", "id": 7, "code": "1", "silent": "yes"}),
     "bad_field", 7),
    ("stop_on_error_int", p({"v": 1, "t": "execute", "id": 7, "code": "1",
                             "stop_on_error": 1}), "bad_field", 7),
    ("missing_code", p({"v": 1, "t": "execute", "id": 7}), "bad_field", 7),
    ("create_name_int", p({"v": 1, "t": "ctx.create", "id": 7, "name": 3}), "bad_field", 7),
    ("create_env_str", p({"v": 1, "t": "ctx.create", "id": 7, "env": "A=1"}), "bad_field", 7),
    ("create_cwd_int", p({"v": 1, "t": "ctx.create", "id": 7, "cwd": 1}), "bad_field", 7),
    ("unknown_type", p({"v": 1, "t": "frobnicate", "id": 7}), "unknown_type", 7),
    ("missing_t", p({"v": 1, "id": 7}), "bad_request", 7),
    ("t_int", p({"v": 1, "t": 3, "id": 7}), "bad_request", 7),
    ("missing_id", p({"v": 1, "t": "hello"}), "bad_request", None),
    ("id_float", p({"v": 1, "t": "hello", "id": 1.5}), "bad_request", None),
    ("id_negative", p({"v": 1, "t": "hello", "id": -1}), "bad_request", None),
    ("id_empty", p({"v": 1, "t": "hello", "id": ""}), "bad_request", None),
    ("id_65_bytes", p({"v": 1, "t": "hello", "id": "i" * 65}), "bad_request", None),
    ("id_bin", p({"v": 1, "t": "hello", "id": b"abc"}), "bad_request", None),
    ("id_nil", p({"v": 1, "t": "hello", "id": None}), "bad_request", None),
    ("missing_v", p({"t": "hello", "id": 7}), "version", 7),
    ("v_99", p({"v": 99, "t": "hello", "id": 7}), "version", 7),
    ("v_0", p({"v": 0, "t": "hello", "id": "x"}), "version", "x"),
    ("v_str", p({"v": "1", "t": "hello", "id": 7}), "version", 7),
    ("code_not_utf8", raw_map(*env(), (p("code"), b"\xa2\xff\xfe")), "bad_field", 7),
    ("code_surrogate_utf8", raw_map(*env(), (p("code"), b"\xa3\xed\xa0\x80")), "bad_field", 7),
    ("code_with_nul", p({"v": 1, "t": "execute", "id": 7, "code": "x = 1\x00"}), "bad_field", 7),
    # invalid UTF-8 in a name: both codes describe it (section 5 vs 8)
    ("ctx_not_utf8", raw_map(*env(), (p("code"), p("1")), (p("ctx"), b"\xa2\xc3\x28")),
     ("bad_name", "bad_field"), 7),
    ("two_frames", [p({"v": 1, "t": "hello", "id": 7}), p({"v": 1, "t": "hello", "id": 8})],
     "bad_frame", ...),
    ("three_frames_empty", [b"", b"", b""], "bad_frame", ...),
    ("depth_100", p({"v": 1, "t": "hello", "id": 7, "x": nested(100)}), "bad_frame", None),
    ("depth_40_arrays", p({"v": 1, "t": "hello", "id": 7, "x": nested_arrays(40)}),
     "bad_frame", None),
    ("duplicate_key", raw_map(*env("hello"), (p("v"), p(1))), "bad_frame", None),
    ("duplicate_id", raw_map((p("v"), p(1)), (p("t"), p("hello")), (p("id"), p(7)),
                             (p("id"), p(8))), "bad_frame", None),
    ("int_key", raw_map(*env("hello"), (p(1), p(2))), "bad_frame", None),
    ("bin_key", raw_map(*env("hello"), (b"\xc4\x01x", p(2))), "bad_frame", None),
    ("str32_4gb_length", raw_map(*env(), (p("code"), b"\xdb\xff\xff\xff\xffabc")),
     "bad_frame", None),
    ("bin32_4gb_length", raw_map(*env(), (p("x"), b"\xc6\xff\xff\xff\xffabc")),
     "bad_frame", None),
    ("array32_huge_count", raw_map(*env(), (p("x"), b"\xdd\xff\xff\xff\xff\x01\x02")),
     "bad_frame", None),
    ("map32_huge_count", b"\xdf\xff\xff\xff\xff" + p("v") + p(1), "bad_frame", None),
    ("ext_truncated", raw_map(*env(), (p("x"), b"\xc9\xff\xff\xff\xff\x01")), "bad_frame", None),
]


@pytest.mark.parametrize("name,data,code,re", CASES, ids=[c[0] for c in CASES])
def test_bad_message(daemon, client, name, data, code, re):
    client.send_raw(data)
    msg = recv_err(client)
    assert msg["t"] == "err", msg
    codes = code if isinstance(code, tuple) else (code,)
    assert msg["code"] in codes, f"{name}: expected {code}, got {msg!r}"
    assert isinstance(msg["message"], str) and msg["message"], msg
    if re is not ...:
        assert msg["re"] == re and type(msg["re"]) is type(re), msg
    # exactly one reply for one bad message
    extra = client._recv_one(0.15)
    assert extra is None, f"second reply to one bad message: {extra!r}"
    check_still_serving(daemon, client)


def test_version_error_lists_versions(client):
    client.send_raw(p({"v": 99, "t": "hello", "id": 5}))
    msg = recv_err(client)
    assert msg["code"] == "version" and msg["re"] == 5, msg
    assert "1" in msg["message"], msg


BAD_NAMES = ["a/b", "a\x00b", "..", "", "x" * 65, ".hidden", "-dash", "sp ace", "é",
             "../etc", "a\nb"]


@pytest.mark.parametrize("bad", BAD_NAMES, ids=[repr(b) for b in BAD_NAMES])
def test_bad_context_names(daemon, client, bad):
    client.err("execute", "bad_name", ctx=bad, code="1")
    client.err("ctx.create", "bad_name", name=bad)
    client.err("ctx.delete", "bad_name", ctx=bad)
    client.err("ctx.restart", "bad_name", ctx=bad)
    client.err("interrupt", "bad_name", ctx=bad)
    check_still_serving(daemon, client)


def test_oversized_message(daemon, client):
    big = p({"v": 1, "t": "execute", "id": 7, "code": "#" + "x" * (16 * MiB)})
    assert len(big) > 16 * MiB
    client.send_raw(big)
    msg = recv_err(client)
    assert msg["t"] == "err" and msg["code"] == "too_large", msg
    # the id is read from the message's first bytes: the request can end
    assert _key(msg["re"]) == _key(7), msg
    assert client._recv_one(0.3) is None
    check_still_serving(daemon, client)


@pytest.mark.parametrize("rid", ["req-big", 2**40])
def test_oversized_message_keeps_its_id(daemon, client, rid):
    # str or uint id, with the large field (bin or str) before or after it
    ids = [rid, rid + "-2" if isinstance(rid, str) else rid + 1]
    for i, fields in ((ids[0], {"v": 1, "t": "file.put", "id": ids[0], "path": "f",
                                "data": b"x" * (16 * MiB)}),
                      (ids[1], {"v": 1, "t": "execute", "id": ids[1],
                                "code": "#" + "x" * (16 * MiB)})):
        client.send_raw(p(fields))
        msg = recv_err(client)
        assert msg["code"] == "too_large" and _key(msg["re"]) == _key(i), msg
    # an id behind a container, or past the first pairs, is not looked for
    client.send_raw(p({"v": 1, "env": {"a": "b"}, "t": "execute", "id": 9,
                       "code": "#" + "x" * (16 * MiB)}))
    msg = recv_err(client)
    assert msg["code"] == "too_large" and msg["re"] is None, msg
    check_still_serving(daemon, client)


def test_oversized_garbage_frame(daemon, client):
    client.send_raw(b"\xc1" * (16 * MiB + 10))
    msg = recv_err(client)
    assert msg["t"] == "err" and msg["code"] == "too_large", msg
    check_still_serving(daemon, client)


def test_code_too_large(daemon, client):
    code = "#" + "x" * (8 * MiB)
    rid = client.submit(code)
    msg = client.collect(rid)
    assert len(msg) == 1 and msg[0]["t"] == "err" and msg[0]["code"] == "too_large", msg[0]
    check_still_serving(daemon, client)


def test_code_at_limit_runs(client):
    # exactly max_code_bytes is fine
    code = "x = 1  #" + "x" * (8 * MiB - 8)
    assert len(code.encode()) == 8 * MiB
    r = client.execute(code)
    assert r.status == "ok", r.done if r.terminal["t"] == "done" else r.terminal


def test_bad_messages_interleaved_with_run(daemon, client):
    # garbage while a run is in flight does not disturb the run
    rid = client.submit("import time\ntime.sleep(0.5)\nprint('through')")
    client.wait_event(rid, "accepted")
    for data in (b"\xc1", p([1]), p({"v": 1, "t": "nope", "id": "q"})):
        client.send_raw(data)
    got = []
    while len(got) < 3:
        m = client._recv_one(RECV_TIMEOUT)
        assert m is not None
        if m["t"] == "err":
            got.append(m["code"])
        else:
            client.buffered.setdefault(_key(m["re"]), []).append(m)
    assert sorted(got) == ["bad_frame", "bad_request", "unknown_type"]
    r = client.wait(rid)
    assert r.status == "ok" and r.stdout == b"through\n", r
    check_still_serving(daemon, client)


def test_unknown_fields_ignored(client):
    r = client.request("hello", future_field={"x": [1, 2]})
    assert r["t"] == "ok", r
    r = client.execute("3", extra="ignored", another=1.5)
    assert r.text == "3", r


def test_burst_of_garbage_from_many_clients(daemon):
    clients = [daemon.client() for _ in range(5)]
    for c in clients:
        for i in range(20):
            c.send_raw(bytes([0xc1, i]) * (i + 1))
    for c in clients:
        for i in range(20):
            m = recv_err(c)
            assert m["t"] == "err" and m["code"] == "bad_frame", m
    for c in clients:
        check_still_serving(daemon, c)
