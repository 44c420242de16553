"""The Backend interface every launcher implements, and the printable ``Submission``.

``render`` is pure (no I/O, no cluster probing): ``mxbatch render`` prints its
result. ``submit`` executes exactly that and returns a ``JobRecord``.
``cancel`` is idempotent and leaves nothing queued or running.
"""

from __future__ import annotations

import abc
import dataclasses
from pathlib import Path
from typing import Any, Callable, ClassVar, Dict, Iterator, List, Optional, Tuple

from ..plan import JobPlan
from ..records import JobRecord
from ..runtime.planfile import RunPlan
from ..runtime.rendezvous import FileRendezvous, Rendezvous
from ..spec import JobSpec
from ..status import JobStatus

#: reads one task's log from a byte offset: ``reader(offset, final)`` -> the bytes
#: from there on (None: nothing yet); ``final`` asks for a last, complete read
LogReader = Callable[[int, bool], Optional[bytes]]


@dataclasses.dataclass(frozen=True)
class RenderedItem:
    """One thing a submission would execute or write, for display."""

    title: str
    text: str


@dataclasses.dataclass(frozen=True)
class Submission:
    """Everything ``submit`` will do, decided up front by ``render``."""

    plan: JobPlan
    items: List[RenderedItem]
    payload: Dict[str, Any] = dataclasses.field(default_factory=dict)

    def describe(self) -> str:
        parts = [f"# job {self.plan.job_id} on backend {self.plan.backend}",
                 f"# run directory {self.plan.run_dir}"]
        for item in self.items:
            parts.append(f"## {item.title}\n{item.text.rstrip()}")
        return "\n".join(parts) + "\n"


class Backend(abc.ABC):
    """A place to run the tasks of a job."""

    name: ClassVar[str]
    #: every task runs on this machine: advertise 127.0.0.1
    loopback_only: ClassVar[bool] = False
    #: the ``container.runtime`` values this backend runs roles in
    container_runtimes: ClassVar[Tuple[str, ...]] = ()
    #: the dataclass of this backend's ``backends.<name>`` block, if it has one
    options_class: ClassVar[Optional[type]] = None
    #: how often ``wait``/``--wait`` asks for the status (a batch system's qstat or
    #: squeue should not be asked many times a second)
    poll_interval_s: ClassVar[float] = 1.0

    def __init__(self, options: Any = None) -> None:
        """``options``: an ``options_class`` instance; its defaults when None."""
        if options is None and self.options_class is not None:
            options = self.options_class()
        self.options = options

    @classmethod
    def options_type(cls) -> Optional[type]:
        return cls.options_class

    def check(self, plan: JobPlan) -> None:  # noqa: B027 - optional hook
        """Raise ``SpecError`` if ``plan`` makes no sense for this backend. No cluster I/O."""

    def check_environment(self) -> None:  # noqa: B027 - optional hook
        """Raise ``BackendUnavailable`` with a hint if this backend cannot submit from here
        (missing tools or libraries). Not called by ``render``."""

    @abc.abstractmethod
    def render(self, plan: JobPlan) -> Submission:
        """What ``submit`` would do. Pure."""

    @abc.abstractmethod
    def submit(self, submission: Submission) -> JobRecord:
        """Create the run directory and start or queue every task."""

    @abc.abstractmethod
    def status(self, record: JobRecord) -> JobStatus:
        """Per-task and job state, merged from records and the backend's view."""

    @abc.abstractmethod
    def cancel(self, record: JobRecord) -> None:
        """Stop the job; idempotent; nothing may remain queued or running afterwards."""

    def check_container(self, spec: JobSpec) -> None:
        """SpecError at ``container`` if the spec asks for a container runtime this
        backend does not run roles in. No cluster I/O."""
        container = spec.container
        if container is None or container.runtime in self.container_runtimes:
            return
        runs = (f"it runs {', '.join(self.container_runtimes)}" if self.container_runtimes
                else "remove the key or set it to null")
        raise spec.error(("container",), f"{container.runtime} containers are not supported "
                                         f"by backend {self.name!r}", runs)

    def rendezvous(self, record: JobRecord) -> Rendezvous:
        """The job's shared state (task records, abort) as the CLI reads and writes it:
        by default the files of the run directory."""
        return FileRendezvous(record.run_dir)

    def log_reader(self, record: JobRecord, role: str, rank: int) -> Optional[LogReader]:
        """How the CLI reads one task's log while following the job; None: the file
        ``<run_dir>/logs/<role>-<rank>.log`` on this machine."""
        return None

    def logs(self, record: JobRecord, role: str, rank: int) -> Iterator[str]:
        """Lines of one task's log (stdout and stderr of the role, supervisor notes)."""
        path = Path(record.run_dir) / "logs" / f"{role}-{rank}.log"
        try:
            with open(path, errors="replace") as handle:
                yield from handle
        except FileNotFoundError:
            return


def load_run_plan(record: JobRecord) -> RunPlan:
    return RunPlan.from_json((Path(record.run_dir) / "plan.json").read_text())
