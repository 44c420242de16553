"""The fault matrix: every failure mxbatch must handle, injected for real on a backend.

A cell is one fault on one backend: a job of stand-in roles (``fakerole.py``: a
scheduler that listens, 1 server, 2 busy workers) is submitted, the fault injected
(a worker raises; a worker, server or scheduler SIGKILLed; a worker SIGSTOPped; a
supervisor SIGKILLed; a task that cannot start; the scheduler's port taken, before the
job or by a foreign listener between mxbatch's choice and the role's bind; cancel
while queued; cancel while running; a worker blocked after the other finished, as in
the uneven-batch deadlock of dist_sync; both workers hanging at exit after their code
finished, as MXNet's do), and the cell checks that the job ended, that its reason (for
the exit hang, which succeeds: its note) names the task and the cause, and that nothing
of it is left running or queued. ``run_cell`` returns a ``Cell`` with the time from the
injection to the end of the job, as the job's own records say (on YARN, whose task
records live in the application's key-value store, also as the ResourceManager says).
``tests/test_fault_matrix.py`` runs every cell on every backend whose cluster is up
(local, SGE, Slurm, YARN); ``bench/fault_matrix.py`` prints the table.
"""

from __future__ import annotations

import contextlib
import dataclasses
import enum
import json
import re
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Callable, ContextManager, Dict, List, Optional

from mxbatch.runtime import procs
from mxbatch.runtime.layout import RunLayout

from .polling import poll

FAKEROLE = Path(__file__).resolve().parent / "fakerole.py"
#: the short timeouts every cell's job runs with
TIMEOUTS = "grace: 2s, heartbeat_timeout: 6s, stall_timeout: 6s, exit_timeout: 4s"
#: how long after the job ended its processes may take to go (a NodeManager kills a
#: finished application's containers after it reported the end)
LEFT_S = 10.0


class Fault(str, enum.Enum):
    WORKER_RAISES = "worker raises"
    WORKER_KILLED = "worker SIGKILL"
    SERVER_KILLED = "server SIGKILL"
    SCHEDULER_KILLED = "scheduler SIGKILL"
    WORKER_STOPPED = "worker SIGSTOP (stall)"
    SUPERVISOR_KILLED = "supervisor SIGKILL"
    NEVER_STARTS = "task never starts"
    PORT_TAKEN = "scheduler port taken"
    PORT_STOLEN = "scheduler port taken after it was chosen"
    CANCEL_QUEUED = "cancel while queued"
    CANCEL_RUNNING = "cancel while running"
    DEADLOCK = "worker blocked after another finished"
    EXIT_HANG = "workers hang at exit"


#: what the job's reason must say, per fault
EXPECTED: Dict[Fault, str] = {
    Fault.WORKER_RAISES: r"worker\[1\] exited with code 1",
    Fault.WORKER_KILLED: r"worker\[1\] was killed by SIGKILL",
    Fault.SERVER_KILLED: r"server\[0\] was killed by SIGKILL",
    Fault.SCHEDULER_KILLED: r"scheduler\[0\] was killed by SIGKILL",
    Fault.WORKER_STOPPED: r"worker\[1\] stalled: its process has been stopped",
    Fault.SUPERVISOR_KILLED: r"worker\[1\] lost",
    Fault.NEVER_STARTS: r"startup deadline \(\d+s\) passed and .* never started: .*worker",
    Fault.PORT_TAKEN: r"scheduler\[0\]: no free port in (\d+)-\1",
    # the supervisor saw the foreign listener, or the role's bind failed first
    Fault.PORT_STOLEN: r"scheduler\[0\]: no free port in (\d+)-\1; .*port \1\b.*"
                       r"(after mxbatch chose it|holds it)",
    Fault.CANCEL_QUEUED: r"cancelled by the user",
    Fault.CANCEL_RUNNING: r"cancelled by the user",
    Fault.DEADLOCK: r"worker\[0\] finished; worker\[1\] blocked \d+s in a kvstore call",
    Fault.EXIT_HANG: r"MXNet's exit hang: worker\[0\] \(hung \d+s\) and worker\[1\] "
                     r"\(hung \d+s\) were ended",
}
CANCELLED = (Fault.CANCEL_QUEUED, Fault.CANCEL_RUNNING)
#: faults after which the job succeeds (the note, not the reason, names the cause)
SUCCEEDS = (Fault.EXIT_HANG,)
#: what the workers do when the cell ends them (the file ``end`` appears)
ENDING = {Fault.DEADLOCK: "FAKE_BLOCK_RANK: '1'", Fault.EXIT_HANG: "FAKE_HANG_AT_EXIT_RANKS: '0,1'"}
STARVED = (Fault.NEVER_STARTS, Fault.CANCEL_QUEUED)


class Occupied:
    """Listeners on a port (what ``Profile.occupy`` made) that accept and count every
    connection; ``release`` closes them and says how many they accepted."""

    def __init__(self, release: Callable[[], int]) -> None:
        self._release = release

    def release(self) -> int:
        return self._release()


def occupy_here(port: int) -> Occupied:
    """Listen on ``port`` on every address of this host, accepting connections."""
    sock = socket.socket()
    sock.bind(("", port))
    sock.listen(16)
    accepted = [0]

    def serve() -> None:
        while True:
            try:
                connection, _ = sock.accept()
            except OSError:
                return  # closed
            accepted[0] += 1
            connection.close()

    thread = threading.Thread(target=serve, daemon=True)
    thread.start()

    def release() -> int:
        sock.shutdown(socket.SHUT_RDWR)
        sock.close()
        thread.join(5)
        return accepted[0]
    return Occupied(release)


@dataclasses.dataclass(frozen=True)
class Profile:
    """How the matrix runs on one backend: its test cluster (None: none needed), its
    options, how to starve a job (a task that cannot start: other options, or
    ``starved_worker``, the workers' resources), how to see what is left in its queue,
    and how to occupy a port where the scheduler will run. ``spec``: spec lines every
    cell's job gets; ``session``: the environment all cells run in, made from the
    cluster's (e.g. with a driver started for them); ``watch``: started after submit
    when the task records are not in the run directory by themselves (returns the
    stop); ``finished_at``: when the backend says the job ended (None: unknown)."""

    backend: str
    cluster: Optional[str] = None
    options: str = ""
    spec: str = ""
    starved_options: str = ""
    starved_spec: str = ""
    starved_worker: str = ""
    queued: Callable[[object, str], List[str]] = lambda cli, job: []
    occupy: Callable[[int], Occupied] = None  # type: ignore[assignment]
    session: Callable[[Dict[str, str]], ContextManager[Dict[str, str]]] = contextlib.nullcontext
    watch: Optional[Callable[[object, str], Callable[[], None]]] = None
    finished_at: Callable[[object, str], Optional[float]] = lambda cli, job: None


def occupy_on_test_hosts(port: int) -> Occupied:
    """Listen on ``port`` in every namespace test host (the Slurm nodes, SGE's execds),
    accepting connections."""
    import os
    import subprocess

    from .conftest import cluster_environment

    env = cluster_environment("hosts")
    code = ("import socket; s = socket.socket(); s.bind(('', %d)); s.listen(16); "
            "print('ok', flush=True)\n"
            "while True: s.accept()[0].close(); print('accepted', flush=True)" % port)
    listeners = []
    for host in env["MXBATCH_TEST_HOST_NAMES"].split():
        proc = subprocess.Popen([env["MXBATCH_TEST_HOSTS_EXEC"], host, sys.executable, "-c",
                                 code], stdout=subprocess.PIPE, text=True,
                                start_new_session=True, env=dict(os.environ, **env))
        proc.stdout.readline()  # listening
        listeners.append(proc)

    def release() -> int:
        accepted = 0
        for proc in listeners:
            os.killpg(proc.pid, 9)
            accepted += proc.stdout.read().count("accepted")
            proc.wait()
        return accepted
    return Occupied(release)


def occupy_where_sge_runs(port: int) -> Occupied:
    """Listen on ``port`` where the SGE test cell runs its tasks: this host, or the
    namespace test hosts when the cell's exec hosts are those (``MXBATCH_SGE_HOSTS``)."""
    from .conftest import cluster_environment

    if cluster_environment("sge").get("MXBATCH_SGE_HOSTS"):
        return occupy_on_test_hosts(port)
    return occupy_here(port)


def _sge_queued(cli, job: str) -> List[str]:
    from .clusterjobs import sge_queued

    return sge_queued(cli, job)


def _slurm_queued(cli, job: str) -> List[str]:
    from .clusterjobs import slurm_queued

    return slurm_queued(cli, job)


def mirror_records(cli, job: str) -> Callable[[], None]:
    """Start ``tests/mirror.py`` for ``job`` (its records into its run directory);
    returns the stop."""
    log = open(cli.home / f"mirror-{job}.log", "ab")
    proc = subprocess.Popen([sys.executable, str(Path(__file__).with_name("mirror.py")), job],
                            env=cli.env, stdout=subprocess.DEVNULL, stderr=log,
                            start_new_session=True)
    log.close()

    def stop() -> None:
        proc.kill()
        proc.wait()
    return stop


def _yarn_queued(cli, job: str) -> List[str]:
    from .yarnjobs import yarn_left

    return yarn_left(cli, job)


def _skein_driver(env: Dict[str, str]) -> ContextManager[Dict[str, str]]:
    from .yarnjobs import skein_driver

    return skein_driver(env)


def _yarn_finished_at(cli, job: str) -> Optional[float]:
    from .yarnjobs import yarn_finished_at

    return yarn_finished_at(cli, job)


PROFILES: Dict[str, Profile] = {
    "local": Profile("local", starved_options="slots: 3", occupy=occupy_here),
    # tiny.q: 2 slots, only for jobs asking -l small; 2 of the 4 tasks never start; the
    # execds run in the namespace test hosts, so the port is taken there
    "sge": Profile("sge", cluster="sge", options="submitter: qsub",
                   starved_options="submitter: qsub, native: [-l, small]",
                   queued=_sge_queued, occupy=occupy_where_sge_runs),
    # partition tiny: one node with 1 CPU; 3 of the 4 tasks never start
    "slurm": Profile("slurm", cluster="slurm", starved_options="partition: tiny",
                     queued=_slurm_queued, occupy=occupy_on_test_hosts),
    # one NodeManager (8192 MB, the maximum allocation) on 127.0.0.1: 8 GB workers are
    # accepted but never fit next to the application master; the workdir is used in
    # place (same host), the task records are read from the key-value store
    "yarn": Profile("yarn", cluster="yarn", options="ship_workdir: false",
                    spec="resources: {memory: 256M}\n",
                    starved_options="ship_workdir: false", starved_worker="memory: 8G",
                    queued=_yarn_queued, occupy=occupy_here, session=_skein_driver,
                    watch=mirror_records, finished_at=_yarn_finished_at),
}


@dataclasses.dataclass
class Cell:
    backend: str
    fault: Fault
    ok: bool
    seconds: Optional[float]
    reason: str
    problem: str = ""

    def row(self) -> List[str]:
        mark = "ok" if self.ok else "FAILED: " + self.problem
        return [self.fault.value, f"{self.seconds:.1f} s" if self.seconds is not None else "-",
                mark, self.reason[:90]]


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("", 0))
        return sock.getsockname()[1]


def write_spec(tmp_path: Path, profile: Profile, fault: Fault, port: int) -> Path:
    role = json.dumps([sys.executable, str(FAKEROLE)])
    starved = fault in STARVED
    options = profile.starved_options if starved else profile.options
    worker = (f", resources: {{{profile.starved_worker}}}"
              if starved and profile.starved_worker else "")
    stolen = (f", FAKE_JOIN: '1', FAKE_SCHEDULER_BIND_AFTER: '{tmp_path / 'bind'}'"
              if fault is Fault.PORT_STOLEN else "")
    ending = f", {ENDING[fault]}" if fault in ENDING else ""
    text = (f"name: fm-{fault.name.lower().replace('_', '-')}\ncommand: {role}\n"
            f"workdir: {tmp_path}\n"
            f"env: {{FAKE_TICK: '0.5', FAKE_BARRIER: '{tmp_path / 'end'}', "
            f"FAKE_RAISE_RANK: '1', FAKE_RAISE_ON: '{tmp_path / 'raise'}'{stolen}{ending}}}\n"
            f"roles: {{server: {{count: 1}}, worker: {{count: 2{worker}}}}}\n"
            f"rendezvous: {{startup_timeout: {'15s' if fault is Fault.NEVER_STARTS else '3m'}"
            f", {TIMEOUTS}}}\n")
    text += profile.spec
    if fault in (Fault.PORT_TAKEN, Fault.PORT_STOLEN):
        text += f"network: {{ports: {port}-{port}}}\n"
    if starved and profile.starved_spec:
        text += profile.starved_spec
    if options:
        text += f"backends:\n  {profile.backend}: {{{options}}}\n"
    path = tmp_path / "fault.yaml"
    path.write_text(text)
    return path


def _records(cli, job: str) -> Dict[str, dict]:
    layout = RunLayout(str(cli.run_dir(job)))
    found = {}
    for name in ("scheduler-0", "server-0", "worker-0", "worker-1"):
        role, rank = name.rsplit("-", 1)
        try:
            found[name] = json.loads(Path(layout.task_record(role, int(rank))).read_text())
        except (OSError, ValueError):
            found[name] = {}
    return found


def _scheduler(cli, job: str) -> dict:
    path = Path(RunLayout(str(cli.run_dir(job))).scheduler)
    try:
        return json.loads(path.read_text())
    except (OSError, ValueError):
        return {}


def _listening(cli, job: str) -> bool:
    return bool(_scheduler(cli, job).get("listening"))


def _steal_port(cli, profile: Profile, job: str, port: int, tmp_path: Path,
                deadline_s: float = 180) -> Occupied:
    """Once the scheduler's supervisor has chosen ``port`` and started the role (which
    binds only once ``bind`` exists), listen there first, then let the role bind."""
    end = time.time() + deadline_s
    while _scheduler(cli, job).get("port") != port:
        if time.time() > end:
            raise AssertionError(f"{job}: no scheduler record for port {port} within "
                                 f"{deadline_s}s: {_scheduler(cli, job)}")
        time.sleep(0.1)
    occupied = profile.occupy(port)
    (tmp_path / "bind").touch()
    return occupied


def _wait_running(cli, job: str, deadline_s: float = 180) -> Dict[str, dict]:
    """Every task's record once all run and the scheduler listens."""
    def ready(records: Dict[str, dict]) -> bool:
        return (all(r.get("state") == "RUNNING" and r.get("pid") for r in records.values())
                and _listening(cli, job))

    records = poll(lambda: _records(cli, job), ready, deadline_s)
    if ready(records):
        return records
    raise AssertionError(f"{job}: the tasks did not all run within {deadline_s}s: "
                         + ", ".join(f"{k} {v.get('state')}" for k, v in records.items())
                         + f"; scheduler listening: {_listening(cli, job)}")


def _inject(fault: Fault, records: Dict[str, dict], tmp_path: Path) -> None:
    import os
    import signal

    if fault is Fault.WORKER_RAISES:
        (tmp_path / "raise").touch()
    elif fault is Fault.WORKER_KILLED:
        os.kill(records["worker-1"]["pid"], signal.SIGKILL)
    elif fault is Fault.SERVER_KILLED:
        os.kill(records["server-0"]["pid"], signal.SIGKILL)
    elif fault is Fault.SCHEDULER_KILLED:
        os.kill(records["scheduler-0"]["pid"], signal.SIGKILL)
    elif fault is Fault.WORKER_STOPPED:
        os.kill(records["worker-1"]["pid"], signal.SIGSTOP)
    elif fault is Fault.SUPERVISOR_KILLED:
        os.kill(records["worker-1"]["supervisor_pid"], signal.SIGKILL)
    elif fault in ENDING:  # the workers end their code: one blocks, or both hang at exit
        (tmp_path / "end").touch()


def run_cell(cli, profile: Profile, fault: Fault, tmp_path: Path) -> Cell:
    """Run one cell (see the module docstring); never raises for a failed check."""
    port = free_port()
    occupied = profile.occupy(port) if fault is Fault.PORT_TAKEN else None
    job = ""
    unwatch: Optional[Callable[[], None]] = None
    try:
        spec = write_spec(tmp_path, profile, fault, port)
        job = cli.submit(spec, "--backend", profile.backend)
        if profile.watch is not None:
            unwatch = profile.watch(cli, job)
        if fault in (Fault.NEVER_STARTS, Fault.PORT_TAKEN):
            injected = time.time()
        elif fault is Fault.PORT_STOLEN:
            occupied = _steal_port(cli, profile, job, port, tmp_path)
            injected = time.time()
        elif fault is Fault.CANCEL_QUEUED:
            # some tasks may start: the starved ones stay queued
            poll(lambda: _records(cli, job)["scheduler-0"].get("state"), bool, 60)
            injected = time.time()
        else:
            records = _wait_running(cli, job)
            injected = time.time()
            _inject(fault, records, tmp_path)
        if fault in CANCELLED:
            result = cli.run("cancel", job)
        else:
            result = cli.run("wait", job, "--timeout", "120")
        status = cli.status(job)
        reason = status.get("note" if fault in SUCCEEDS else "reason", "")
        if unwatch is not None:
            unwatch()
            unwatch = None
        ended = [r["ended_at"] for r in _records(cli, job).values()
                 if r.get("ended_at") and fault is not Fault.CANCEL_QUEUED]
        finished = profile.finished_at(cli, job)
        if finished is not None:
            ended.append(finished)
        seconds = (max(ended) if ended else time.time()) - injected
        problems = []
        want_state = ("CANCELLED" if fault in CANCELLED else "SUCCEEDED" if fault in SUCCEEDS
                      else "FAILED")
        want_code = 0 if fault in CANCELLED + SUCCEEDS else 1
        if result.returncode != want_code:
            problems.append(f"exit {result.returncode}: {result.stderr.strip()[-300:]}")
        if status["state"] != want_state:
            problems.append(f"state {status['state']}")
        if not re.search(EXPECTED[fault], reason):
            problems.append(f"reason does not match {EXPECTED[fault]!r}")
        # what the batch system still has to reap
        left = poll(lambda: procs.job_processes(job), lambda pids: not pids, LEFT_S)
        if left:
            procs.kill_all(left)
            problems.append(f"processes left: {left}")
        queued = profile.queued(cli, job)
        if queued:
            problems.append(f"left in the queue: {queued}")
        if fault is Fault.PORT_STOLEN and occupied is not None:
            joined = occupied.release()
            occupied = None
            if joined:
                problems.append(f"the foreign listener on port {port} accepted {joined} "
                                "connection(s): the job took it for its scheduler")
        return Cell(profile.backend, fault, not problems, seconds, reason, "; ".join(problems))
    except Exception as exc:  # a broken cell is a failed cell, with the reason
        return Cell(profile.backend, fault, False, None, "", f"{type(exc).__name__}: {exc}")
    finally:
        if unwatch is not None:
            unwatch()
        if occupied is not None:
            occupied.release()
        if job:
            cli.run("cancel", job)
