"""The rendezvous of an agent that reaches the job's state only through a channel
(``channel.Channel``: the stdin and stdout of its ssh session), with no shared storage.

The submit host holds the state (a ``FileRendezvous`` on its own run directory) and
relays every call (``serve_call``); ``ChannelRendezvous`` is the agent's side. The
protocol, one JSON object a line:

- agent -> submit host: ``{"t": "call", "m": METHOD, "a": ARG, "id": N}``; calls that
  return nothing (``ONE_WAY``: task records, the scheduler's address, the digest) carry
  no ``id`` and get no answer; the others are answered ``{"t": "ret", "id": N, "v":
  VALUE}``. Records travel as their ``to_dict()``.
- agent -> submit host: ``{"t": "log", "role": R, "rank": N, "d": BASE64}``: a task's
  output (and the supervisor's notes), which the submit host appends to its log file
  (``append_log``): ``mxbatch logs`` and ``--wait`` read them there.
- submit host -> agent: ``{"t": "published"}`` once it has served another agent's call
  in ``PUSHED`` (the scheduler's record, published or listening): this agent's members
  look for the scheduler at once (``scheduler_news``) instead of at the end of their
  backoff (up to 0.5 s, each look a round trip). It may arrive at any time: while a
  call waits for its answer it is kept, between calls it is read without blocking, and
  the agent's loop wakes when it arrives (``news_fd``).

When the channel breaks (the ssh session ended: end of file, a broken pipe, or no
answer within ``reply_timeout_s``) the rendezvous is *lost*: writes are dropped, and
``read_abort`` returns an abort naming the cause, so the agent stops its roles as it
would for any abort (SIGTERM, SIGKILL after the grace period) and exits. A remote
agent therefore never outlives its ssh session by more than the grace period.
"""

import time
from typing import Any, Dict, Iterable, Optional

from .channel import Channel, ChannelClosed, Message, encode_bytes
from .rendezvous import Rendezvous, TaskKey
from .roles import Role
from .states import (
    AbortKind,
    AbortRecord,
    DigestRecord,
    SchedulerRecord,
    TaskRecord,
    collect_task_records,
)
from .wire import TYPE_KEY, MessageType

#: calls answered by nothing: sent and forgotten (the order of messages is kept)
ONE_WAY = frozenset(("publish_scheduler", "write_task", "publish_digest"))
#: calls the submit host tells every other agent about, once served (``PUBLISHED``)
PUSHED = frozenset(("publish_scheduler",))
CALLS = ONE_WAY | frozenset(("read_scheduler", "read_task", "read_tasks", "write_abort",
                             "read_abort", "read_digest"))


class ChannelRendezvous(Rendezvous):
    """The agent's rendezvous through ``channel`` (see the module docstring).

    ``where``: how the agent names itself in the abort it reports when the channel
    is lost (``"the agent on mxbh2"``)."""

    def __init__(self, channel: Channel, reply_timeout_s: float, where: str) -> None:
        self.channel = channel
        self.reply_timeout_s = reply_timeout_s
        self.where = where
        self._next_id = 0
        #: the submit host said the scheduler's record changed (``PUBLISHED``)
        self._news = False
        #: why the channel is lost, once it is
        self.lost: Optional[str] = None
        self._lost_at = 0.0

    # ------------------------------------------------------------------ transport
    def _lose(self, why: str) -> None:
        if self.lost is None:
            self.lost = why
            self._lost_at = time.time()

    def _send(self, message: Message) -> bool:
        if self.lost is not None:
            return False
        try:
            self.channel.send(message)
            self.channel.flush_until(time.monotonic() + self.reply_timeout_s)
        except ChannelClosed as exc:
            self._lose(str(exc))
            return False
        return True

    def _call(self, method: str, arg: Any = None) -> Any:
        """``method`` on the submit host's rendezvous; None when the channel is lost."""
        if method in ONE_WAY:
            self._send({TYPE_KEY: MessageType.CALL, "m": method, "a": arg})
            return None
        self._next_id += 1
        call_id = self._next_id
        if not self._send({TYPE_KEY: MessageType.CALL, "m": method, "a": arg, "id": call_id}):
            return None
        deadline = time.monotonic() + self.reply_timeout_s
        try:
            while True:
                message = self.channel.wait_message(deadline)
                if message.get(TYPE_KEY) == MessageType.RET and message.get("id") == call_id:
                    return message.get("v")
                self._take(message)
        except ChannelClosed as exc:
            self._lose(str(exc))
            return None

    def _take(self, message: Message) -> None:
        """A message that is no answer (an earlier call's late answer is dropped)."""
        if message.get(TYPE_KEY) == MessageType.PUBLISHED:
            self._news = True

    def scheduler_news(self) -> bool:
        """Whether the submit host pushed ``PUBLISHED`` since the last call (what has
        arrived is read without blocking)."""
        if self.lost is None:
            try:
                for message in self.channel.receive():
                    self._take(message)
            except ChannelClosed as exc:
                self._lose(str(exc))
        news, self._news = self._news, False
        return news

    def pushes_scheduler_news(self) -> bool:
        """The submit host pushes ``PUBLISHED`` for every publication (``PUSHED``)."""
        return True

    def news_fd(self) -> Optional[int]:
        """The channel's read end while the channel lasts (one at its end of file would
        always be readable; the next call finds it lost)."""
        return self.channel.read_fd if self.lost is None and not self.channel.eof else None

    # ------------------------------------------------------------------ Rendezvous
    def publish_scheduler(self, record: SchedulerRecord) -> None:
        self._call("publish_scheduler", record.to_dict())

    def read_scheduler(self) -> Optional[SchedulerRecord]:
        return SchedulerRecord.parse(self._call("read_scheduler"))

    def write_task(self, record: TaskRecord) -> None:
        self._call("write_task", record.to_dict())

    def read_task(self, role: Role, rank: int) -> Optional[TaskRecord]:
        return TaskRecord.parse(self._call("read_task", [role.value, rank]))

    def read_tasks(self, keys: Iterable[TaskKey]) -> Dict[TaskKey, TaskRecord]:
        wanted = [[role.value, rank] for role, rank in keys]
        return collect_task_records(self._call("read_tasks", wanted) or [])

    def write_abort(self, record: AbortRecord) -> bool:
        if not record.at:
            record.at = time.time()
        return bool(self._call("write_abort", record.to_dict()))

    def read_abort(self) -> Optional[AbortRecord]:
        abort = AbortRecord.parse(self._call("read_abort"))
        if abort is None and self.lost is not None:
            return AbortRecord(kind=AbortKind.FAILED, at=self._lost_at, by=self.where,
                               reason="%s lost its connection to the submit host: %s"
                                      % (self.where, self.lost))
        return abort

    def publish_digest(self, record: DigestRecord) -> None:
        self._call("publish_digest", record.to_dict())

    def read_digest(self) -> Optional[DigestRecord]:
        return DigestRecord.parse(self._call("read_digest"))

    def append_log(self, role: Role, rank: int, data: bytes) -> bool:
        """Send a task's output to the submit host, which keeps the log."""
        if data:
            self._send({TYPE_KEY: MessageType.LOG, "role": role.value, "rank": rank,
                        "d": encode_bytes(data)})
        return True

    def close(self, exit_status: int) -> None:
        """Say goodbye (the agent's exit status) and wait until it is written."""
        self._send({TYPE_KEY: MessageType.BYE, "code": exit_status})


def serve_call(rdv: Rendezvous, method: str, arg: Any,
               adapt_task: Optional[Any] = None) -> Any:
    """Run one relayed ``method`` on ``rdv`` (the submit host's); the plain value to
    answer. ``adapt_task(record)`` may rewrite task and abort records written through
    the relay (the submit host's own log paths). ValueError for an unknown method."""
    if method == "publish_scheduler":
        record = SchedulerRecord.parse(arg)
        if record is not None:
            rdv.publish_scheduler(record)
        return None
    if method == "read_scheduler":
        found = rdv.read_scheduler()
        return found.to_dict() if found else None
    if method == "write_task":
        task = TaskRecord.parse(arg)
        if task is not None:
            rdv.write_task(adapt_task(task) if adapt_task else task)
        return None
    if method == "read_task":
        role, rank = arg
        got = rdv.read_task(Role(role), int(rank))
        return got.to_dict() if got else None
    if method == "read_tasks":
        keys = [(Role(role), int(rank)) for role, rank in arg]
        return [record.to_dict() for record in rdv.read_tasks(keys).values()]
    if method == "write_abort":
        abort = AbortRecord.parse(arg)
        if abort is None:
            return False
        return rdv.write_abort(adapt_task(abort) if adapt_task else abort)
    if method == "read_abort":
        aborted = rdv.read_abort()
        return aborted.to_dict() if aborted else None
    if method == "publish_digest":
        digest = DigestRecord.parse(arg)
        if digest is not None:
            rdv.publish_digest(digest)
        return None
    if method == "read_digest":
        seen = rdv.read_digest()
        return seen.to_dict() if seen else None
    raise ValueError("unknown rendezvous call %r" % method)
