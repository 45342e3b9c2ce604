# wrk_ipy: IPython syntax for a run (PROTOCOL.md, execute `syntax`).
#
# Embedded in ctxd-worker as the private module _ctxd_ipython (wrk_ipy.c;
# the build turns this file into a C string). With IPython importable, a
# cell goes through IPython's own machinery: an InteractiveShell on the
# context's globals transforms it (transform_cell: common indentation,
# `!cmd`, `x = !cmd`, `%magic`, `%%magic`, `obj?`) and runs its magics; the
# worker then executes the transformed source as any other run. Without
# IPython (or with CTXD_IPYTHON=0 in the context's environment), a built-in
# subset of the same syntax and magics; any other magic raises UsageError
# naming it.

import os
import re
import sys

_shell = None
_have = None
# The worker's `%pip install` (set by wrk_ipy.c): (list of requirements) ->
# "" once importable, else the daemon's message; None: it cannot ask.
_pip_install = None


class UsageError(Exception):
    """A magic used wrongly or unknown (IPython's own class when present)."""


def have_ipython():
    global _have
    if _have is None:
        _have = False
        if os.environ.get('CTXD_IPYTHON', '1') != '0':
            try:
                import IPython.core.interactiveshell  # noqa: F401
                _have = True
            except Exception:
                pass
    return _have


def usage_error_types():
    if have_ipython():
        from IPython.core.error import UsageError as E
        return (UsageError, E)
    return (UsageError,)


# ---- the shell -------------------------------------------------------------

def shell(g):
    """The context's shell, made on first use, on the run's globals."""
    global _shell
    if _shell is not None:
        return _shell
    if have_ipython():
        _shell = _make_ipython_shell(g)
    else:
        _shell = MiniShell(g)
    return _shell


def _make_ipython_shell(g):
    from traitlets.config import Config
    from IPython.core.interactiveshell import InteractiveShell
    c = Config()
    c.HistoryManager.hist_file = ':memory:'
    c.InteractiveShell.colors = 'NoColor'
    main = sys.modules.get('__main__')
    saved_hook = sys.displayhook, sys.excepthook
    if main is not None and main.__dict__ is g:
        sh = InteractiveShell.instance(config=c, user_module=main)
    else:
        sh = InteractiveShell.instance(config=c, user_ns=g)
    sys.displayhook, sys.excepthook = saved_hook

    def matplotlib(line=''):
        """%matplotlib: figures already arrive as images; a no-op."""
        return None

    def pip(line=''):
        """%pip install REQ...: ctxd's package install for this context."""
        return _pip_magic(line)

    sh.register_magic_function(matplotlib, 'line', 'matplotlib')
    sh.register_magic_function(pip, 'line', 'pip')

    def show_in_pager(self, data, start=0, screen_lines=0):
        if isinstance(data, dict):
            data = data.get('text/plain', '')
        sys.stdout.write(str(data) + ('' if str(data).endswith('\n') else '\n'))

    sh.set_hook('show_in_pager', show_in_pager)
    return sh


def _pip_magic(line):
    words = line.split()
    if not words or words[0] != 'install':
        raise usage_error_types()[-1]('%pip: only `%pip install REQUIREMENT...` is supported')
    reqs = [w for w in words[1:] if w not in ('-q', '--quiet', '-U', '--upgrade')]
    bad = [w for w in reqs if w.startswith('-')]
    if bad or not reqs:
        raise usage_error_types()[-1](
            '%%pip install: give requirements only (no pip options): %s' % ' '.join(bad or words))
    if _pip_install is None:
        raise usage_error_types()[-1](
            '%pip install: this worker cannot ask the daemon to install packages')
    failed = _pip_install(reqs)
    if failed:
        raise PipInstallError(failed)
    import importlib
    importlib.invalidate_caches()  # new entries in the context's package directory
    print('Installed into this context: ' + ', '.join(reqs))


class PipInstallError(Exception):
    """%pip install failed: the daemon's message (pip's own lines)."""


# ---- a run -----------------------------------------------------------------

def transform(code, g):
    """The cell as Python source (line numbers kept where IPython keeps
    them: a cell magic becomes one line)."""
    return shell(g).transform_cell(code)


def begin(code, silent):
    """Shell events before a run (autoreload reloads here)."""
    sh = _shell
    if sh is None or isinstance(sh, MiniShell):
        return
    from IPython.core.interactiveshell import ExecutionInfo
    try:
        info = ExecutionInfo(code, not silent, silent, True, None)
    except TypeError:  # IPython before 8 has no cell_id
        info = ExecutionInfo(code, not silent, silent, True)
    sh.events.trigger('pre_execute')
    if not silent:
        sh.events.trigger('pre_run_cell', info)


def end(silent, error):
    """Shell events after a run."""
    sh = _shell
    if sh is None or isinstance(sh, MiniShell):
        return
    from IPython.core.interactiveshell import ExecutionResult
    sh.events.trigger('post_execute')
    if not silent:
        res = ExecutionResult(None)
        res.error_in_exec = error
        sh.events.trigger('post_run_cell', res)


def pretty(value):
    """text/plain as Jupyter shows it: IPython's pretty printer."""
    if have_ipython():
        from IPython.lib.pretty import pretty as p
        return p(value)
    return repr(value)


# ---- the built-in subset (no IPython) --------------------------------------

_ASSIGN = r'(?P<lhs>(?:[A-Za-z_][\w.]*\s*,\s*)*[A-Za-z_][\w.]*\s*=\s*)?'
_SHELL_LINE = re.compile(r'^(?P<ind>\s*)' + _ASSIGN + r'!(?P<cmd>.*)$')
_MAGIC_LINE = re.compile(r'^(?P<ind>\s*)' + _ASSIGN + r'%(?P<name>\w+)(?P<args>.*)$')
_HELP_LINE = re.compile(r'^(?P<ind>\s*)(?P<pre>\?*)(?P<obj>[A-Za-z_][\w.]*)(?P<post>\?*)\s*$')


def _dedent(code):
    lines = code.split('\n')
    body = [ln for ln in lines if ln.strip()]
    if not body:
        return code
    ind = min(len(ln) - len(ln.lstrip(' \t')) for ln in body)
    return '\n'.join(ln[ind:] if ln.strip() else ln.lstrip(' \t') for ln in lines)


class MiniShell:
    """get_ipython() without IPython: the magics ctxd documents."""

    def __init__(self, g):
        self.user_ns = g
        self._hidden = set(g)
        g['get_ipython'] = lambda: self
        self._hidden.add('get_ipython')

    # -- transformation --
    def transform_cell(self, code):
        code = _dedent(code)
        if code.lstrip('\n').startswith('%%'):
            first, _, body = code.lstrip('\n').partition('\n')
            name, _, args = first[2:].partition(' ')
            return 'get_ipython().run_cell_magic(%r, %r, %r)\n' % (name, args.strip(), body)
        out = []
        for line in code.split('\n'):
            m = _SHELL_LINE.match(line)
            if m:
                cmd = m.group('cmd')
                if m.group('lhs'):
                    line = '%s%sget_ipython().getoutput(%r)' % (m.group('ind'), m.group('lhs'),
                                                                cmd)
                else:
                    line = '%sget_ipython().system(%r)' % (m.group('ind'), cmd)
            elif _MAGIC_LINE.match(line):
                m = _MAGIC_LINE.match(line)
                line = '%s%sget_ipython().run_line_magic(%r, %r)' % (
                    m.group('ind'), m.group('lhs') or '', m.group('name'),
                    m.group('args').strip())
            else:
                m = _HELP_LINE.match(line)
                if m and (m.group('pre') or m.group('post')):
                    q = m.group('pre') + m.group('post')
                    line = '%sget_ipython().run_line_magic(%r, %r)' % (
                        m.group('ind'), 'pinfo2' if '??' in q else 'pinfo', m.group('obj'))
            out.append(line)
        return '\n'.join(out)

    # -- entry points the transformed code calls --
    def _expand(self, cmd):
        import string

        class Ns(dict):
            def __missing__(s, k):
                raise KeyError(k)
        try:
            return string.Formatter().vformat(cmd, (), Ns(self.user_ns))
        except Exception:
            return cmd

    def system(self, cmd):
        import subprocess
        sys.stdout.flush()
        sys.stderr.flush()
        p = subprocess.run(self._expand(cmd), shell=True, executable='/bin/sh')
        self.user_ns['_exit_code'] = p.returncode

    def getoutput(self, cmd):
        import subprocess
        p = subprocess.run(self._expand(cmd), shell=True, executable='/bin/sh',
                           stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
        return p.stdout.decode('utf-8', 'replace').splitlines()

    def run_line_magic(self, name, line):
        f = getattr(self, 'line_' + name, None)
        if f is None:
            raise UsageError('Line magic function `%%%s` not found (ctxd without IPython '
                             'knows: %s).' % (name, ', '.join(
                                 '%' + n[5:] for n in sorted(dir(self)) if n.startswith('line_'))))
        return f(line)

    def run_cell_magic(self, name, line, cell):
        f = getattr(self, 'cell_' + name, None)
        if f is None:
            raise UsageError('Cell magic `%%%%%s` not found (ctxd without IPython knows: %s).' % (
                name, ', '.join('%%' + n[5:] for n in sorted(dir(self)) if n.startswith('cell_'))))
        return f(line, cell)

    # -- magics --
    def line_matplotlib(self, line):
        return None

    def line_pip(self, line):
        return _pip_magic(line)

    def line_cd(self, line):
        path = os.path.expanduser(line.strip().strip('\'"') or '~')
        os.chdir(path)
        print(os.getcwd())

    def line_pwd(self, line):
        return os.getcwd()

    def line_env(self, line):
        line = line.strip()
        if not line:
            return dict(os.environ)
        m = re.match(r'^(\w+)\s*[= ]\s*(.*)$', line)
        if m:
            os.environ[m.group(1)] = m.group(2)
            print('env: %s=%s' % (m.group(1), m.group(2)))
            return None
        return os.environ.get(line)

    def line_who(self, line):
        names = sorted(k for k in self.user_ns if not k.startswith('_') and k not in self._hidden)
        print('\t'.join(names) if names else 'Interactive namespace is empty.')

    def _timed(self, src):
        import time
        t0, c0 = time.perf_counter(), time.process_time()
        import ast
        tree = ast.parse(src)
        last = None
        if tree.body and isinstance(tree.body[-1], ast.Expr):
            last = ast.Expression(tree.body.pop().value)
        exec(compile(tree, '<timed>', 'exec'), self.user_ns)
        value = eval(compile(last, '<timed>', 'eval'), self.user_ns) if last else None
        cpu, wall = time.process_time() - c0, time.perf_counter() - t0
        print('CPU times: user %s, sys: 0 ns, total: %s' % (_fmt(cpu), _fmt(cpu)))
        print('Wall time: %s' % _fmt(wall))
        return value

    def line_time(self, line):
        return self._timed(line)

    def cell_time(self, line, cell):
        return self._timed(cell)

    def _timeit(self, setup, stmt):
        import timeit
        t = timeit.Timer(stmt, setup or 'pass', globals=self.user_ns)
        number, _ = t.autorange()
        runs = [x / number for x in t.repeat(7, number)]
        mean = sum(runs) / len(runs)
        std = (sum((x - mean) ** 2 for x in runs) / len(runs)) ** 0.5
        print('%s ± %s per loop (mean ± std. dev. of 7 runs, %s loop%s each)' % (
            _fmt(mean), _fmt(std), '{:,}'.format(number), '' if number == 1 else 's'))

    def line_timeit(self, line):
        return self._timeit('', line)

    def cell_timeit(self, line, cell):
        return self._timeit(line, cell)

    def line_load_ext(self, line):
        if line.strip() != 'autoreload':
            raise UsageError('%%load_ext: only autoreload without IPython (asked: %s)' % line)

    def line_autoreload(self, line):
        return None  # without IPython: modules are not reloaded (README)

    def line_pinfo(self, line, detail=0):
        try:
            obj = eval(line, self.user_ns)
        except Exception:
            print('Object `%s` not found.' % line)
            return
        import inspect
        print('Type:      %s' % type(obj).__name__)
        print('String form: %s' % repr(obj)[:200])
        doc = inspect.getdoc(obj)
        if doc:
            print('Docstring: %s' % doc)
        if detail:
            try:
                print(inspect.getsource(obj))
            except Exception:
                pass

    def line_pinfo2(self, line):
        return self.line_pinfo(line, 1)

    def cell_writefile(self, line, cell):
        args = line.split()
        append = '-a' in args or '--append' in args
        path = [a for a in args if not a.startswith('-')]
        if not path:
            raise UsageError('%%writefile: a file name is required')
        path = os.path.expanduser(path[0].strip('\'"'))
        exists = os.path.exists(path)
        with open(path, 'a' if append else 'w') as f:
            f.write(cell)
        print('%s %s' % ('Appending to' if append else 'Overwriting' if exists else 'Writing',
                         path))

    def cell_bash(self, line, cell):
        import subprocess
        sys.stdout.flush()
        sys.stderr.flush()
        subprocess.run(['/bin/bash', '-c', cell])


def _fmt(t):
    """IPython's timing units."""
    if t >= 60:
        m, s = divmod(t, 60)
        return '%dmin %.0fs' % (m, s)
    for unit, scale in (('s', 1), ('ms', 1e3), ('µs', 1e6), ('ns', 1e9)):
        if t >= 1 / scale or unit == 'ns':
            return '%.3g %s' % (t * scale, unit)
