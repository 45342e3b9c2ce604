"""Under a root daemon every confined (local, sandbox) context runs as a uid
of its own (ctxd --worker-uids): it must be able to pass through the
directories above the paths a test gives it. pytest makes tmp_path and its
parents 0700; this opens them for traversal only (0711: nobody lists them).
A directory a confined context must write gets `writable(path)`."""

import os
import tempfile
from pathlib import Path


def open_ancestors(path):
    base = Path(tempfile.gettempdir()).resolve()
    p = Path(path).resolve()
    while p != base and p != p.parent and base in p.parents:
        st = p.stat()
        if st.st_uid == os.getuid() and (st.st_mode & 0o011) != 0o011:
            os.chmod(p, (st.st_mode & 0o777) | 0o011)
        p = p.parent


def writable(path):
    """A directory any context's uid may write (as an operator would share
    one: here simply mode 0777)."""
    os.makedirs(path, exist_ok=True)
    os.chmod(path, 0o777)
    open_ancestors(path)
    return path
