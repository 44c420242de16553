"""MPI backend: one ``mpirun`` starts one agent on every host of the job, each the
supervisor of the tasks dealt to its host.

Each rank runs ``python3 -S <run dir>/runtime.pyz run <run dir> --task-from
OMPI_COMM_WORLD_RANK,PMI_RANK --task-groups G --environ-file <run dir>/mpi/environ.json
--exit-zero``: its rank picks its group of ``G`` (``task.format_groups``: the tasks
``hostfile.place`` deals each host, in hostfile order, so rank 0, on the first host,
supervises the scheduler), its rendezvous the files of the run directory. One agent a
host, as the ssh backend has, rather than one a task: a Python supervisor costs about
0.1 CPU-second to start and 12 MiB to keep, which 1,000 ranks paid a thousand times.
**The run directory (``rendezvous.dir``) and the working directory must be on storage
every host sees**, as with SGE and Slurm: mpirun gives a rank no channel back to the
submit host (its stdio is funnelled into mpirun's), and the clusters mpirun is made for
share their home directories. Without shared storage, use the ssh backend (a rendezvous
relayed over the ssh sessions, ``--sync-dst-dir``).

- Placement: ``hostfile.place`` deals the tasks (round-robin, ``slots=`` honoured); the
  hostfile written into the run directory gives each host that takes tasks one slot,
  and ``-n`` is the number of those hosts, so that Open MPI's ``--map-by node`` (and
  hydra's filling of the slots in order) puts rank i on the hostfile's i-th host
  (``deal``).
- Environment: mpirun passes a rank only what it is told to (``-x``); mxbatch writes
  the submitter's environment to ``mpi/environ.json`` (mode 0600, deleted as soon as
  every task's agent has started) instead of naming values on a command line.
  ``MXBATCH_JOB_ID`` goes with ``-x``/``-genv``, so every rank carries it.
- Root: mpirun refuses to run as root unless told (``--allow-run-as-root`` in
  ``backends.mpi.extra``, or ``OMPI_ALLOW_RUN_AS_ROOT=1`` and
  ``OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1``): mxbatch never adds it.
- ``--exit-zero``: an agent records its tasks' outcomes and exits 0, so mpirun does not
  kill the other agents before they stopped their roles themselves (SIGTERM, grace,
  SIGKILL) on the abort record. mpirun still ends the job when an agent dies
  abnormally (python3 missing, killed) or it loses a host; ``--launcher-signals``: the
  agents then stop their roles on mpirun's SIGTERM without blaming the signal, and the
  controller fails the job with mpirun's own words (``logs/mpirun.log``), which name
  the host.

The controller (``MpiController``) runs mpirun and waits until every task's agent has
started; if mpirun ends before, it fails the submission naming the tasks and hosts
that never started and what mpirun said (exit 3). Cancel: the abort record, then
SIGTERM to mpirun (which kills its ranks) once the grace period is over.

Node failures: when mpirun ends because it lost a host's daemon (``lost_daemons``: the
ssh session to the host's orted closed, or Open MPI's "lost communication with a
remote daemon ... on node HOST"), the attempt ends ``node_failure`` blaming that host,
named as the hostfile names it (``blamed_hosts``, through the attempt's task records).
A relaunch without excluded hosts deals the tasks to the others (``place_attempt``,
the same dealing as ``render``) in a hostfile and groups of its own (``hostfile_path``
of the attempt's layout, ``attempt_argv``); ``usable`` refuses a relaunch they cannot
hold.
"""

from __future__ import annotations

import dataclasses
import enum
import ipaddress
import json
import os
import re
import shutil
import signal
import subprocess
import time
from typing import Any, Dict, Iterable, List, Mapping, NamedTuple, Optional, Sequence, Tuple

from ...errors import BackendUnavailable
from ...quoting import shell_words
from ...runtime import logfile, wire
from ...runtime.jobloop import AttemptContext
from ...runtime.layout import RunLayout
from ...runtime.planfile import RunPlan
from ...runtime.spawn import start_dying_with_parent
from ...runtime.states import AbortKind, AbortRecord, EndReason, SchedulerRecord, TaskRecord
from ...runtime.task import format_groups
from ...spec.plan import JobPlan
from ...spec.typed import Seconds, from_data, option, to_data
from ..base import RenderedItem
from ..bundle import runtime_command
from . import hostfile, placement
from .agentpython import AGENT_PYTHON_HELP, agent_python
from .controller import (
    BY,
    ControlledBackend,
    ControlledRequest,
    Controller,
    unavailable,
)

NAME = "mpi"
RANK_VARIABLES = "OMPI_COMM_WORLD_RANK,PMI_RANK"
#: the runtime's option whose value says each rank's tasks (``task.format_groups``)
GROUPS_OPTION = "--task-groups"
#: a submission that fails names this many tasks that never started, then counts the rest
NAMED = 10


class MpiFlavor(str, enum.Enum):
    """Which mpirun: its hostfile format and how it exports a variable."""

    OPENMPI = "openmpi"
    MPICH = "mpich"


@dataclasses.dataclass(frozen=True)
class MpiOptions:
    """``backends.mpi``."""

    mpirun: str = option("mpirun", "the mpirun (or mpiexec) to run")
    hostfile: Optional[str] = option(None, "a hostfile in launch.py's format: one HOST or "
                                           "'HOST slots=N' a line (relative to the spec "
                                           "file)")
    hosts: Tuple[str, ...] = option((), "the hosts, each HOST or 'HOST slots=N' (instead "
                                        "of a hostfile)")
    extra: Tuple[str, ...] = option((), "more mpirun arguments, before the program "
                                        "(--allow-run-as-root, --mca ...)")
    flavor: MpiFlavor = option(MpiFlavor.OPENMPI, "openmpi (Open MPI's mpirun) or mpich "
                                                  "(hydra's mpiexec)")
    python: Optional[str] = option(None, AGENT_PYTHON_HELP)
    start_timeout: Seconds = option(120.0, "how long mpirun may take to start every host's "
                                           "agent")


@dataclasses.dataclass(frozen=True)
class MpiSetup:
    """The controller's configuration: the mpirun command (one rank a host, each with
    its group of tasks), the hostfile it reads, and the host each task was dealt (for
    messages)."""

    argv: Tuple[str, ...]
    hostfile: str
    hostfile_text: str
    environ_file: str
    task_hosts: Tuple[str, ...]
    start_timeout_s: float = 120.0
    flavor: str = "openmpi"
    #: every host of the placement, spare ones too, as hostfile lines (``HOST
    #: [slots=N]``, the slots as given): a relaunch deals the tasks to those not
    #: excluded (empty in the configuration of older versions: no host can be left out)
    hosts: Tuple[str, ...] = ()


@dataclasses.dataclass(frozen=True)
class MpiRequest(ControlledRequest):
    """An MPI job's request: the controller's ``mpirun`` setup and where its hosts
    came from."""

    setup: MpiSetup = dataclasses.field(
        default_factory=lambda: MpiSetup((), "", "", "", ()))
    #: where the hosts came from (``Placement.source``)
    hosts_from: str = ""

    def native_items(self) -> List[RenderedItem]:
        return [self.controller_item(), RenderedItem("hosts", f"from {self.hosts_from}"),
                RenderedItem(f"hostfile {self.setup.hostfile}", self.setup.hostfile_text),
                RenderedItem("mpirun", shell_words(self.setup.argv)),
                RenderedItem(f"environment file {self.setup.environ_file} (mode 0600)",
                             "the submitter's environment, deleted once every rank started")]


def mpi_file(layout: RunLayout, name: str) -> str:
    return layout.backend_file(NAME, name)


def hostfile_path(layout: RunLayout) -> str:
    """mpirun's hostfile of the attempt ``layout`` is of (``mpi/hostfile`` for the
    first; a relaunch that leaves hosts out writes its own)."""
    return layout.attempt_backend_file(NAME, "hostfile")


class Dealing(NamedTuple):
    """Where the tasks of an attempt run: mpirun's hostfile (one slot on each host that
    takes tasks), each task's host (its label), and each rank's tasks
    (``GROUPS_OPTION``'s value)."""

    hostfile_text: str
    task_hosts: Tuple[str, ...]
    groups: str

    @property
    def ranks(self) -> int:
        """How many ranks mpirun starts: one a host that takes tasks."""
        return self.hostfile_text.count("\n")


def deal(hosts: Sequence[hostfile.Host], tasks: int, flavor: MpiFlavor) -> Dealing:
    """The ``Dealing`` of ``tasks`` over ``hosts`` as ``hostfile.place`` deals them (a host
    dealt none is left out); ValueError when the hosts' slots cannot hold ``tasks``."""
    dealt = hostfile.place(hosts, tasks)
    used = sorted(set(dealt))
    lines = [(f"{hosts[i].name} slots=1" if flavor is MpiFlavor.OPENMPI
              else f"{hosts[i].name}:1") for i in used]
    groups = [[task for task, host in enumerate(dealt) if host == i] for i in used]
    return Dealing("\n".join(lines) + "\n", tuple(hosts[i].label for i in dealt),
                   format_groups(groups))


def place_attempt(setup: MpiSetup, excluded: Sequence[str], tasks: int) -> Dealing:
    """The ``Dealing`` of an attempt that leaves ``excluded`` (host labels) out: ``deal``
    over the others of ``setup.hosts``; without exclusions the first attempt's (its
    groups are in ``setup.argv`` already: ``groups`` empty); ValueError saying why the
    hosts left cannot hold every task."""
    if not excluded:
        return Dealing(setup.hostfile_text, setup.task_hosts, "")
    if not setup.hosts:
        raise ValueError("this job's configuration does not list its hosts (an older "
                         "mxbatch submitted it)")
    pool = [h for h in map(hostfile.parse_entry, setup.hosts) if h.label not in excluded]
    if not pool:
        raise ValueError("no host is left")
    return deal(pool, tasks, MpiFlavor(setup.flavor))


class MpiBackend(ControlledBackend[MpiOptions, MpiRequest]):
    """See the module docstring."""

    name = NAME
    options_class = MpiOptions

    def check(self, plan: JobPlan) -> None:
        found = placement.job_hosts(plan, self.name, self.options.hosts, self.options.hostfile)
        for host in found.hosts:
            if host.port is not None:
                raise plan.spec.error(("backends", self.name, "hostfile" if self.options.hostfile
                                       else "hosts"),
                                      f"host {host.label}: mpirun hostfiles have no ssh port "
                                      "(set it in the ssh configuration, or use the ssh backend)")

    def doctor_checks(self) -> list:
        """The tools (``check_environment``), and where the hosts come from."""
        from ...doctor.checks import environment_check

        return [environment_check(self),
                placement.hosts_check(self.name, self.options.hosts, self.options.hostfile)]

    def check_environment(self) -> None:
        if shutil.which(self.options.mpirun) is None:
            raise BackendUnavailable(f"{self.options.mpirun} is not installed here (install "
                                     "Open MPI, or set backends.mpi.mpirun)")

    def render(self, plan: JobPlan) -> MpiRequest:
        run = plan.run
        found = placement.job_hosts(plan, self.name, self.options.hosts, self.options.hostfile)
        flavor = self.options.flavor
        dealing = deal(found.hosts, len(run.tasks), flavor)
        layout = run.layout
        hosts_path, environ = hostfile_path(layout), mpi_file(layout, "environ.json")
        argv = [self.options.mpirun, "-n", str(dealing.ranks)]
        if flavor is MpiFlavor.OPENMPI:
            argv += ["--hostfile", hosts_path, "--map-by", "node", "--bind-to", "none",
                     "--stdin", "none", "-x", f"{wire.JOB_ID}={run.job_id}"]
        else:
            argv += ["-f", hosts_path, "-genv", wire.JOB_ID, run.job_id]
        python = agent_python(self.options.python, run)
        argv += [*self.options.extra, *runtime_command(
            python, layout.runtime, "run", run.run_dir, "--task-from",
            RANK_VARIABLES, GROUPS_OPTION, dealing.groups, "--environ-file", environ,
            "--exit-zero", "--launcher-signals")]
        setup = MpiSetup(argv=tuple(argv), hostfile=hosts_path,
                         hostfile_text=dealing.hostfile_text, environ_file=environ,
                         task_hosts=dealing.task_hosts,
                         start_timeout_s=float(self.options.start_timeout),
                         flavor=flavor.value, hosts=tuple(h.entry for h in found.hosts))
        return MpiRequest(plan=plan, setup=setup, hosts_from=found.source)

    def prepare_run_dir(self, request: MpiRequest, layout: RunLayout) -> None:
        super().prepare_run_dir(request, layout)
        setup = request.setup
        with open(setup.hostfile, "w") as handle:
            handle.write(setup.hostfile_text)
        write_environ(setup.environ_file)

    def controller_config(self, request: MpiRequest) -> Dict[str, Any]:
        return to_data(request.setup)

    @classmethod
    def make_controller(cls, plan: RunPlan, config: Dict[str, Any],
                        attempt: Optional[AttemptContext] = None) -> Controller:
        return MpiController(plan, from_data(MpiSetup, config, strict=False), attempt)

    @classmethod
    def usable(cls, config: Dict[str, Any], plan: RunPlan,
               excluded: List[str]) -> Optional[str]:
        """The other hosts of the placement must hold every task."""
        try:
            place_attempt(from_data(MpiSetup, config, strict=False), excluded,
                          len(plan.tasks))
        except ValueError as exc:
            return f"without {', '.join(excluded)}: {exc}"
        return None


def write_environ(path: str) -> None:
    """This process's environment (the submitter's) for the ranks (mode 0600)."""
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    with os.fdopen(fd, "w") as handle:
        json.dump(dict(os.environ), handle)


def attempt_argv(setup: MpiSetup, attempt: AttemptContext,
                 hosts_path: Optional[str] = None, dealing: Optional[Dealing] = None
                 ) -> List[str]:
    """mpirun's command line for ``attempt``: every rank also gets ``MXBATCH_ATTEMPT``
    and ``MXBATCH_RESTART_REASON`` (mpirun passes only what it is told to);
    ``hosts_path`` and ``dealing``: the attempt's own hostfile, ranks and groups instead
    of the first attempt's."""
    argv = list(setup.argv)
    if hosts_path is not None and hosts_path != setup.hostfile:
        argv[argv.index(setup.hostfile)] = hosts_path
    if dealing is not None and dealing.groups:
        argv[2] = str(dealing.ranks)  # after "mpirun -n"
        argv[argv.index(GROUPS_OPTION) + 1] = dealing.groups
    if attempt.index == 0:
        return argv
    values = ((wire.ATTEMPT, str(attempt.index)), (wire.RESTART_REASON, attempt.reason_name))
    if setup.flavor == MpiFlavor.MPICH.value:
        extra = [token for name, value in values for token in ("-genv", name, value)]
    else:
        extra = [token for name, value in values for token in ("-x", f"{name}={value}")]
    return argv[:3] + extra + argv[3:]  # after "mpirun -n N"


def _remove_quietly(path: str) -> None:
    try:
        os.unlink(path)
    except OSError:
        pass


#: what to do about mpirun's refusals that have one known fix: (its words, the fix)
_HINTS = (
    ("attempt to run as root",
     "running MPI jobs as root is your explicit choice: export OMPI_ALLOW_RUN_AS_ROOT=1 "
     "OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1, or add --allow-run-as-root to backends.mpi.extra"),
)


def _hint(said: str) -> Optional[str]:
    return next((fix for words, fix in _HINTS if words in said), None)


def mpirun_said(log_path: str, lines: int = 4) -> str:
    """What mpirun said, in short: its lines outside its boxed messages, and the first
    line of each box (the boxes go on with generic advice); not the agents' own lines.
    Reads the log's first ``logfile.READ_CHUNK`` only (whatever else wrote to it)."""
    try:
        with open(log_path, "rb") as handle:
            text = handle.read(logfile.READ_CHUNK).decode(errors="replace")
    except OSError:
        return "no output"
    said: List[str] = []
    in_box = headline = False
    for line in text.splitlines():
        stripped = line.strip()
        if stripped.startswith("-----"):
            in_box = headline = not in_box
            continue
        if not stripped or stripped.startswith("mxbatch") or (in_box and not headline):
            continue
        headline = False
        said.append(stripped)
    return " / ".join(said[:lines]) or "no output"


#: mpirun's words (or those of the ssh under it) when it lost a host's daemon, each
#: naming the host as mpirun or ssh knows it (a name, or ssh's HostName address)
_LOST_DAEMON = (
    # ssh: the session to the host's orted dropped (its sshd killed, the host rebooted)
    re.compile(r"Connection to (\S+) closed by remote host"),
    # ssh: ServerAlive gave up on a host that stopped answering
    re.compile(r"Timeout, server (\S+) not responding"),
    # Open MPI (ORTE) and PRRTE: "... has lost communication with a remote daemon"
    re.compile(r"Remote daemon: *\S+ on node (\S+)"),
)


def lost_daemons(text: str) -> List[str]:
    """The hosts whose daemon mpirun's output ``text`` says it lost, as it names them,
    in order, once each (the agents' own ``mxbatch`` lines are not read)."""
    found: List[str] = []
    for line in text.splitlines():
        if line.lstrip().startswith("mxbatch"):
            continue
        for pattern in _LOST_DAEMON:
            for match in pattern.finditer(line):
                name = match.group(1).rstrip(".,:;")
                if name and name not in found:
                    found.append(name)
    return found


def _short(name: str) -> str:
    """A host name without its domain (an address as it is)."""
    try:
        ipaddress.ip_address(name.strip("[]"))
        return name
    except ValueError:
        return name.split(".", 1)[0]


def host_aliases(task_hosts: Sequence[str], records: Iterable[Tuple[int, TaskRecord]],
                 scheduler: Optional[SchedulerRecord] = None) -> Dict[str, str]:
    """{a name mpirun or ssh may give a host: the host as the hostfile names it}: each
    label itself (without ``user@``), and from the task records of the attempt (task
    index, record) the host name the agent ran on (and its short form) and the address
    its role listens on; the scheduler record's address for task 0."""
    aliases: Dict[str, str] = {}
    for label in task_hosts:
        aliases.setdefault(label, label)
        aliases.setdefault(label.rpartition("@")[2], label)
    named = [(index, record.host, record.address.rpartition(":")[0])
             for index, record in records]
    if scheduler is not None:
        named.append((0, scheduler.host, scheduler.ip))
    for index, host, ip in named:
        if 0 <= index < len(task_hosts):
            for alias in (host, _short(host), ip.strip("[]")):
                if alias:
                    aliases.setdefault(alias, task_hosts[index])
    return aliases


def blamed_hosts(said: Iterable[str], aliases: Mapping[str, str]) -> Tuple[str, ...]:
    """The hosts (hostfile labels) of the names mpirun ``said``; a name that is none of
    ``aliases`` is left out (no host can be excluded for it)."""
    blamed: List[str] = []
    for name in said:
        label = aliases.get(name) or aliases.get(_short(name))
        if label is not None and label not in blamed:
            blamed.append(label)
    return tuple(blamed)


def read_tail(path: str) -> str:
    """The last ``logfile.READ_CHUNK`` of a log ("" when it cannot be read)."""
    try:
        with open(path, "rb") as handle:
            handle.seek(0, os.SEEK_END)
            handle.seek(max(0, handle.tell() - logfile.READ_CHUNK))
            return handle.read(logfile.READ_CHUNK).decode(errors="replace")
    except OSError:
        return ""


class MpiController(Controller):
    """Runs mpirun, waits until every task's agent started, and watches mpirun until it
    ends (see the module docstring)."""

    def __init__(self, plan: RunPlan, setup: MpiSetup,
                 attempt: Optional[AttemptContext] = None) -> None:
        super().__init__(plan, attempt)
        self.setup = setup
        self.log_path = self.layout.mpirun_log
        self.proc: Optional[subprocess.Popen] = None
        self._kill_at: Optional[float] = None
        #: this attempt's hostfile and each task's host: the first attempt's, unless
        #: hosts are excluded (``_place``)
        self.hostfile = setup.hostfile
        self.task_hosts = setup.task_hosts
        self.dealing: Optional[Dealing] = None  # a relaunch's own (``_place``)

    def _not_started(self) -> List[int]:
        records = self.rdv.read_tasks(self.plan.task_keys())
        return [t.index for t in self.plan.tasks
                if (records.get((t.role, t.rank)) is None
                    or records[(t.role, t.rank)].supervisor_pid is None)]

    def _place(self) -> None:
        """A relaunch without the excluded hosts: deal the tasks to the others, in a
        hostfile of the attempt's own."""
        excluded = self.attempt.excluded
        if not excluded:
            return
        try:
            self.dealing = place_attempt(self.setup, excluded, len(self.plan.tasks))
        except ValueError as exc:
            raise BackendUnavailable(f"cannot relaunch without {', '.join(excluded)}: "
                                     f"{exc}") from None
        self.task_hosts = self.dealing.task_hosts
        self.hostfile = hostfile_path(self.layout)
        os.makedirs(os.path.dirname(self.hostfile), mode=0o700, exist_ok=True)
        with open(self.hostfile, "w") as handle:
            handle.write(self.dealing.hostfile_text)

    def prepare(self) -> None:
        if self.attempt.index > 0:  # attempt 0's was written at submission, then removed
            _remove_quietly(self.setup.environ_file)
            write_environ(self.setup.environ_file)
        self._place()
        os.makedirs(self.layout.logs_dir, mode=0o700, exist_ok=True)
        with open(self.log_path, "ab") as log:
            self.proc = start_dying_with_parent(
                attempt_argv(self.setup, self.attempt, self.hostfile, self.dealing),
                stdin=subprocess.DEVNULL, stdout=log,
                stderr=subprocess.STDOUT, start_new_session=True, close_fds=True,
                env={**os.environ, wire.JOB_ID: self.plan.job_id})
        deadline = time.monotonic() + self.setup.start_timeout_s
        while not self.interrupted:  # a Ctrl-C meanwhile: ``run`` cancels the job
            missing = self._not_started()
            if not missing:
                break
            if self.proc.poll() is not None or time.monotonic() > deadline:
                timed_out = self.proc.poll() is None
                self._stop_mpirun()
                said = mpirun_said(self.log_path)
                what = (f"mpirun had not started every host's agent after "
                        f"backends.mpi.start_timeout ({self.setup.start_timeout_s:g} s)"
                        if timed_out else "mpirun could not start the job")
                raise unavailable(
                    [(self.task_hosts[i], f"the agent of {self.plan.tasks[i].label} "
                                                "never started") for i in missing[:NAMED]]
                    + ([(f"and {len(missing) - NAMED} more", "their agents never started "
                         "either")] if len(missing) > NAMED else [])
                    + [("mpirun", f"exit {self.proc.returncode}: {said}")],
                    what, hint=("raise backends.mpi.start_timeout: mpirun starts a daemon "
                                "and an agent on every host" if timed_out else _hint(said)))
            time.sleep(0.2)
        _remove_quietly(self.setup.environ_file)

    def start(self) -> None:
        """Nothing: the hosts' agents have started their roles already."""

    def step(self, timeout: float) -> bool:
        assert self.proc is not None
        try:
            self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            if self._kill_at is not None and time.monotonic() > self._kill_at:
                self.proc.kill()
                self._kill_at = None
            return True
        code = self.proc.returncode
        reason = f"mpirun exited with {code}: {mpirun_said(self.log_path)}"
        end: Optional[EndReason] = None
        hosts: Tuple[str, ...] = ()
        if code != 0 and self.rdv.read_abort() is None:
            # the agents leave the cause to mpirun's words (--launcher-signals)
            said = lost_daemons(read_tail(self.log_path))
            if said:
                end, hosts = EndReason.NODE_FAILURE, self._blamed(said)
                reason = (f"host {', '.join(hosts)}: mpirun lost its daemon there ({reason})"
                          if hosts else f"mpirun lost the daemon of {', '.join(said)}, "
                                        f"which is no host of the job's ({reason})")
            self.rdv.write_abort(AbortRecord(kind=AbortKind.FAILED, reason=reason, by=BY,
                                             end=end, hosts=list(hosts)))
        self.lose_tasks(self.plan.tasks, reason, end or EndReason.FAILURE, hosts)
        return False

    def _blamed(self, said: List[str]) -> Tuple[str, ...]:
        """The hosts mpirun named (``said``), as the hostfile names them."""
        records = self.rdv.read_tasks(self.plan.task_keys())
        indexed = [(t.index, records[(t.role, t.rank)]) for t in self.plan.tasks
                   if (t.role, t.rank) in records]
        return blamed_hosts(said, host_aliases(self.task_hosts, indexed,
                                               self.rdv.read_scheduler()))

    def terminate(self) -> None:
        """SIGTERM to mpirun (it kills its ranks), SIGKILL 5 s later."""
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            self._kill_at = time.monotonic() + 5

    def _stop_mpirun(self) -> None:
        if self.proc is None or self.proc.poll() is not None:
            return
        self.proc.send_signal(signal.SIGTERM)
        try:
            self.proc.wait(10)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()

    def abandon(self) -> None:
        self._stop_mpirun()
        _remove_quietly(self.setup.environ_file)

    def close(self) -> None:
        _remove_quietly(self.setup.environ_file)
