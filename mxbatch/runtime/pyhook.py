"""The ``sitecustomize`` every role's Python runs first: it ends a role at once on an
uncaught exception, reports what the role runs and when its code has finished, and
holds a member before ps-lite until its scheduler listens.

- **Exceptions.** Plain MXNet prints the traceback and then blocks forever in the
  kvstore's exit barrier, so every other role blocks too. The hook prints the
  traceback, flushes and ``os._exit(1)``; an ``atexit`` handler restores the default
  hook so a clean interpreter exit is untouched (a custom hook left installed at exit
  made MXNet abort with 134).
- **Reports** (``rolehook`` reads them), one line each on the role's stderr (fd 2,
  unbuffered), by one process per role: the first Python process of the role claims
  the role (``wire.HOOK_OWNER``: its pid, which its children inherit and so stay
  silent; a later process claims it again once the claimer is gone, or after an
  ``exec``). ``started``: before the script runs, its pid, Python's version and path,
  and MXNet's version and path found without importing it (the package's location
  from the import system, the version from its ``libinfo.py``, else from a
  ``mxnet*.dist-info`` beside it). ``finished``: the script's own code has finished,
  its non-daemon threads too: a wrapper of ``threading._shutdown``, which the
  interpreter calls before ``atexit`` handlers and module teardown (where MXNet's
  ``_notify_shutdown`` and ``KVStore.__del__`` hang). An uncaught exception,
  ``os._exit`` or a signal reports no ``finished``; ``sys.exit(n)`` does (the hook
  cannot see ``n``). ``connecting``: MXNet is about to create a dist kvstore, where
  ps-lite starts (a scheduler binds its port within milliseconds: its supervisor then
  looks for the listening socket every few milliseconds instead of every 50).
  ``connected``: a worker's dist kvstore has been created, which MXNet returns only
  after ps-lite's start-up barrier over every node: the worker (and every server) has
  registered with the scheduler; with the rank the scheduler gave it. This is what
  makes a later failure a failure of training, worth a restart, not a start-up one.
- **The start gate** (``gate``): the hook wraps MXNet's ``kvstore.create`` as soon as
  the module that defines it has run; a dist kvstore's create (where ps-lite starts: a
  scheduler's and a server's during ``import mxnet``, a worker's in its script) reports
  ``connecting``, and a server or worker started before its scheduler listens carries
  ``MXBATCH_GATE`` and waits there until the gate opens; the rest of MXNet's import goes
  on.
  ``mxbatch_wait_for_scheduler()`` is the same wait for any program of the role to
  call.
- **Stacks** (``stacks``): the reporting process registers ``faulthandler`` on a spare
  signal (``STACK_SIGNAL_OFFSET``) with fd 2 and says so in ``started`` (the signal's
  number, the main thread's ident): on that signal every thread's stack is written on
  the role's stderr, even while the main thread sleeps or blocks in MXNet. The
  supervisor sends it only to that process, and only while ``/proc`` shows it handles it.
- **Pushes**: a worker's dist kvstore counts its ``push`` and ``pushpull`` calls (by key;
  the most pushes of one key are its batches) and reports them (``kvstore``) once they
  pause, from a thread that sleeps in a wait while no push comes, and with
  ``finished``: what each worker pushed is then measured, not guessed.

- **The lean scheduler** (``leanscheduler``): a scheduler's role whose plan says
  ``lean`` (``wire.SCHEDULER_START``) and whose script only imports, defines and binds
  names before its first ``import mxnet`` does not run its script: once any other
  ``sitecustomize`` has run, the hook loads the library of the MXNet package it found
  for ``started`` (that package's ``libinfo.find_lib_path``), makes MXNet's two calls
  of a scheduler's import (``MXKVStoreCreate("dist")``, ``MXKVStoreRunServer``) and
  exits (``connecting`` before, ``finished`` after, as the script would report); when
  it cannot (another script, no package, no library), the script runs.

Any ``sitecustomize`` that was already on the path is still imported after ours. The
text runs on any Python the role may use (3.8 and later), and nothing it does may
raise into the role.
"""

import os

from . import gate, notes, wire
from .files import atomic_write
from .leanscheduler import SchedulerStart

#: the hook's stack signal is SIGRTMIN + this (SIGUSR2 where there is no SIGRTMIN): a
#: signal nobody else uses (SIGUSR1 is the default checkpoint signal); it is reported in
#: ``started``, so the supervisor needs no copy of the choice
STACK_SIGNAL_OFFSET = 4
#: a worker's push counts are reported once its pushes pause this long (at least)
PUSHES_QUIET_S = 2.0

_TEMPLATE = r'''
"""mxbatch: exit at once on an uncaught exception (MXNet would hang); report this role's
Python and MXNet, and when its code has finished. Chains to any other sitecustomize."""
import atexit
import os
import sys

_mxbatch_owner = None  # this process's pid when it reports for the role
_mxbatch_package = None  # the directory of the mxnet package the script would import


def _mxbatch_excepthook(kind, value, tb):
    try:
        sys.__excepthook__(kind, value, tb)
        sys.stderr.write("mxbatch: uncaught %%s: exiting with code 1\n" %% kind.__name__)
        sys.stdout.flush()
        sys.stderr.flush()
    finally:
        os._exit(1)


def _mxbatch_restore():
    if sys.excepthook is _mxbatch_excepthook:
        sys.excepthook = sys.__excepthook__


def _mxbatch_json(value):
    """JSON of a str, int or None (the json module costs 10 ms to import)."""
    if value is None:
        return "null"
    if isinstance(value, int):
        return str(value)
    return '"%%s"' %% "".join(c if c >= " " and c not in '"\\' else "\\u%%04x" %% ord(c)
                             for c in value)


def _mxbatch_say(event, data):
    try:
        label = "%%s[%%s]" %% (os.environ.get(%(role)r, "role"), os.environ.get(%(rank)r, "?"))
        payload = ", ".join("%%s: %%s" %% (_mxbatch_json(k), _mxbatch_json(data[k]))
                            for k in sorted(data))
        line = %(prefix)r + label + ": " + event + " {" + payload + "}\n"
        os.write(2, line.encode("utf-8", "replace"))
    except Exception:
        pass


def _mxbatch_note(text):
    """``text`` on the role's stderr (fd 2), whatever ``sys.stderr`` is."""
    try:
        os.write(2, text.encode("utf-8", "replace"))
    except Exception:
        pass


def _mxbatch_claim():
    """Whether this process reports for the role (see pyhook's docstring)."""
    me = os.getpid()
    claimed = os.environ.get(%(owner)r, "")
    if claimed.isdigit() and int(claimed) != me:
        try:
            os.kill(int(claimed), 0)
            return False
        except ProcessLookupError:
            pass
        except OSError:
            return False
    os.environ[%(owner)r] = str(me)
    return True


def _mxbatch_script_dir():
    """sys.path[0] as the interpreter will set it, after this hook."""
    first = sys.argv[0] if sys.argv else ""
    if first in ("", "-c", "-m") or not os.path.isfile(first):
        return os.getcwd()
    return os.path.dirname(os.path.realpath(first))


def _mxbatch_mxnet_version(package):
    try:
        with open(os.path.join(package, "libinfo.py")) as handle:
            for line in handle:
                name, sep, value = line.partition("=")
                if sep and name.strip() == "__version__":
                    return value.strip().strip("'\"")
    except (OSError, UnicodeDecodeError):
        pass
    try:
        for name in sorted(os.listdir(os.path.dirname(package))):
            if name.lower().startswith("mxnet") and name.endswith(".dist-info"):
                return name[:-len(".dist-info")].rpartition("-")[2]
    except OSError:
        pass
    return None


def _mxbatch_mxnet():
    """(version, package directory) of the mxnet the script would import, or Nones: the
    script's directory first (sys.path[0] is not set yet), then the import system's
    finders (importlib.util costs 30 ms to import)."""
    try:
        from importlib.machinery import PathFinder
        spec = PathFinder.find_spec("mxnet", [_mxbatch_script_dir()])
        for finder in [] if spec is not None else sys.meta_path:
            find = getattr(finder, "find_spec", None)
            spec = find("mxnet", None) if find is not None else None
            if spec is not None:
                break
        places = list(spec.submodule_search_locations or []) if spec is not None else []
    except Exception:
        return None, None
    if not places:
        return None, None
    package = os.path.abspath(places[0])
    return _mxbatch_mxnet_version(package), package


def _mxbatch_report_start():
    global _mxbatch_owner, _mxbatch_package
    if not _mxbatch_claim():
        return
    _mxbatch_owner = os.getpid()
    version, package = _mxbatch_mxnet()
    _mxbatch_package = package
    _mxbatch_say(%(started)r, {"pid": _mxbatch_owner,
                               "python": "%%d.%%d.%%d" %% tuple(sys.version_info[:3]),
                               "python_path": sys.executable or "", "mxnet": version,
                               "mxnet_path": package, "stack_signal": _mxbatch_stacks(),
                               "thread": _mxbatch_thread()})
    try:
        import threading
        original = threading._shutdown
    except (ImportError, AttributeError):
        return

    def _mxbatch_shutdown():
        try:
            original()
        finally:
            if os.getpid() == _mxbatch_owner:
                _mxbatch_say(%(finished)r, dict(_mxbatch_counted(), pid=_mxbatch_owner))

    threading._shutdown = _mxbatch_shutdown


def _mxbatch_thread():
    """The ident of this (the main) thread, as faulthandler's dump names it."""
    try:
        import _thread
        return _thread.get_ident()
    except Exception:
        return None


def _mxbatch_stacks():
    """Have faulthandler dump every thread's stack on fd 2 on a spare signal (SIGRTMIN +
    %(stack_offset)d, else SIGUSR2, when nothing handles it yet); the signal's number, or
    None when not registered (the supervisor then never sends it: it would end us)."""
    try:
        import _signal
        import faulthandler
        rtmin = getattr(_signal, "SIGRTMIN", None)
        signum = rtmin + %(stack_offset)d if rtmin is not None else _signal.SIGUSR2
        if _signal.getsignal(signum) not in (_signal.SIG_DFL, None):
            return None
        faulthandler.register(signum, file=2, all_threads=True, chain=False)
        return signum
    except Exception:
        return None


# a worker's pushes through its dist kvstore: by key, in all, and the pace of its rounds
_mxbatch_pushes = {}
_mxbatch_push_state = {"calls": 0, "first": None, "last": None, "gap": 0.0}


def _mxbatch_counted():
    """The pushes counted so far (none: {}): ``pushes``, calls of push and pushpull;
    ``batches``, the most pushes of one key (one a batch, for a trainer that pushes
    each parameter once a batch)."""
    calls = _mxbatch_push_state["calls"]
    if not calls:
        return {}
    return {"pushes": calls, "batches": max(_mxbatch_pushes.values() or [0])}


def _mxbatch_counting(method, event):
    """``method`` (a kvstore's push or pushpull) that counts its calls first."""
    import time

    def count_then_call(key, *args, **kwargs):
        try:
            state = _mxbatch_push_state
            keys = key if isinstance(key, (list, tuple)) else (key,)
            for each in keys:
                each = each if isinstance(each, (int, str)) else str(each)
                _mxbatch_pushes[each] = _mxbatch_pushes.get(each, 0) + 1
            state["calls"] += 1
            if keys and state["first"] is None:
                state["first"] = keys[0]
            if keys and keys[0] == state["first"]:
                now = time.monotonic()
                if state["last"] is not None:
                    state["gap"] = now - state["last"]
                state["last"] = now
            event.set()
        except Exception:
            pass
        return method(key, *args, **kwargs)

    for attribute in ("__name__", "__qualname__", "__doc__"):
        setattr(count_then_call, attribute, getattr(method, attribute, None))
    return count_then_call


def _mxbatch_report_pushes(event):
    """Report the counts once the pushes pause (no push for %(quiet)r s, or five times
    the last round's time, at most a minute): the supervisor knows what a blocked
    worker pushed, and a busy one writes no line; idle between pushes, the thread uses
    no CPU."""
    import time
    reported = None
    while True:
        event.wait()
        while True:
            event.clear()
            seen = _mxbatch_push_state["calls"]
            time.sleep(min(60.0, max(%(quiet)r, 5 * _mxbatch_push_state["gap"])))
            if _mxbatch_push_state["calls"] == seen:
                break
        counts = _mxbatch_counted()
        if counts and counts != reported and os.getpid() == _mxbatch_owner:
            reported = counts
            _mxbatch_say(%(kvstore)r, dict(counts, pid=_mxbatch_owner))


def _mxbatch_count_pushes(store):
    """Count the pushes of a worker's dist kvstore ``store`` (its push and pushpull)."""
    try:
        import threading
        event = threading.Event()
        for name in ("push", "pushpull"):
            method = getattr(store, name, None)
            if callable(method):
                setattr(store, name, _mxbatch_counting(method, event))
        threading.Thread(target=_mxbatch_report_pushes, args=(event,), daemon=True,
                         name="mxbatch-pushes").start()
    except Exception:
        pass


def mxbatch_wait_for_scheduler():
    """Wait here until this job's scheduler listens (its supervisor closes the gate,
    ``runtime/gate.py``); return at once when the role has no gate. Call it before a
    program of the role connects to the scheduler (MXNet's own import does, through
    the hook)."""
    value = os.environ.pop(%(gate)r, "")  # once open, this process's children need none
    fd, sep, inode = value.partition(":")
    if not (sep and fd.isdigit() and inode.isdigit()):
        return
    try:
        if os.fstat(int(fd)).st_ino != int(inode):
            return  # the descriptor is no longer the gate
        while os.read(int(fd), 4096):
            pass
    except OSError:
        return
    try:
        os.close(int(fd))
    except OSError:
        pass


def _mxbatch_gated(create):
    """MXNet's ``kvstore.create``: for a dist kvstore (the call where ps-lite starts),
    reported as ``connecting``, then held at the gate (a member started before its
    scheduler listens)."""
    def create_after_the_gate(name="local", *args, **kwargs):
        dist = isinstance(name, str) and name.lower().startswith("dist")
        if dist:
            if os.getpid() == _mxbatch_owner:
                _mxbatch_say(%(connecting)r, {"pid": _mxbatch_owner})
            mxbatch_wait_for_scheduler()
        store = create(name, *args, **kwargs)
        if dist and os.getpid() == _mxbatch_owner and os.environ.get(%(dmlc_role)r) == "worker":
            # a worker's create returns after ps-lite's barrier over every node
            try:
                rank = int(store.rank)
            except Exception:
                rank = None
            _mxbatch_say(%(connected)r, {"pid": _mxbatch_owner, "rank": rank})
            _mxbatch_count_pushes(store)
        return store
    for attribute in ("__name__", "__qualname__", "__doc__", "__module__"):
        setattr(create_after_the_gate, attribute, getattr(create, attribute, None))
    create_after_the_gate.__wrapped__ = create
    create_after_the_gate._mxbatch_gated = True
    return create_after_the_gate


class _MxbatchGate(object):
    """Wraps ``create`` of the MXNet module that defines it as soon as that module has
    run, before anything (a server's ``kvstore_server``, the package's re-export) takes
    it: so the connect waits, and everything else of MXNet's import goes on."""

    @classmethod
    def find_spec(cls, name, path=None, target=None):
        if name not in %(held)r:
            return None
        for finder in sys.meta_path:
            find = getattr(finder, "find_spec", None)
            if finder is cls or find is None:
                continue
            spec = find(name, path, target)
            if spec is not None:
                break
        else:
            return None
        run = getattr(spec.loader, "exec_module", None)
        if run is None:
            return spec

        def exec_module(module):
            run(module)
            create = getattr(module, "create", None)
            if callable(create) and not getattr(create, "_mxbatch_gated", False):
                module.create = _mxbatch_gated(create)

        try:
            spec.loader.exec_module = exec_module
        except (AttributeError, TypeError):
            pass
        return spec


def _mxbatch_libmxnet():
    """The path of the library the script's MXNet would load (its ``libinfo``), or None."""
    path = os.path.join(_mxbatch_package, "libinfo.py")
    try:
        with open(path) as handle:
            code = compile(handle.read(), path, "exec")
        names = {"__file__": path, "__name__": "_mxbatch_libinfo"}
        exec(code, names)
        return names["find_lib_path"]()[0]
    except Exception:
        return None


def _mxbatch_mxnet_module(name):
    return name is not None and (name == "mxnet" or name.startswith("mxnet."))


def _mxbatch_imports_mxnet_first():
    """Whether the script (a file) only imports, defines and binds names (``NAME =
    ...``) before its first ``import mxnet`` at module level, which for a scheduler
    serves and exits: then nothing of it is lost when it does not run."""
    path = sys.argv[0] if sys.argv else ""
    if path in ("", "-c", "-m") or not os.path.isfile(path):
        return False
    try:
        import ast
        with open(path, "rb") as handle:
            body = ast.parse(handle.read(), path).body
    except Exception:
        return False
    for node in body:
        if isinstance(node, ast.Import):
            if any(_mxbatch_mxnet_module(alias.name) for alias in node.names):
                return True
        elif isinstance(node, ast.ImportFrom):
            if node.level == 0 and _mxbatch_mxnet_module(node.module):
                return True
        elif isinstance(node, ast.Expr) and isinstance(node.value, ast.Constant):
            continue  # the docstring
        elif isinstance(node, (ast.Assign, ast.AnnAssign)):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            if not all(isinstance(target, ast.Name) for target in targets):
                return False
        elif not isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            return False
    return False


def _mxbatch_lean_scheduler():
    """Run ps-lite's scheduler from MXNet's library instead of the script, then exit;
    return (the script runs) when this role is no lean scheduler or cannot be one."""
    if (os.environ.get(%(dmlc_role)r) != "scheduler"
            or os.environ.get(%(scheduler_start)r) != %(lean)r
            or _mxbatch_owner != os.getpid() or _mxbatch_package is None
            or not _mxbatch_imports_mxnet_first()):
        return
    library = _mxbatch_libmxnet()
    if library is None:
        return
    try:
        import ctypes
        lib = ctypes.CDLL(library, ctypes.RTLD_LOCAL)
        create, serve = lib.MXKVStoreCreate, lib.MXKVStoreRunServer
        lib.MXGetLastError.restype = ctypes.c_char_p
        controller = ctypes.CFUNCTYPE(None, ctypes.c_int, ctypes.c_char_p,
                                      ctypes.c_void_p)(lambda head, body, handle: None)
    except Exception:
        return
    _mxbatch_note("mxbatch: the scheduler runs ps-lite's scheduler from %%s, without its "
                  "script (rendezvous.scheduler: lean)\n" %% library)
    _mxbatch_say(%(connecting)r, {"pid": _mxbatch_owner})
    code = 1
    try:
        handle = ctypes.c_void_p()
        if create(b"dist", ctypes.byref(handle)) == 0 and serve(handle, controller, None) == 0:
            code = 0
            _mxbatch_say(%(finished)r, {"pid": _mxbatch_owner})
        else:
            error = lib.MXGetLastError() or b""
            _mxbatch_note("mxbatch: the scheduler failed in MXNet: %%s\n"
                          %% error.decode("utf-8", "replace").strip())
    finally:
        try:
            sys.stdout.flush()
        except Exception:
            pass
        os._exit(code)


def _mxbatch_chain():
    here = os.path.dirname(os.path.abspath(__file__))
    ours = sys.modules.pop("sitecustomize", None)
    saved = list(sys.path)
    sys.path[:] = [p for p in sys.path if os.path.abspath(p or os.curdir) != here]
    try:
        import sitecustomize  # noqa: F401  (the next one on the path, if any)
    except ModuleNotFoundError as exc:
        if exc.name != "sitecustomize":
            raise
    finally:
        sys.path[:] = saved
        if ours is not None:
            sys.modules["sitecustomize"] = ours


sys.excepthook = _mxbatch_excepthook
atexit.register(_mxbatch_restore)
sys.meta_path.insert(0, _MxbatchGate)
_mxbatch_report_start()
_mxbatch_chain()
_mxbatch_lean_scheduler()
'''

#: the text of ``sitecustomize.py``
SITECUSTOMIZE = _TEMPLATE % {"role": wire.ROLE, "rank": wire.RANK, "owner": wire.HOOK_OWNER,
                             "prefix": notes.HOOK_PREFIX, "started": wire.HookEvent.STARTED.value,
                             "finished": wire.HookEvent.FINISHED.value,
                             "connecting": wire.HookEvent.CONNECTING.value,
                             "connected": wire.HookEvent.CONNECTED.value, "gate": wire.GATE,
                             "held": gate.HELD_MODULES, "dmlc_role": wire.DMLC_ROLE,
                             "scheduler_start": wire.SCHEDULER_START,
                             "lean": SchedulerStart.LEAN.value,
                             "kvstore": wire.HookEvent.KVSTORE.value,
                             "stack_offset": STACK_SIGNAL_OFFSET, "quiet": PUSHES_QUIET_S}


def install(directory: str) -> str:
    """Write ``sitecustomize.py`` into ``directory`` (idempotent); returns the directory.

    Both readable by everyone (0755, 0644): a container mounts this directory alone,
    and its user may be another uid than the run directory's owner. Nothing is exposed
    on the host: the run directory around it is 0700."""
    os.makedirs(directory, exist_ok=True)
    _readable(directory, 0o755)
    path = os.path.join(directory, "sitecustomize.py")
    try:
        with open(path) as handle:
            if handle.read() == SITECUSTOMIZE:
                _readable(path, 0o644)
                return directory
    except OSError:
        pass
    atomic_write(path, SITECUSTOMIZE.encode(), 0o644)
    _readable(path, 0o644)  # os.open's mode is cut by the umask
    return directory


def _readable(path: str, mode: int) -> None:
    """Give ``path`` ``mode`` if it has another (best effort: the hook still works for
    the run directory's owner)."""
    try:
        if os.stat(path).st_mode & 0o7777 != mode:
            os.chmod(path, mode)
    except OSError:
        pass
