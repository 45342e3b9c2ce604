# wrk_snap: a context's Python state to and from a snapshot file
# (PROTOCOL.md, ctx.snapshot). Embedded in ctxd-worker as a private module
# (wrk_snap.c); the supervisor hands it an open descriptor, never a path:
# to write, the write end of a pipe it copies into the file (counting),
# carrying records (u64 length, then the bytes; or u64 with bit 63 set:
# go back to that offset); to read, the file, of which the first
# `max_bytes` are the worker's (the supervisor's tag follows).
#
# File layout (all integers little-endian):
#   MAGIC (8) | u32 n | header: n bytes of JSON (format, Python, packages,
#   modules, cwd, env, execution count, the context's tier and policy...)
#   | the pickle stream (protocol 5; dill, so functions and classes made in
#   the context are saved by value) | the out-of-band buffers, raw, in order
#   | trailer: u64 pickle offset, u64 pickle length, u32 pickle crc32,
#   u32 header crc32, u64 buffer count, u64 length of each buffer, u64
#   trailer length, END.
# The header is JSON, so a foreign or corrupt file is refused before any
# unpickling runs; the unpickling itself runs inside the context's worker
# (and so inside its tier's confinement), into a new dict: the context's
# globals are replaced only when all of it loaded.
import io
import json
import os
import struct
import sys
import types
import zlib

MAGIC = b'CTXDSNP\x01'
END = b'CTXDEND\x01'
FORMAT = 1
_HEADER_MAX = 16 << 20
_TRAILER_FIXED = 8 + 8 + 4 + 4 + 8
_BUFFERS_MAX = 1 << 20
_TAG = 128  # SUP_SNAPMAC_TAG: the supervisor's tag at the file's end

# Objects saved by value would be a lie (a copy of a socket is no open
# connection, a thread does not run again): listed as unsaved, with why.
def _reason(v):
    import socket
    import threading
    if isinstance(v, socket.socket):
        return 'an open socket'
    if isinstance(v, threading.Thread):
        return 'a thread'
    if isinstance(v, (types.GeneratorType, types.AsyncGeneratorType)):
        return 'a generator'
    if isinstance(v, types.CoroutineType):
        return 'a coroutine'
    if isinstance(v, types.FrameType):
        return 'a frame'
    if isinstance(v, io.IOBase) and not getattr(v, 'closed', True):
        return 'an open file'
    return None


class SnapError(Exception):
    """A snapshot that cannot be written or read: code and message."""

    def __init__(self, code, message, needed=0):
        super().__init__(message)
        self.code = code
        self.needed = needed


_RESET = 1 << 63


def _write_all(fd, parts):
    """os.writev of parts (bytes-like) until all of it went out."""
    views = [memoryview(p).cast('B') for p in parts]
    while views:
        k = os.writev(fd, views)
        while views and k >= len(views[0]):
            k -= len(views[0])
            views.pop(0)
        if views and k:
            views[0] = views[0][k:]


class _Sink:
    """Writes records to the supervisor's pipe, counting; past max it only
    counts (the size the snapshot would need is still learnt)."""

    def __init__(self, fd, limit):
        self.fd = fd
        self.limit = limit
        self.n = 0
        self.crc = None

    def write(self, b):
        m = len(b) if not isinstance(b, memoryview) else b.nbytes
        if self.crc is not None:
            self.crc = zlib.crc32(b, self.crc)
        if self.fd >= 0 and self.n + m <= self.limit and m:
            _write_all(self.fd, [struct.pack('<Q', m), b])
        self.n += m
        return m

    def reset(self, off):
        """The file goes back to off (written already)."""
        if self.fd >= 0 and off <= self.limit:
            _write_all(self.fd, [struct.pack('<Q', _RESET | off)])
        self.n = off


def _user_names(g):
    for k in list(g):
        if not (k.startswith('__') and k.endswith('__')):
            yield k


def _top_modules(names):
    out = {}
    for n in sorted(names):
        top = n.split('.')[0]
        if top in out or top in sys.builtin_module_names or top == '__main__':
            continue
        m = sys.modules.get(top)
        if m is None:
            continue
        out[top] = str(getattr(m, '__version__', ''))
    return out


def _classes_of(values, limit=100000):
    """Module names of the objects' types, one level into containers (for
    the package fingerprint)."""
    mods = set()
    stack = list(values)
    seen = 0
    while stack and seen < limit:
        v = stack.pop()
        seen += 1
        mods.add(type(v).__module__ or '')
        if isinstance(v, (list, tuple, set, frozenset)) and len(v) < 1000:
            stack.extend(v)
        elif isinstance(v, dict) and len(v) < 1000:
            stack.extend(v.values())
    return mods


_pickler_class = None


def _by_value(obj):
    """Whether obj is a function or class that only exists in this context
    (made by its code, a lambda, a nested one), so it must be saved by
    value (dill), not by reference to a module."""
    mod = getattr(obj, '__module__', None)
    qual = getattr(obj, '__qualname__', '') or ''
    if mod in (None, '__main__') or '<' in qual:
        return True
    m = sys.modules.get(mod)
    return m is None or getattr(m, qual.split('.')[0], None) is None


def _pickler(sink, buffers):
    """CPython's pickler (fast: most state is data) with protocol 5, so
    numpy arrays go out of band (their memory is written to the file as it
    is, never copied into the stream); functions and classes that exist
    only in the context go through dill, by value, and their globals are
    the context's own (restored, they see later changes to it)."""
    global _pickler_class
    if _pickler_class is None:
        import pickle

        import dill

        class Pickler(pickle.Pickler):
            # Rebuilt by dill.loads, which pickles by reference (this
            # module is private: nothing in it could be found again).
            def reducer_override(self, obj):
                if isinstance(obj, (types.FunctionType, type)) and _by_value(obj):
                    return dill.loads, (dill.dumps(obj, protocol=5, byref=False, recurse=False),)
                return NotImplemented

        _pickler_class = Pickler
    return _pickler_class(sink, protocol=5, buffer_callback=buffers.append)


def _dump(sink, state):
    buffers = []
    _pickler(sink, buffers).dump(state)
    return buffers


def save(fd, g, meta, limit):
    """Writes g's state to fd (positioned at 0); returns (size, unsaved)."""
    unsaved = []
    state = {}
    modules = {}
    for k in _user_names(g):
        v = g[k]
        if isinstance(v, types.ModuleType):
            modules[k] = v.__name__
            continue
        why = _reason(v)
        if why:
            unsaved.append({'name': k, 'reason': why})
            continue
        state[k] = v
    header = dict(meta)
    if isinstance(header.get('info'), bytes):
        import base64
        header['info'] = base64.b64encode(header['info']).decode()
    header.update({
        'format': FORMAT,
        'python': '%d.%d' % sys.version_info[:2],
        'implementation': sys.implementation.name,
        'byteorder': sys.byteorder,
        'packages': _top_modules(set(modules.values()) | _classes_of(state.values())),
        'modules': modules,
        'cwd': os.getcwd(),
        'env': dict(os.environ),
    })
    raw = json.dumps(header, sort_keys=True, default=str).encode()
    if len(raw) > _HEADER_MAX:
        raise SnapError('too_large', 'the snapshot header would be %d bytes' % len(raw))
    sink = _Sink(fd, limit)
    sink.write(MAGIC + struct.pack('<I', len(raw)) + raw)
    start = sink.n
    sink.crc = 0
    try:
        buffers = _dump(sink, state)
    except KeyboardInterrupt:
        raise
    except OSError:
        raise
    except BaseException:
        # Which globals fail, one by one: they are left out and listed,
        # and the stream is written again without them.
        for k in list(state):
            try:
                _dump(_Sink(-1, 0), {k: state[k]})
            except KeyboardInterrupt:
                raise
            except BaseException as e:
                unsaved.append({'name': k, 'reason': '%s: %s' % (type(e).__name__, e)})
                del state[k]
        sink.reset(start)
        sink.crc = 0
        buffers = _dump(sink, state)
    plen, crc = sink.n - start, sink.crc & 0xffffffff
    sink.crc = None
    lens = []
    for b in buffers:
        m = b.raw()
        lens.append(m.nbytes)
        sink.write(m)
        m.release()
    trailer = struct.pack('<QQIIQ', start, plen, crc, zlib.crc32(raw), len(lens))
    trailer += struct.pack('<%dQ' % len(lens), *lens)
    trailer += struct.pack('<Q', len(trailer) + 8 + len(END)) + END
    sink.write(trailer)
    if sink.n > limit:
        # The file is the supervisor's tag longer (sup_snapmac.h), which the
        # cap given here left out.
        need, cap = sink.n + _TAG, limit + _TAG
        raise SnapError('too_large', 'the snapshot would need %d bytes; the cap is %d bytes'
                        % (need, cap), need)
    return sink.n, unsaved


def _alloc(n):
    """Writable memory for n bytes. A fresh page's fault is most of what a
    restore costs: numpy's allocator (private anonymous memory) takes them
    fastest here; a private anonymous map without numpy."""
    if n < (4 << 20):
        return bytearray(n)
    try:
        import numpy
        return numpy.empty(n, dtype=numpy.uint8)
    except ImportError:
        import mmap
        return mmap.mmap(-1, n, flags=mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS)


def _read_exact(fd, off, n):
    out = _alloc(n)
    view = memoryview(out).cast('B')
    got = 0
    while got < n:
        k = os.preadv(fd, [view[got:]], off + got)
        if k <= 0:
            raise SnapError('bad_snapshot', 'the snapshot file is truncated')
        got += k
    return out


def _check_header(h):
    if h.get('format') != FORMAT:
        raise SnapError('bad_snapshot', 'snapshot format %r is not the format %d this daemon '
                        'reads' % (h.get('format'), FORMAT))
    mine = '%d.%d' % sys.version_info[:2]
    if h.get('python') != mine or h.get('implementation') != sys.implementation.name \
            or h.get('byteorder') != sys.byteorder:
        raise SnapError('bad_snapshot', 'the snapshot was made by %s %s (%s-endian); this '
                        'context runs %s %s' % (h.get('implementation'), h.get('python'),
                                                h.get('byteorder'), sys.implementation.name, mine))
    import importlib
    wrong = []
    for name, version in sorted((h.get('packages') or {}).items()):
        try:
            m = importlib.import_module(name)
        except BaseException:
            wrong.append('%s %s is not installed' % (name, version or ''))
            continue
        have = str(getattr(m, '__version__', ''))
        if have != version:
            wrong.append('%s is %s here, %s in the snapshot' % (name, have or '?', version or '?'))
    if wrong:
        raise SnapError('bad_snapshot', 'the snapshot needs other packages: ' + '; '.join(wrong))


def read_header(fd, size=None):
    """The header of the snapshot on fd (its first size bytes), checked;
    SnapError otherwise."""
    if not size:
        size = os.fstat(fd).st_size
    head = _read_exact(fd, 0, 12) if size >= 12 else b''
    if bytes(head[:8]) != MAGIC:
        raise SnapError('bad_snapshot', 'not a ctxd snapshot (bad magic)')
    (n,) = struct.unpack('<I', head[8:12])
    if n > _HEADER_MAX or 12 + n > size:
        raise SnapError('bad_snapshot', 'the snapshot header is corrupt')
    try:
        h = json.loads(bytes(_read_exact(fd, 12, n)))
    except ValueError:
        raise SnapError('bad_snapshot', 'the snapshot header is corrupt') from None
    if not isinstance(h, dict):
        raise SnapError('bad_snapshot', 'the snapshot header is corrupt')
    _check_header(h)
    return h, 12 + n, size


def load(fd, g, size=None):
    """Replaces g's state with the snapshot's (the first size bytes of
    fd); returns (header, names restored, notes). Nothing in g changes
    unless it all loaded."""
    h, body, size = read_header(fd, size)
    tail = len(END) + 8
    if size < body + _TRAILER_FIXED + tail:
        raise SnapError('bad_snapshot', 'the snapshot file is truncated')
    end = _read_exact(fd, size - tail, tail)
    (tlen,) = struct.unpack('<Q', end[:8])
    if bytes(end[8:]) != END or tlen > size - body or tlen < _TRAILER_FIXED + tail:
        raise SnapError('bad_snapshot', 'the snapshot file is truncated or corrupt (no trailer)')
    t = _read_exact(fd, size - tlen, tlen - tail)
    start, plen, crc, hcrc, nbuf = struct.unpack('<QQIIQ', t[:_TRAILER_FIXED])
    if nbuf > _BUFFERS_MAX or len(t) != _TRAILER_FIXED + 8 * nbuf:
        raise SnapError('bad_snapshot', 'the snapshot trailer is corrupt')
    lens = struct.unpack('<%dQ' % nbuf, t[_TRAILER_FIXED:])
    if start != body or start + plen + sum(lens) != size - tlen:
        raise SnapError('bad_snapshot', 'the snapshot file is corrupt (sizes do not add up)')
    if zlib.crc32(_read_exact(fd, 12, start - 12)) != hcrc:
        raise SnapError('bad_snapshot', 'the snapshot file is corrupt (header checksum mismatch)')
    stream = _read_exact(fd, start, plen)
    if zlib.crc32(stream) & 0xffffffff != crc:
        raise SnapError('bad_snapshot', 'the snapshot file is corrupt (checksum mismatch)')
    buffers = []
    off = start + plen
    for n in lens:
        buffers.append(_read_exact(fd, off, n))
        off += n
    import pickle
    try:
        state = pickle.Unpickler(io.BytesIO(stream), buffers=buffers).load()
    except KeyboardInterrupt:
        raise
    except BaseException as e:
        raise SnapError('bad_snapshot', 'the snapshot cannot be loaded: %s: %s'
                        % (type(e).__name__, e)) from None
    if not isinstance(state, dict):
        raise SnapError('bad_snapshot', 'the snapshot holds no globals')
    import importlib
    notes = []
    mods = {}
    for k, name in (h.get('modules') or {}).items():
        try:
            mods[k] = importlib.import_module(str(name))
        except KeyboardInterrupt:
            raise
        except BaseException as e:
            notes.append({'name': str(k), 'reason': 'import %s: %s: %s'
                          % (name, type(e).__name__, e)})
    for k in list(_user_names(g)):
        del g[k]
    g.update(mods)
    g.update(state)
    cwd = h.get('cwd')
    if isinstance(cwd, str):
        try:
            os.chdir(cwd)
        except OSError as e:
            notes.append({'name': '<cwd>', 'reason': 'cannot enter %s: %s' % (cwd, e.strerror)})
    env = h.get('env')
    if isinstance(env, dict):
        for k, v in env.items():
            if isinstance(k, str) and isinstance(v, str) and not k.startswith('CTXD_') \
                    and os.environ.get(k) != v:
                try:
                    os.environ[k] = v
                except (ValueError, OSError):
                    pass
    return h, sorted(state) + sorted(mods), notes


def _capped(items, n=1000, width=300):
    """The answer's list: at most n items, reasons cut to width characters
    (the frame is bounded)."""
    return [{'name': str(i['name'])[:width], 'reason': str(i['reason'])[:width]}
            for i in items[:n]]


def snapshot(fd, g, meta, limit):
    """The worker's `snapshot` frame: the answer's data."""
    try:
        size, unsaved = save(fd, g, meta, limit)
        return {'ok': True, 'size': size, 'unsaved': _capped(unsaved)}
    except SnapError as e:
        return {'ok': False, 'code': e.code, 'message': str(e), 'needed': e.needed}
    except KeyboardInterrupt:
        return {'ok': False, 'code': 'interrupted', 'message': 'the snapshot was interrupted'}
    except OSError as e:
        return {'ok': False, 'code': 'io', 'message': 'writing the snapshot: %s' % e}
    except BaseException as e:
        return {'ok': False, 'code': 'internal', 'message': '%s: %s' % (type(e).__name__, e)}


def restore(fd, g, size=0):
    """The worker's `restore` frame: the answer's data."""
    try:
        h, names, notes = load(fd, g, size)
        count = h.get('execution_count')
        return {'ok': True, 'restored': len(names), 'unsaved': _capped(notes),
                'execution_count': count if isinstance(count, int) and count >= 0 else 0}
    except SnapError as e:
        return {'ok': False, 'code': e.code, 'message': str(e)}
    except KeyboardInterrupt:
        return {'ok': False, 'code': 'interrupted', 'message': 'the restore was interrupted'}
    except MemoryError:
        return {'ok': False, 'code': 'io', 'message': 'out of memory reading the snapshot'}
    except OSError as e:
        return {'ok': False, 'code': 'io', 'message': 'reading the snapshot: %s' % e}
    except BaseException as e:
        return {'ok': False, 'code': 'bad_snapshot', 'message': '%s: %s' % (type(e).__name__, e)}
