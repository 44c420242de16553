"""Where a role's Python is: its main thread's innermost frames, read from the stack
dump its hook makes on request.

The role hook (``pyhook``) registers ``faulthandler`` on a spare signal in the one
process that reports for the role, and says which (``started``: the signal number and
the main thread's ident). On that signal faulthandler writes every thread's stack to
the role's stderr, from inside the signal handler, in C: so it answers even while the
main thread sleeps, waits in a lock or blocks in MXNet's library. Its text::

    Thread 0x00007f3c1e9fd6c0 (most recent call first):
      File "/usr/lib/python3.11/threading.py", line 324 in wait

    Current thread 0x00007f3c25e0b740 (most recent call first):
      File "/work/train.py", line 41 in main
      File "/work/train.py", line 52 in <module>

``DumpReader`` finds the main thread's part in the role's output as it streams, and
says which output was the dump's (and the hook's report lines), so that the dump is no
sign of progress. ``MainStack`` is what the task record keeps: the innermost frames,
each with its source line (``linecache``, when the supervisor can read the file: the
same host, not a container's own files), and ``describe`` the words a diagnosis
quotes. A frame is MXNet's when its file lies in a package directory ``mxnet``; in a
kvstore call when in ``mxnet/kvstore``. Standard library only.
"""

import linecache
import os
import re
from dataclasses import asdict, dataclass, field
from typing import Any, Dict, List, Optional, Tuple

from .notes import HOOK_PREFIX

#: how many of the main thread's innermost frames a record keeps
KEPT_FRAMES = 8
#: a thread's header line in a dump of every thread
_HEADER = re.compile(rb"^(?:Current thread|Thread) 0x([0-9a-fA-F]+)\b.*"
                     rb"\(most recent call first\):$")
_FRAME = re.compile(rb'^  File "(.*)", line (\d+) in (.*)$')
#: a thread without Python frames (other indented lines of a dump carry no frame
#: either: ``  ...`` for a cut deep stack, ``  Garbage-collecting``)
_NO_FRAME = b"  <no Python frame>"
#: a line longer than this is nobody's frame
MAX_LINE = 8192
_HOOK_PREFIX = HOOK_PREFIX.encode()
_MXNET_PART = os.sep + "mxnet" + os.sep
_KVSTORE_PART = os.sep + "mxnet" + os.sep + "kvstore" + os.sep
_SERVER_FILE = os.sep + "kvstore_server.py"
#: mxbatch's own role hook (``pyhook``): no code of the role's
_HOOK_FILE = os.sep + "sitecustomize.py"
#: where a path says that a frame is a library's: an installed package, Python's own
#: library (``/usr/lib/python3.11/threading.py``), a frozen module
_LIBRARY_PARTS = (os.sep + "site-packages" + os.sep, os.sep + "dist-packages" + os.sep,
                  os.sep + "lib" + os.sep + "python", "<frozen ")


@dataclass(frozen=True)
class StackFrame:
    """One frame: ``path`` and ``line`` of the code, in ``function``; ``text`` the
    source line when it could be read (else empty)."""

    path: str
    line: int
    function: str
    text: str = ""

    @property
    def in_mxnet(self) -> bool:
        """The frame is MXNet's own Python (a file under a package directory ``mxnet``)."""
        return _MXNET_PART in self.path

    @property
    def in_kvstore(self) -> bool:
        """The frame is in a call of MXNet's kvstore (``mxnet/kvstore/``; a server's
        serving loop, ``kvstore_server.py``, is none)."""
        return _KVSTORE_PART in self.path and not self.path.endswith(_SERVER_FILE)

    @property
    def in_library(self) -> bool:
        """The frame is a library's, not the role's own code: MXNet, Python's standard
        library, an installed package (as their paths say)."""
        return (self.in_mxnet or self.path.endswith(_HOOK_FILE)
                or any(part in self.path for part in _LIBRARY_PARTS))

    @property
    def is_call(self) -> bool:
        """The frame runs a function, not a module's body (an import)."""
        return self.function != "<module>"

    @property
    def where(self) -> str:
        """``train.py:41 in main``; MXNet's files from the package: ``mxnet/kvstore/
        kvstore.py:240 in push``."""
        path = self.path
        start = path.rfind(_MXNET_PART)
        shown = path[start + 1:] if start >= 0 else os.path.basename(path)
        return "%s:%d in %s" % (shown, self.line, self.function)

    def describe(self) -> str:
        """``train.py:41 in main (time.sleep(600))``."""
        return self.where + (" (%s)" % self.text if self.text else "")


@dataclass(frozen=True)
class MainStack:
    """The role's main thread as its last dump showed it: ``frames`` innermost first
    (``KEPT_FRAMES``, more to reach the role's own innermost frame), dumped at ``at``
    (epoch) by process ``pid``."""

    frames: Tuple[StackFrame, ...]
    at: float = 0.0
    pid: Optional[int] = None

    @property
    def _inner_library(self) -> Tuple[StackFrame, ...]:
        """The library frames inside the role's innermost own frame (all, without one)."""
        own = self.own_frame
        return self.frames[:self.frames.index(own)] if own is not None else self.frames

    @property
    def kvstore_frame(self) -> Optional[StackFrame]:
        """The outermost frame of MXNet's kvstore that the role's own code called, if the
        main thread is in a kvstore call."""
        return next((f for f in reversed(self._inner_library)
                     if f.in_kvstore and f.is_call), None)

    @property
    def mxnet_frame(self) -> Optional[StackFrame]:
        """The outermost frame of MXNet that the role's own code called, if the main
        thread is in MXNet (its kvstore, its NDArrays...); a function's rather than a
        module body's (MXNet's import), where there is one."""
        frames = [f for f in reversed(self._inner_library) if f.in_mxnet]
        return next((f for f in frames if f.is_call), frames[0] if frames else None)

    @property
    def in_kvstore(self) -> bool:
        """The main thread is inside a call of MXNet's kvstore."""
        return self.kvstore_frame is not None

    @property
    def in_mxnet(self) -> bool:
        """The main thread is inside a call of MXNet (its kvstore included)."""
        return self.mxnet_frame is not None

    @property
    def own_frame(self) -> Optional[StackFrame]:
        """The innermost frame of the role's own code (no library's), if one is kept."""
        return next((frame for frame in self.frames if not frame.in_library), None)

    def describe(self) -> str:
        """Where the main thread is, in a diagnosis's words: ``at train.py:41 in main
        (time.sleep(600))``; in MXNet: ``in a kvstore call (mxnet/kvstore/kvstore.py:240
        in push), from train.py:30 in main (kv.push(3, x))``, or ``in MXNet
        (mxnet/ndarray/ndarray.py:2563 in asnumpy), from ...``; in another library:
        ``at threading.py:327 in wait (waiter.acquire()), from ...``."""
        if not self.frames:
            return "in no Python frame"
        inner, kvstore, mxnet = self.frames[0], self.kvstore_frame, self.mxnet_frame
        if kvstore is not None:
            text = "in a kvstore call (%s)" % kvstore.where
        elif mxnet is not None:
            text = "in MXNet (%s)" % mxnet.where
        else:
            text = "at " + inner.describe()
        own = self.own_frame
        if own is None or own is inner:
            return text
        return text + ", from " + own.describe()

    def to_dict(self) -> Dict[str, Any]:
        return {"frames": [asdict(frame) for frame in self.frames], "dumped_at": self.at,
                "pid": self.pid}

    @classmethod
    def parse(cls, data: Any) -> Optional["MainStack"]:
        """The stack in a record's decoded JSON; None when absent or unreadable."""
        if not isinstance(data, dict) or not isinstance(data.get("frames"), list):
            return None
        try:
            frames = tuple(StackFrame(path=str(f["path"]), line=int(f["line"]),
                                      function=str(f["function"]), text=str(f.get("text", "")))
                           for f in data["frames"])
            pid = data.get("pid")
            return cls(frames=frames, at=float(data.get("dumped_at") or 0.0),
                       pid=int(pid) if pid is not None else None)
        except (KeyError, TypeError, ValueError):
            return None


def source_line(path: str, line: int) -> str:
    """The stripped source line ``line`` of ``path``, or empty when it cannot be read."""
    try:
        return linecache.getline(path, line).strip()
    except (OSError, UnicodeDecodeError, ValueError):
        return ""


@dataclass
class DumpReader:
    """The stack dumps in one role's output, as it streams. ``thread``: the ident of the
    role's main thread (``started``); its frames become ``latest`` (innermost first),
    read whole or in pieces (faulthandler writes a frame in several writes)."""

    thread: Optional[int] = None
    pid: Optional[int] = None
    latest: Optional[MainStack] = None
    #: the dump being read: whether its current section is the main thread's
    _in_dump: bool = False
    _main: bool = False
    _frames: List[StackFrame] = field(default_factory=list)
    _partial: bytes = b""
    _at: float = 0.0

    def expect(self, thread: Optional[int], pid: Optional[int]) -> None:
        """The hook reported the main thread ``thread`` of process ``pid``."""
        self.thread, self.pid = thread, pid

    def skip(self) -> None:
        """Output is not being read meanwhile: forget any partial line and dump."""
        self._partial = b""
        self._in_dump = self._main = False

    def feed(self, data: bytes, wall: float) -> bool:
        """Read ``data``; whether it held anything but dump lines and the hook's report
        lines (``ours``): that is the role's own output, a sign of progress. A line not
        complete yet counts as the role's own unless a dump is being read."""
        lines = (self._partial + data).split(b"\n")
        self._partial = lines.pop()[:MAX_LINE + 1]
        own = False
        for line in lines:
            if not self._line(line, wall):
                own = True
        if self._partial and not self._in_dump and not _may_be_ours(self._partial):
            own = True
        return own

    def _keeps(self) -> bool:
        """Whether the next frame is kept: the ``KEPT_FRAMES`` innermost, and beyond them
        the frames up to the role's own innermost one (a stack deep in libraries: an
        import of MXNet that serves), at most ``2 * KEPT_FRAMES``."""
        if len(self._frames) < KEPT_FRAMES:
            return True
        return (len(self._frames) < 2 * KEPT_FRAMES
                and all(frame.in_library for frame in self._frames))

    def _line(self, line: bytes, wall: float) -> bool:
        """Take one complete line; whether it was a dump's or the hook's."""
        header = _HEADER.match(line)
        if header is not None:
            self._in_dump, self._at = True, wall
            self._main = self.thread is not None and int(header.group(1), 16) == self.thread
            if self._main:
                self._frames = []
            return True
        if self._in_dump:
            frame = _FRAME.match(line)
            if frame is not None:
                if self._main and self._keeps():
                    path = frame.group(1).decode("utf-8", "replace")
                    number = int(frame.group(2))
                    self._frames.append(StackFrame(
                        path=path, line=number,
                        function=frame.group(3).decode("utf-8", "replace"),
                        text=source_line(path, number)))
                    self.latest = MainStack(frames=tuple(self._frames), at=self._at,
                                            pid=self.pid)
                return True
            if line.startswith(b"  ") or not line:  # "  <no Python frame>", "  ...",
                if self._main and line == _NO_FRAME:  # "  Garbage-collecting" (3.12+)
                    self.latest = MainStack(frames=(), at=self._at, pid=self.pid)
                return True
            self._in_dump = self._main = False
        return _ours(line)


def _ours(line: bytes) -> bool:
    """A role hook's report line (``notes.HOOK_PREFIX``), not the role's own output."""
    return line.startswith(_HOOK_PREFIX)


def _may_be_ours(partial: bytes) -> bool:
    """A line not complete yet may be a dump's header or a hook's report line."""
    return any(partial.startswith(start) or start.startswith(partial)
               for start in (b"Current thread ", b"Thread ", _HOOK_PREFIX))
