"""A task's log file and its time index: when each part of the log arrived.

``TaskLog`` appends a role's output (and supervisor notes) to ``logs/<role>-<rank>.log``
and, next to it, one line ``<byte offset> <epoch seconds>`` to
``logs/<role>-<rank>.times`` whenever a write starts at least ``RESOLUTION_S`` after the
last indexed one: the bytes from that offset on arrived at that time (until the next
line). ``mxbatch logs --timestamps`` reads it (``read_index``, ``time_at``); a log
without an index (written by an older mxbatch) has no times. The writer is whoever
keeps the log: the task's supervisor, or the ssh controller relaying a host's output.

A reader of a log holds at most ``READ_CHUNK`` of it and ``MAX_LINE`` of a line at a
time (``LineSplitter``, ``read_lines``, ``newlines_backwards``): a role that prints
100 MB without a newline costs a reader no more memory than one that prints short
lines; such a line is read in pieces of ``MAX_LINE``.
Standard library only.
"""

import bisect
import os
import time
from typing import BinaryIO, Iterator, List, Optional, Tuple

from .files import RunDirUnwritable

#: writes closer together than this share one index line
RESOLUTION_S = 0.05
#: the longest line a reader of role output keeps whole; a longer one comes in pieces
MAX_LINE = 1 << 20
#: how much of a log a reader reads at once
READ_CHUNK = 1 << 20
#: how much a reader reads at once when it walks a log backwards (``logs --tail``)
BACK_CHUNK = 1 << 16

Index = List[Tuple[int, float]]


class TaskLog:
    """Appends to one task's log and its time index (opened on the first write). A write
    that fails is ``files.RunDirUnwritable``, or given up once ``best_effort`` (the
    supervisor is stopping the job because its run directory cannot be written)."""

    def __init__(self, path: str, times_path: str) -> None:
        self.path = path
        self.times_path = times_path
        self._fd: Optional[int] = None
        self._times_fd: Optional[int] = None
        self._size = 0
        self._indexed_at = float("-inf")
        self.best_effort = False

    def write(self, data: bytes, at: Optional[float] = None) -> None:
        if not data:
            return
        try:
            self._write(data, at)
        except OSError as exc:
            if not self.best_effort:
                raise RunDirUnwritable.of(exc) from None

    def _write(self, data: bytes, at: Optional[float]) -> None:
        if self._fd is None:
            os.makedirs(os.path.dirname(self.path) or ".", exist_ok=True)
            self._fd = os.open(self.path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
            self._size = os.fstat(self._fd).st_size
        at = time.time() if at is None else at
        if at - self._indexed_at >= RESOLUTION_S:
            self._index(self._size, at)
        os.write(self._fd, data)
        self._size += len(data)

    def _index(self, offset: int, at: float) -> None:
        try:
            if self._times_fd is None:
                self._times_fd = os.open(self.times_path,
                                         os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
            os.write(self._times_fd, ("%d %.3f\n" % (offset, at)).encode())
            self._indexed_at = at
        except OSError:  # the index is a convenience: never lose output over it
            pass

    def close(self) -> None:
        for fd in (self._fd, self._times_fd):
            if fd is not None:
                try:
                    os.close(fd)
                except OSError:  # a write-back error on close: nothing more to keep
                    pass
        self._fd = self._times_fd = None


def parse_index(text: str) -> Index:
    """The ``(offset, time)`` lines of an index, in order (bad lines skipped)."""
    index = []
    for line in text.splitlines():
        parts = line.split()
        if len(parts) == 2 and parts[0].isdigit():
            try:
                index.append((int(parts[0]), float(parts[1])))
            except ValueError:
                continue
    return index


def read_index(times_path: str) -> Index:
    """The index at ``times_path``; empty when there is none."""
    try:
        with open(times_path) as handle:
            return parse_index(handle.read())
    except OSError:
        return []


def time_at(index: Index, offset: int) -> Optional[float]:
    """When the byte at ``offset`` of the log arrived; None before the first entry."""
    position = bisect.bisect_right(index, (offset, float("inf"))) - 1
    return index[position][1] if position >= 0 else None


class IndexFollower:
    """A growing index read as it grows: ``refresh`` reads only what was appended since
    the last look, and ``time_at`` answers for offsets that never go back (a log read
    from its start on), keeping only the entries from the last one it answered with:
    following a long job's log costs no re-read of its whole index."""

    def __init__(self, times_path: str) -> None:
        self.times_path = times_path
        self._read = 0
        self._partial = b""
        self._entries: Index = []

    def refresh(self) -> None:
        try:
            with open(self.times_path, "rb") as handle:
                handle.seek(self._read)
                data = handle.read()
        except OSError:
            return
        self._read += len(data)
        text, _, self._partial = (self._partial + data).rpartition(b"\n")
        if text:
            self._entries.extend(parse_index(text.decode("ascii", "replace")))

    def time_at(self, offset: int) -> Optional[float]:
        """When the byte at ``offset`` arrived (None before the first entry); a later
        call asks for the same or a later offset."""
        position = bisect.bisect_right(self._entries, (offset, float("inf"))) - 1
        if position < 0:
            return None
        del self._entries[:position]
        return self._entries[0][1]


class LineSplitter:
    """Lines from chunks of output, holding at most ``max_line`` bytes of an unfinished
    line between two chunks: ``feed`` returns each line it completes with its newline
    (at most ``max_line`` and a chunk long), and of a line that reaches ``max_line``
    bytes without one, pieces of ``max_line`` (no newline)."""

    def __init__(self, max_line: int = MAX_LINE) -> None:
        self.max_line = max_line
        self.partial = b""

    def feed(self, data: bytes) -> List[bytes]:
        if not data:
            return []
        lines = (self.partial + data).split(b"\n")
        self.partial = lines.pop()
        found = [line + b"\n" for line in lines]
        while len(self.partial) >= self.max_line:
            found.append(self.partial[:self.max_line])
            self.partial = self.partial[self.max_line:]
        return found

    def rest(self) -> bytes:
        """The unfinished line (at the end of the output), and forget it."""
        rest, self.partial = self.partial, b""
        return rest


def read_lines(handle: BinaryIO, max_line: int = MAX_LINE) -> Iterator[bytes]:
    """The lines of an open binary file from where it stands (``LineSplitter``'s: with
    their newline, an over-long one in pieces, the last one as it ends)."""
    splitter = LineSplitter(max_line)
    while True:
        data = handle.read(READ_CHUNK)
        if not data:
            break
        yield from splitter.feed(data)
    rest = splitter.rest()
    if rest:
        yield rest


def newlines_backwards(handle: BinaryIO, end: int) -> Iterator[int]:
    """The offsets of the newlines before ``end`` in an open binary file, last first,
    reading ``BACK_CHUNK`` at a time."""
    position = end
    while position > 0:
        begin = max(0, position - BACK_CHUNK)
        handle.seek(begin)
        block = handle.read(position - begin)
        index = len(block)
        while True:
            index = block.rfind(b"\n", 0, index)
            if index < 0:
                break
            yield begin + index
        position = begin
