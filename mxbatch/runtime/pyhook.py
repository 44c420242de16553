"""The ``sitecustomize`` that makes an uncaught Python exception end a role at once.

Plain MXNet prints the traceback and then blocks forever in the kvstore's exit
barrier, so every other role blocks too. The hook prints the traceback,
flushes and ``os._exit(1)``; an ``atexit`` handler restores the default hook so
a clean interpreter exit is untouched (a custom hook left installed at exit
made MXNet abort with 134). Any ``sitecustomize`` that was already on the path
is still imported after ours.
"""

import os

from .files import atomic_write

SITECUSTOMIZE = r'''
"""mxbatch: exit at once on an uncaught exception (MXNet would hang). Chains to any other."""
import atexit
import os
import sys


def _mxbatch_excepthook(kind, value, tb):
    try:
        sys.__excepthook__(kind, value, tb)
        sys.stderr.write("mxbatch: uncaught %s: exiting with code 1\n" % kind.__name__)
        sys.stdout.flush()
        sys.stderr.flush()
    finally:
        os._exit(1)


def _mxbatch_restore():
    if sys.excepthook is _mxbatch_excepthook:
        sys.excepthook = sys.__excepthook__


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
_mxbatch_chain()
'''


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
