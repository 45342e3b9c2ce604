#!/usr/bin/python3
"""Writes the golden vectors: each good vector is one protocol message packed by
Python's msgpack (use_bin_type=True) with keys in PROTOCOL.md's order; each bad
vector is a byte string the daemon must refuse with the named error code.
vectors.json describes both (bin values as {"$bin": hex}). The C unit test
(tests/unit/test_proto.c) rebuilds every good vector with proto_put_* and
compares byte for byte, and decodes every bad one expecting its code."""
import json, os, struct, msgpack

HERE = os.path.dirname(os.path.abspath(__file__))

GOOD = {
    "hello": {"v": 1, "t": "hello", "id": 1},
    "execute": {"v": 1, "t": "execute", "id": "req-42", "ctx": "default",
                "code": "x = 1\nprint(x)", "timeout": 2.5, "env": {"A": "1"},
                "silent": False, "stop_on_error": True},
    "accepted": {"v": 1, "t": "accepted", "re": "req-42", "ctx": "default",
                 "execution_count": 3, "incarnation": 1},
    "stream": {"v": 1, "t": "stream", "re": "req-42", "name": "stdout",
               "data": b"hello\n\x00\xff"},
    "result": {"v": 1, "t": "result", "re": 7, "execution_count": 300,
               "data": {"text/plain": "'é'" * 20}},
    "error": {"v": 1, "t": "error", "re": 7, "ename": "ZeroDivisionError",
              "evalue": "division by zero",
              "traceback": ["Traceback (most recent call last):",
                            '  File "<cell-1>", line 1, in <module>',
                            "ZeroDivisionError: division by zero"]},
    "done": {"v": 1, "t": "done", "re": 70000, "status": "timeout",
             "execution_count": 65536, "incarnation": 2, "duration": 1.25,
             "cpu_time": 0.0, "truncated": False, "state_lost": True,
             "cause": "killed after timeout: did not stop within the 2 s grace period"},
    "err": {"v": 1, "t": "err", "re": None, "code": "bad_frame",
            "message": "malformed msgpack: truncated"},
    "ctx_list_ok": {"v": 1, "t": "ok", "re": 2**40, "contexts": [
        {"name": "exp-1", "cwd": "/tmp", "state": "idle", "pid": 1234,
         "incarnation": 1, "created": 1764489600.5, "execution_count": 0,
         "queued": 0}]},
    "complete": {"v": 1, "t": "complete", "id": 9, "ctx": "default",
                 "code": "import os\nos.pa", "cursor": 15},
    "complete_ok": {"v": 1, "t": "ok", "re": 9, "matches": ["os.pardir", "os.path"],
                    "cursor_start": 10, "cursor_end": 15, "metadata": {}},
    "ints": {"v": 1, "t": "x", "id": 5, "a": [0, 127, 128, 255, 256, 65535, 65536,
                                          2**32 - 1, 2**32, 2**64 - 1, -1, -32, -33,
                                          -128, -129, -32768, -32769, -2**31,
                                          -2**31 - 1, -2**63]},
    "long_str": {"v": 1, "t": "x", "id": 6, "s31": "a" * 31, "s32": "b" * 32,
                 "s256": "c" * 256, "s65536": "d" * 65536, "b300": b"\x01" * 300,
                 "arr16": list(range(16)), "nil": None, "bool": True},
}

BAD = {
    "garbage": (b"\xc1\xc1\xc1", "bad_frame"),
    "truncated_map": (msgpack.packb({"v": 1, "t": "hello", "id": 1})[:-1], "bad_frame"),
    "trailing": (msgpack.packb({"v": 1, "t": "hello", "id": 1}) + b"\x00", "bad_frame"),
    "array_root": (msgpack.packb([1, 2, 3]), "bad_request"),
    "no_version": (msgpack.packb({"t": "hello", "id": 1}), "version"),
    "wrong_version": (msgpack.packb({"v": 99, "t": "hello", "id": 1}), "version"),
    "no_id": (msgpack.packb({"v": 1, "t": "hello"}), "bad_request"),
    "id_too_long": (msgpack.packb({"v": 1, "t": "hello", "id": "x" * 65}), "bad_request"),
    "type_not_str": (msgpack.packb({"v": 1, "t": 5, "id": 1}), "bad_request"),
    "code_int": (msgpack.packb({"v": 1, "t": "execute", "id": 1, "code": 5}), "bad_field"),
    "code_missing": (msgpack.packb({"v": 1, "t": "execute", "id": 1}), "bad_field"),
    "timeout_str": (msgpack.packb({"v": 1, "t": "execute", "id": 1, "code": "1",
                                   "timeout": "5"}), "bad_field"),
    "ctx_bin": (msgpack.packb({"v": 1, "t": "execute", "id": 1, "code": "1",
                               "ctx": b"default"}, use_bin_type=True), "bad_field"),
    "ctx_slash": (msgpack.packb({"v": 1, "t": "execute", "id": 1, "code": "1",
                                 "ctx": "a/b"}), "bad_name"),
    "ctx_nul": (msgpack.packb({"v": 1, "t": "execute", "id": 1, "code": "1",
                               "ctx": "a\x00b"}), "bad_name"),
    "ctx_dotdot": (msgpack.packb({"v": 1, "t": "execute", "id": 1, "code": "1",
                                  "ctx": ".."}), "bad_name"),
    "ctx_long": (msgpack.packb({"v": 1, "t": "execute", "id": 1, "code": "1",
                                "ctx": "a" * 65}), "bad_name"),
    "code_not_utf8": (b"\x84\xa1v\x01\xa1t\xa7execute\xa2id\x01\xa4code\xa2\xff\xfe",
                      "bad_field"),
    "env_not_strmap": (msgpack.packb({"v": 1, "t": "execute", "id": 1, "code": "1",
                                      "env": {"A": 1}}), "bad_field"),
    "dup_keys": (b"\x84\xa1v\x01\xa1t\xa5hello\xa2id\x01\xa1v\x01", "bad_frame"),
    "int_key": (b"\x83\xa1v\x01\xa1t\xa5hello\x01\x01", "bad_frame"),
    "deep": (b"\x81\xa1a" * 100 + b"\xc0", "bad_frame"),
    "str_4g": (b"\x83\xa1v\x01\xa1t\xa5hello\xa2id\xdb\xff\xff\xff\xff", "bad_frame"),
    "array_4g": (b"\x83\xa1v\x01\xa1t\xa5hello\xa2id\xdd\xff\xff\xff\xff\x00", "bad_frame"),
    "empty": (b"", "bad_frame"),
    "cursor_negative": (msgpack.packb({"v": 1, "t": "complete", "id": 1, "code": "x",
                                       "cursor": -1}), "bad_field"),
}


def jsonable(o):
    if isinstance(o, bytes):
        return {"$bin": o.hex()}
    if isinstance(o, dict):
        return {k: jsonable(v) for k, v in o.items()}
    if isinstance(o, list):
        return [jsonable(v) for v in o]
    return o


def main():
    desc = {"good": {}, "bad": {}}
    for name, obj in GOOD.items():
        with open(os.path.join(HERE, name + ".msgpack"), "wb") as f:
            f.write(msgpack.packb(obj, use_bin_type=True))
        desc["good"][name] = jsonable(obj)
    for name, (raw, code) in BAD.items():
        with open(os.path.join(HERE, "bad", name + ".msgpack"), "wb") as f:
            f.write(raw)
        desc["bad"][name] = code
    with open(os.path.join(HERE, "vectors.json"), "w") as f:
        json.dump(desc, f, indent=1, ensure_ascii=False, sort_keys=False)
        f.write("\n")


if __name__ == "__main__":
    main()
