"""ctx with rich output: images of results and display() saved to files."""

import base64
import os
import struct


def test_images_saved_and_paths_printed(daemon, tmp_path):
    out = tmp_path / "media"
    out.mkdir()
    png = b"\x89PNG\r\n\x1a\n" + struct.pack(">I", 13) + b"IHDR" + struct.pack(">II", 2, 3)
    code = (f"import base64\nclass P:\n    def _repr_png_(self):\n"
            f"        return base64.b64decode({base64.b64encode(png).decode()!r})\n"
            f"display(P())\nprint('text')\nP()")
    r = daemon.ctx("run", code, env={"CTX_OUTPUT_DIR": str(out)})
    lines = r.stdout.splitlines()
    assert lines[1] == "text", lines
    paths = [line.split(" saved to ")[1].rstrip("]") for line in lines
             if line.startswith("[image/png saved to ")]
    assert len(paths) == 2 and paths[0] != paths[1], lines
    for p in paths:
        assert os.path.dirname(p) == str(out)
        with open(p, "rb") as f:
            assert f.read() == png


def test_json_display_line(daemon):
    rc, evs = daemon.json("run", "display('x', display_id='d')")
    assert rc == 0
    d = [e for e in evs if e["t"] == "display"]
    assert d == [{"t": "display", "data": {"text/plain": "'x'"}, "display_id": "d"}]


def test_one_output_directory_per_user(daemon, tmp_path):
    """Without CTX_OUTPUT_DIR every run reuses $TMPDIR/ctx-UID (mode 0700),
    instead of a new directory per run."""
    tmp = tmp_path / "tmp"
    tmp.mkdir()
    code = "import matplotlib.pyplot as plt; plt.plot([1, 2]); plt.show()"
    dirs = set()
    for _ in range(3):
        r = daemon.ctx("run", code, env={"TMPDIR": str(tmp), "CTX_OUTPUT_DIR": ""})
        [line] = [x for x in r.stdout.splitlines() if x.startswith("[image/png saved to ")]
        dirs.add(os.path.dirname(line.split(" saved to ")[1].rstrip("]")))
    assert dirs == {str(tmp / f"ctx-{os.getuid()}")}
    assert os.listdir(tmp) == [f"ctx-{os.getuid()}"]
    assert len(os.listdir(tmp / f"ctx-{os.getuid()}")) == 3
    assert oct(os.stat(tmp / f"ctx-{os.getuid()}").st_mode & 0o777) == "0o700"
    # a directory of that name that is not private is not used
    os.chmod(tmp / f"ctx-{os.getuid()}", 0o755)
    r = daemon.ctx("run", code, env={"TMPDIR": str(tmp), "CTX_OUTPUT_DIR": ""})
    assert "[image/png: could not be saved]" in r.stdout
