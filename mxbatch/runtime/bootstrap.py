"""The bootstrap of a host's agent: the Python code that a starter (ssh, an srun step,
``qrsh -inherit``) runs on a host, and what it reads first. The agent itself is
``remote``, imported only on the host: the submit host's controller needs this protocol,
not the agent's modules (6 ms of the CLI's start on the test VM).

The submit host runs ``ssh HOST exec env MXBATCH_JOB_ID=<job> PYTHON -S -c BOOTSTRAP``
and writes to the session's stdin ``SIZE_DIGITS`` ASCII digits, the size of the runtime
zipapp (``zipapp_header``), then its bytes. ``BOOTSTRAP`` (Python 3.0 syntax, so that an
old ``python3`` can still say what is wrong) checks the version (exit ``VERSION_EXIT``
below 3.8), writes the zipapp into a new private directory (``mkdtemp``, mode 0700) and
runs it in the same process, as ``runtime.pyz remote DIR`` would (``remote.main``: no
second interpreter start), which speaks ``channel`` messages on the same stdin and
stdout. ``-S``: the runtime needs the standard library only, so the interpreter skips
``site`` (its ``.pth`` files may import whole packages); the bootstrap drops ``-c``'s
current directory from ``sys.path`` before importing anything, so that no file in the
login directory stands in for a standard module.

**Connecting back.** With two arguments, ``PYTHON -S -c BOOTSTRAP ADDRESS PORT``, the
bootstrap first reads a ``TOKEN_BYTES`` token from stdin, connects to ``ADDRESS:PORT``
(the controller), sends the token, and makes that connection its stdin and stdout: all
of the above then goes over TCP. For starters whose stdio is no reliable byte stream:
SGE's builtin ``qrsh -inherit`` drops stdin data when its sending buffer is full (its
client's ``tty_to_commlib`` loop: "couldn't write all data", left as a TODO), which
lost parts of the zipapp on a loaded test cell.
"""

from .wire import JOB_ID

#: the bootstrap's exit status when the remote python3 is older than 3.8
VERSION_EXIT = 97
#: the width of the zipapp's size before its bytes
SIZE_DIGITS = 16
#: the size of the token a connecting-back agent reads from stdin and sends first
TOKEN_BYTES = 32


def _filled(template: str) -> str:
    """``template`` with its ``@NAME@`` placeholders replaced by the values above."""
    for name, value in (("@JOB_ID@", JOB_ID), ("@TOKEN_BYTES@", TOKEN_BYTES),
                        ("@VERSION_EXIT@", VERSION_EXIT), ("@SIZE_DIGITS@", SIZE_DIGITS)):
        template = template.replace(name, str(value))
    return template


BOOTSTRAP = _filled(r"""
import os, sys
if sys.path and sys.path[0] == "":
    del sys.path[0]
if sys.version_info < (3, 8):
    sys.stderr.write("mxbatch: %s is Python %d.%d; mxbatch needs Python 3.8 or newer\n"
                     % (sys.executable, sys.version_info[0], sys.version_info[1]))
    sys.exit(@VERSION_EXIT@)
import tempfile
def read(n):
    data = b""
    while len(data) < n:
        chunk = os.read(0, n - len(data))
        if not chunk:
            sys.exit(0)
        data += chunk
    return data
if len(sys.argv) == 3:
    import socket
    token = read(@TOKEN_BYTES@)
    sock = socket.create_connection((sys.argv[1], int(sys.argv[2])), 60)
    sock.settimeout(None)
    sock.sendall(token)
    os.dup2(sock.fileno(), 0)
    os.dup2(sock.fileno(), 1)
size = int(read(@SIZE_DIGITS@))
path = tempfile.mkdtemp(prefix="mxbatch-%s-" % os.environ.get("@JOB_ID@", "job"))
with open(os.path.join(path, "runtime.pyz"), "wb") as out:
    out.write(read(size))
pyz = os.path.join(path, "runtime.pyz")
sys.argv = [pyz, "remote", path]
import runpy
runpy.run_path(pyz, run_name="__main__")
""".strip())


def zipapp_header(size: int) -> bytes:
    """What precedes the zipapp's bytes on the channel."""
    return b"%0*d" % (SIZE_DIGITS, size)
