"""The output of the commands that stay with a job (``submit --wait``, ``launch``,
``wait``): the job id, the streamed logs, the status line and the notes, written so
that nothing done to the terminal or the pipe that follows a job decides the job's
outcome, or stalls its supervisor (for a local job, this very process).

- A standard stream closed before the command started (``>&-``) is ``/dev/null``
  (``open_standard_streams``, the entry point's first act): no file the command opens
  later takes its number, and what the command prints there is dropped, as with
  ``>/dev/null``.
- Every write goes through one ``Terminal``, whose writer thread writes the texts in
  the order given (stdout and stderr interleaved as they were written): a write that
  blocks (a pipe nobody reads, ``| less`` at a full page; a terminal held by Ctrl-S)
  holds that thread only, never the loop that supervises the job. While more than
  ``BACKLOG_BYTES`` wait, ``busy`` is true and the follower leaves the logs in their
  files for later (it reads on from where it was: nothing is lost); a status line that
  finds more than ``DROP_BYTES`` waiting is dropped (the next one redraws it).
- A write that fails (a broken pipe: ``| head``; a full device: ``>/dev/full``; an I/O
  error) ends that stream's output for good: its descriptor becomes ``/dev/null`` (so
  that nothing else, Python's flush at exit included, trips over it), ``lost`` says
  why, and ``on_lost`` is told once, from the writer thread.
"""

from __future__ import annotations

import collections
import dataclasses
import enum
import errno
import io
import os
import select
import sys
import threading
from typing import Callable, Deque, Dict, Optional, TextIO, Tuple

#: while more than this much waits to be written, the follower reads no more logs
BACKLOG_BYTES = 64 * 1024
#: a droppable text (a status line) that finds more than this waiting is not queued
DROP_BYTES = 1024 * 1024


class Stream(enum.Enum):
    """One of the command's standard output streams, by its descriptor."""

    STDOUT = 1
    STDERR = 2

    @property
    def file(self) -> Optional[TextIO]:
        return sys.stdout if self is Stream.STDOUT else sys.stderr

    @property
    def label(self) -> str:
        return self.name.lower()


@dataclasses.dataclass(frozen=True)
class Loss:
    """A stream the command can no longer write to, and why (``broken pipe``, ``No
    space left on device``)."""

    stream: Stream
    why: str

    def describe(self) -> str:
        return f"cannot write to {self.stream.label} ({self.why})"

    @classmethod
    def of(cls, stream: Stream, error: BaseException) -> "Loss":
        if isinstance(error, BrokenPipeError):
            return cls(stream, "broken pipe: its reader has gone")
        if isinstance(error, OSError) and error.errno is not None:
            return cls(stream, os.strerror(error.errno))
        return cls(stream, "it is closed")


class OutputLost(Exception):
    """A follower's stdout is lost (``Terminal.raise_if_lost``): it stops following."""

    def __init__(self, loss: Loss) -> None:
        super().__init__(loss.describe())
        self.loss = loss


def open_standard_streams() -> None:
    """Give each of the descriptors 0, 1 and 2 that is closed ``/dev/null``, and
    ``sys.stdout``/``sys.stderr`` that Python left None (their descriptor was closed at
    its start) a text stream on it."""
    for fd in (0, 1, 2):
        try:
            os.fstat(fd)
            continue
        except OSError as exc:
            if exc.errno != errno.EBADF:
                continue
        null = os.open(os.devnull, os.O_RDWR)
        if null != fd:
            os.dup2(null, fd)
            os.close(null)
    if sys.stdout is None:
        sys.stdout = open(1, "w", closefd=False)  # for the whole process
    if sys.stderr is None:
        sys.stderr = open(2, "w", closefd=False)


def _to_devnull(stream: Stream) -> None:
    """Point ``stream``'s descriptor at /dev/null: what is still buffered, and whatever
    writes there later, is dropped without an error."""
    try:
        null = os.open(os.devnull, os.O_WRONLY)
        os.dup2(null, stream.value)
        os.close(null)
    except OSError:
        pass


def _write_fd(stream: Stream, text: str) -> None:
    """Write ``text`` to ``stream``'s descriptor, encoded as its text stream encodes,
    all of it (waiting while a descriptor someone made non-blocking is full). Straight
    to the descriptor, not through the text stream: a write that blocks holds no lock
    of Python's buffer, which the interpreter's flush at exit would wait for."""
    file = stream.file
    if file is None:
        raise ValueError("no stream")
    try:
        file.flush()  # anything written to it directly before comes first
    except (AttributeError, io.UnsupportedOperation):
        pass
    data = text.encode(getattr(file, "encoding", None) or "utf-8",
                       getattr(file, "errors", None) or "strict")
    while data:
        try:
            written = os.write(stream.value, data)
        except BlockingIOError:
            select.select([], [stream.value], [])
            continue
        data = data[written:]


class Terminal:
    """Writes the command's texts in order from a writer thread (see the module
    docstring); ``on_lost``: told once per stream that fails, from that thread."""

    def __init__(self, on_lost: Callable[[Loss], None] = lambda loss: None) -> None:
        self.on_lost = on_lost
        self._queue: Deque[Tuple[Stream, str]] = collections.deque()
        self._queued_bytes = 0
        self._writing = False
        self._lost: Dict[Stream, Loss] = {}
        self._changed = threading.Condition()
        self._thread: Optional[threading.Thread] = None

    # -- what callers ask
    def lost(self, stream: Stream) -> Optional[Loss]:
        """Why ``stream`` can no longer be written to; None while it can."""
        return self._lost.get(stream)

    @property
    def busy(self) -> bool:
        """More than ``BACKLOG_BYTES`` wait to be written (a reader that does not read)."""
        return self._queued_bytes > BACKLOG_BYTES

    def tell(self, on_lost: Callable[[Loss], None]) -> None:
        """Tell ``on_lost`` of every loss from now on, and at once of those before."""
        with self._changed:
            self.on_lost = on_lost
            earlier = list(self._lost.values())
        for loss in earlier:
            on_lost(loss)

    def raise_if_lost(self, stream: Stream = Stream.STDOUT) -> None:
        loss = self.lost(stream)
        if loss is not None:
            raise OutputLost(loss)

    def write(self, stream: Stream, text: str, droppable: bool = False) -> None:
        """Queue ``text`` for ``stream`` (nothing once it is lost; nothing for a
        ``droppable`` text while more than ``DROP_BYTES`` wait)."""
        if not text or stream in self._lost:
            return
        with self._changed:
            if droppable and self._queued_bytes > DROP_BYTES:
                return
            self._queue.append((stream, text))
            self._queued_bytes += len(text)
            if self._thread is None:
                self._thread = threading.Thread(target=self._run, name="mxbatch-output",
                                                daemon=True)
                self._thread.start()
            self._changed.notify_all()

    def echo(self, line: str) -> None:
        """A line on stdout (a streamed log line, the job id)."""
        self.write(Stream.STDOUT, line + "\n")

    def note(self, line: str) -> None:
        """A line on stderr (the command's own messages)."""
        self.write(Stream.STDERR, line + "\n")

    def file(self, stream: Stream) -> "TerminalFile":
        """A file-like writer of droppable texts to ``stream`` (the status line's)."""
        return TerminalFile(self, stream)

    def drain(self) -> None:
        """Wait until everything queued is written (or dropped with its lost stream):
        before the command writes by itself, and before it exits. Blocks as a write
        would while the reader does not read."""
        with self._changed:
            while self._queue or self._writing:
                self._changed.wait()

    # -- the writer thread
    def _run(self) -> None:
        while True:
            with self._changed:
                while not self._queue:
                    self._changed.wait()
                stream, text = self._queue.popleft()
                self._writing = True
            try:
                self._write_now(stream, text)
            finally:
                with self._changed:
                    self._queued_bytes -= len(text)
                    self._writing = False
                    self._changed.notify_all()

    def _write_now(self, stream: Stream, text: str) -> None:
        if stream in self._lost:
            return
        try:
            _write_fd(stream, text)
        except (OSError, ValueError) as exc:
            loss = Loss.of(stream, exc)
            _to_devnull(stream)
            with self._changed:
                self._lost[stream] = loss
                on_lost = self.on_lost
            try:
                on_lost(loss)
            except Exception:  # a note about a lost stream is never fatal
                pass


class TerminalFile:
    """What the status line writes to: ``Terminal.write`` of droppable texts."""

    def __init__(self, terminal: Terminal, stream: Stream) -> None:
        self.terminal = terminal
        self.stream = stream

    def write(self, text: str) -> int:
        self.terminal.write(self.stream, text, droppable=True)
        return len(text)

    def flush(self) -> None:
        """Texts are flushed as the writer thread writes them."""

    def isatty(self) -> bool:
        file = self.stream.file
        try:
            return file is not None and file.isatty()
        except (OSError, ValueError):
            return False
