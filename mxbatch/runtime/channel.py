"""Messages over a pair of file descriptors: an ssh session's stdin and stdout.

A message is a JSON object on one line (UTF-8, ``\\n``-terminated). Both ends are
non-blocking: ``send`` queues and writes what the pipe takes, ``flush`` writes more
when the descriptor is writable, ``receive`` parses whatever complete lines have
arrived. Blocking waits (``flush_until``, ``wait_message``) always take a deadline
(monotonic clock); a peer that closed its end, a broken pipe, a line that is not JSON
or a deadline that passed raise ``ChannelClosed`` with the reason.

Before any message, a sender may write raw bytes (``send_raw``): the submit host
ships the runtime zipapp to an ssh host that way.
"""

import base64
import collections
import json
import os
import select
import time
from typing import Any, Deque, Dict, List, Optional

#: a longer line is a protocol error (the largest message is a plan or an environment)
MAX_LINE = 64 * 1024 * 1024
_CHUNK = 65536

Message = Dict[str, Any]


class ChannelClosed(Exception):
    """The channel cannot be used any more; ``str()`` says why."""


def encode_bytes(data: bytes) -> str:
    """Bytes as they travel inside a message (base64)."""
    return base64.b64encode(data).decode("ascii")


def decode_bytes(text: str) -> bytes:
    return base64.b64decode(text.encode("ascii"))


class Channel:
    """Line-delimited JSON messages over ``read_fd`` and ``write_fd`` (made non-blocking)."""

    def __init__(self, read_fd: int, write_fd: int) -> None:
        self.read_fd = read_fd
        self.write_fd = write_fd
        os.set_blocking(read_fd, False)
        os.set_blocking(write_fd, False)
        self._in = bytearray()
        self._out = bytearray()
        self._messages: Deque[Message] = collections.deque()
        #: the peer closed its end (no more messages will come)
        self.eof = False
        #: why writing is impossible, once it is
        self.broken: Optional[str] = None

    # ------------------------------------------------------------------ sending
    def send(self, message: Message) -> None:
        """Queue ``message`` and write as much as the descriptor takes now."""
        self.send_raw(json.dumps(message, separators=(",", ":")).encode() + b"\n")

    def send_raw(self, data: bytes) -> None:
        if self.broken is not None:
            raise ChannelClosed(self.broken)
        self._out += data
        self.flush()

    @property
    def pending(self) -> bool:
        """Bytes are waiting to be written."""
        return bool(self._out)

    def flush(self) -> bool:
        """Write what the descriptor takes without blocking; True when nothing is left."""
        while self._out:
            try:
                written = os.write(self.write_fd, self._out[:_CHUNK])
            except BlockingIOError:
                return False
            except OSError as exc:  # EPIPE: the peer is gone
                self.broken = "the connection is closed (%s)" % (exc.strerror or exc)
                self._out.clear()
                raise ChannelClosed(self.broken) from None
            del self._out[:written]
        return True

    def flush_until(self, deadline: float) -> None:
        """Block until everything queued is written; ChannelClosed at ``deadline``."""
        while not self.flush():
            left = deadline - time.monotonic()
            if left <= 0:
                self.broken = "the other end has not read for too long"
                raise ChannelClosed(self.broken)
            select.select([], [self.write_fd], [], left)

    # ------------------------------------------------------------------ receiving
    def receive(self) -> List[Message]:
        """Read what has arrived without blocking; the complete messages, in order (also
        those ``wait_message`` left queued). Sets ``eof`` when the peer closed its end."""
        self._read_available()
        messages = list(self._messages)
        self._messages.clear()
        return messages

    def wait_message(self, deadline: float) -> Message:
        """The next message; ChannelClosed on end of file or at ``deadline``."""
        while not self._messages:
            if self.eof:
                raise ChannelClosed("the other end closed the connection")
            left = deadline - time.monotonic()
            if left <= 0:
                raise ChannelClosed("no message within the deadline")
            readable, _, _ = select.select([self.read_fd], [], [], left)
            if readable:
                self._read_available()
        return self._messages.popleft()

    def _read_available(self) -> None:
        while not self.eof:
            try:
                data = os.read(self.read_fd, _CHUNK)
            except BlockingIOError:
                break
            except OSError:
                data = b""
            if not data:
                self.eof = True
                break
            self._in += data
        self._parse()

    def _parse(self) -> None:
        while True:
            end = self._in.find(b"\n")
            if end < 0:
                if len(self._in) > MAX_LINE:
                    raise ChannelClosed("a message longer than %d bytes" % MAX_LINE)
                return
            line = bytes(self._in[:end])
            del self._in[:end + 1]
            if not line.strip():
                continue
            try:
                message = json.loads(line.decode())
            except ValueError:
                raise ChannelClosed("garbled data on the channel: %r"
                                    % line[:200].decode(errors="replace")) from None
            if not isinstance(message, dict):
                raise ChannelClosed("a message that is not an object: %r" % line[:200])
            self._messages.append(message)

    def close(self) -> None:
        for fd in {self.read_fd, self.write_fd}:
            try:
                os.close(fd)
            except OSError:
                pass
