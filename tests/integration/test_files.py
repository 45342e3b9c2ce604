"""file.put / file.get: chunked transfers confined to the context's directory."""

import hashlib
import os

CHUNK = 4 * 1024 * 1024


def put(client, ctx, path, data, chunk=CHUNK):
    off = 0
    while True:
        part = data[off:off + chunk]
        r = client.ok("file.put", ctx=ctx, path=path, data=part, offset=off)
        off += len(part)
        assert r["size"] == off
        if off >= len(data):
            return


def get(client, ctx, path):
    out, off = [], 0
    while True:
        r = client.ok("file.get", ctx=ctx, path=path, offset=off)
        out.append(r["data"])
        off += len(r["data"])
        if r["eof"]:
            assert r["size"] == off
            return b"".join(out)


def vm(pid, key):
    for line in open(f"/proc/{pid}/status"):
        if line.startswith(key + ":"):
            return int(line.split()[1]) * 1024
    raise KeyError(key)


def test_roundtrip_small_and_visible_to_code(client, tmp_path):
    d = tmp_path / "w"
    d.mkdir()
    client.ok("ctx.create", name="f", cwd=str(d))
    put(client, "f", "in.txt", b"hello\n")
    assert client.execute("open('in.txt').read()", ctx="f").text == "'hello\\n'"
    client.execute("import os\nos.makedirs('sub', exist_ok=True)\n"
                   "open('sub/out.bin', 'wb').write(bytes(range(256)) * 3)", ctx="f")
    assert get(client, "f", "sub/out.bin") == bytes(range(256)) * 3
    r = client.ok("file.get", ctx="f", path="sub/out.bin", offset=700, length=10)
    assert r["data"] == (bytes(range(256)) * 3)[700:710] and r["eof"] is False
    put(client, "f", "empty", b"")
    assert (d / "empty").read_bytes() == b""
    # a chunk out of order is refused
    client.err("file.put", "bad_field", ctx="f", path="in.txt", data=b"x", offset=99)


def test_escapes_refused(client, tmp_path):
    d = tmp_path / "w"
    d.mkdir()
    (tmp_path / "secret").write_text("s")
    os.symlink(tmp_path, d / "up")
    os.symlink(tmp_path / "secret", d / "link")
    client.ok("ctx.create", name="f", cwd=str(d))
    for path in ("../secret", "a/../../secret", "/etc/passwd", "up/secret", "link", "./x",
                 "a//b", ""):
        client.err("file.get", "bad_path", ctx="f", path=path)
    for path in ("../evil", "up/evil", "link"):
        client.err("file.put", "bad_path", ctx="f", path=path, data=b"x")
    assert not (tmp_path / "evil").exists()
    assert (tmp_path / "secret").read_text() == "s"
    os.mkfifo(d / "fifo")
    client.err("file.get", "bad_path", ctx="f", path="fifo")
    client.err("file.get", "not_found", ctx="f", path="missing")
    client.err("file.get", "unknown_context", ctx="nope", path="x")


def test_200mb_roundtrip_bounded_memory(daemon, client, tmp_path):
    d = tmp_path / "w"
    d.mkdir()
    client.ok("ctx.create", name="big", cwd=str(d))
    block = os.urandom(1 << 20)
    total = 200
    h = hashlib.sha256()
    off = 0
    for i in range(total // 4):
        part = bytes([i & 0xff]) + block * 4
        part = part[:CHUNK]
        client.ok("file.put", ctx="big", path="big.bin", data=part, offset=off)
        h.update(part)
        off += len(part)
    assert (d / "big.bin").stat().st_size == off == 200 * (1 << 20)
    h2 = hashlib.sha256()
    got, pos = 0, 0
    while True:
        r = client.ok("file.get", ctx="big", path="big.bin", offset=pos)
        h2.update(r["data"])
        pos += len(r["data"])
        if r["eof"]:
            break
    assert pos == off and h2.hexdigest() == h.hexdigest()
    peak = vm(daemon.proc.pid, "VmHWM")
    if not os.environ.get("CTXD_SANITIZED"):
        # (ASan keeps freed memory in quarantine, up to 256 MiB by default)
        assert peak < 64 * 1024 * 1024, f"daemon peak RSS {peak >> 20} MiB"
