"""What a role's hook (``pyhook``) reports, read from the role's output as it streams.

The hook runs inside the role's own interpreter and writes one line per event on the
role's stderr (``notes.hook_line``): ``mxbatch hook worker[1]: started {...}`` before
the script runs (its pid, the Python and MXNet versions and paths: a
``RoleEnvironment``), ``... finished {"pid": N}`` once the script's own code (its
non-daemon threads included) has finished, before ``atexit`` handlers and module
teardown, where MXNet's dist kvstore hangs. ``HookReader`` finds these lines anywhere
in a line of output (the role may have left a partial line before), like
``metrics.MetricReader``; a line longer than ``MAX_LINE`` is no report.

``RoleEnvironment.mismatch`` is the start-up check: two roles that both find MXNet
must run the same MXNet version on the same Python major.minor (ps-lite of two MXNet
versions, or an optimizer pickled by another Python, hangs or fails deep inside).
Standard library only.
"""

import json
from dataclasses import asdict, dataclass
from typing import Any, Dict, List, Optional

from .notes import HOOK_PREFIX
from .wire import HookEvent

MAX_LINE = 8192
_PREFIX = HOOK_PREFIX.encode()


@dataclass(frozen=True)
class RoleEnvironment:
    """The interpreter a role runs and the MXNet it would import (``mxnet`` None: none
    found on its path; the hook finds it without importing it)."""

    python: str
    python_path: str
    mxnet: Optional[str] = None
    mxnet_path: Optional[str] = None

    @property
    def python_minor(self) -> str:
        """``3.11`` of ``3.11.7``."""
        return ".".join(self.python.split(".")[:2])

    def describe(self) -> str:
        """``Python 3.11.7 (/usr/bin/python3), MXNet 1.9.1 (/.../mxnet)``."""
        mxnet = ("MXNet %s (%s)" % (self.mxnet or "of unknown version", self.mxnet_path)
                 if self.mxnet_path else "no MXNet")
        return "Python %s (%s), %s" % (self.python, self.python_path, mxnet)

    def mismatch(self, other: "RoleEnvironment") -> bool:
        """Whether a role of this environment cannot work with one of ``other``: both
        find MXNet, and the MXNet versions or the Python major.minor differ."""
        if not (self.mxnet_path and other.mxnet_path):
            return False
        return self.mxnet != other.mxnet or self.python_minor != other.python_minor

    def to_dict(self) -> Dict[str, Any]:
        return asdict(self)

    @classmethod
    def parse(cls, data: Any) -> Optional["RoleEnvironment"]:
        """The environment in decoded JSON; None when absent or unreadable."""
        if not isinstance(data, dict) or not data.get("python"):
            return None
        text = {k: data.get(k) for k in ("python", "python_path", "mxnet", "mxnet_path")}
        if not all(v is None or isinstance(v, str) for v in text.values()):
            return None
        return cls(python=str(text["python"]), python_path=text["python_path"] or "",
                   mxnet=text["mxnet"], mxnet_path=text["mxnet_path"])


def mismatch_reason(label: str, mine: RoleEnvironment, other_label: str,
                    other: RoleEnvironment) -> str:
    """The failure that names both roles and what each runs."""
    return ("environment mismatch: %s runs %s, but %s runs %s; every role must run the "
            "same MXNet version on the same Python" % (label, mine.describe(), other_label,
                                                        other.describe()))


@dataclass(frozen=True)
class HookReport:
    """One report line: ``event`` from process ``pid`` (``environment`` with STARTED;
    ``rank``, the rank ps-lite's scheduler gave a worker, with CONNECTED when known)."""

    event: HookEvent
    pid: int
    environment: Optional[RoleEnvironment] = None
    rank: Optional[int] = None
    #: STARTED: the signal that makes the role dump its stacks (``stacks``), and the
    #: main thread's ident; None: no dump can be asked for
    stack_signal: Optional[int] = None
    thread: Optional[int] = None
    #: KVSTORE, FINISHED: the worker's pushes so far (``wire.HookEvent.KVSTORE``)
    pushes: Optional[int] = None
    batches: Optional[int] = None


def parse_line(line: bytes) -> Optional[HookReport]:
    """The report in one output line, if it holds one."""
    start = line.find(_PREFIX)
    if start < 0:
        return None
    _, sep, rest = line[start + len(_PREFIX):].partition(b": ")
    event_name, _, payload = rest.partition(b" ")
    try:
        event = HookEvent(event_name.decode("ascii"))
        data = json.loads(payload.decode("utf-8", "replace"))
        pid = int(data["pid"])
    except (ValueError, KeyError, TypeError, UnicodeDecodeError):
        return None
    if not sep or not isinstance(data, dict):
        return None
    environment = RoleEnvironment.parse(data) if event is HookEvent.STARTED else None
    return HookReport(event=event, pid=pid, environment=environment,
                      rank=_int(data, "rank"), stack_signal=_int(data, "stack_signal"),
                      thread=_int(data, "thread"), pushes=_int(data, "pushes"),
                      batches=_int(data, "batches"))


def _int(data: Dict[str, Any], key: str) -> Optional[int]:
    """``data[key]`` when it is an integer (not a bool), else None."""
    value = data.get(key)
    return value if isinstance(value, int) and not isinstance(value, bool) else None


class HookReader:
    """The hook's reports in one role's output chunks."""

    def __init__(self) -> None:
        self._partial = b""

    def feed(self, data: bytes) -> List[HookReport]:
        """Read ``data`` (any chunk of output): the reports its complete lines hold."""
        if b"\n" not in data:
            self._partial = (self._partial + data)[:MAX_LINE + 1]
            return []
        head, _, rest = data.rpartition(b"\n")
        text = self._partial + head
        self._partial = rest[:MAX_LINE + 1]
        if _PREFIX not in text:
            return []
        reports = []
        for line in text.split(b"\n"):
            if len(line) <= MAX_LINE:
                report = parse_line(line)
                if report is not None:
                    reports.append(report)
        return reports
