"""mxbatch at scale: jobs of N stand-in roles, measured from the job's own records.

    python bench/scale.py [--backends local,ssh,mpi,sge,yarn,slurm,slurm-alloc]
        [--sizes 16,64,256,1000] [--json PATH] [--charts] [--write-docs]
        [--raise-max-tasks] [--idle-seconds S] [--settle-seconds S]
        [--from-json A.json,B.json]

For each backend and each N (N = servers + workers + 1 scheduler, servers = N/8) it
submits one job of stand-in roles (bench/scalerole.py: the scheduler listens, every
server and worker connects to it, keeps the connection and blocks, as idle as a ps-lite
role waiting for work) with ``mxbatch submit --wait`` and measures:

  - submit -> all running: from the submit (the CLI's start) to the last task record's
    ``exec_at`` (the supervisor's exec of the role), once every task is RUNNING (the
    digest says so; on YARN, whose digest lives in the application's key-value store,
    the task records the CLI mirrors);
  - status: ``mxbatch status JOB --json`` as a fresh process, median of 3 (wall);
  - teardown: one worker is SIGKILLed; from the abort record's ``at`` to the last task
    record's ``ended_at`` (YARN: to the last of the job's processes gone, since the
    tasks' last records die with the application);
  - CPU s and peak MiB of the launcher: the ``submit --wait`` process. Local: it is the
    job's agent, its roles are its children; CPU is its own user + system time (read
    from /proc/PID/stat while it is a zombie, so the roles it reaped are not counted)
    and peak is its own VmHWM (sampled every 0.25 s). Other backends: the CLI and its
    children (ssh, mpirun, qsub, sbatch, squeue, the DRMAA helper, YARN's skein driver;
    the roles are not among them), from wait4; the per-host agents' CPU just before the
    kill is in the JSON (``agents_cpu_s``);
  - job MiB: the proportional set sizes of the job's processes on this machine summed
    (every test host and node is a network namespace of this machine), and idle cores:
    their CPU over 10 s while every task runs and nothing happens, in cores;
  - floor: one trivial job of N tasks through the backend's own tool (scalefloor.py).

The slope of each column is the log-log slope between the smallest and the largest N
measured, named flat (< 0.35), sub-linear (< 0.8), linear (< 1.4), super-linear (< 1.8)
or quadratic. Backends other than local need their test cluster up (an env file under
$MXBATCH_CLUSTER_STATE, default /tmp/mxbatch-clusters: hosts.env for ssh and mpi,
sge.env, yarn.env, slurm.env for slurm and slurm-alloc); one that is not up is
skipped with a line. slurm submits arrays (a task a CPU); slurm-alloc runs the CLI
inside ``salloc`` of the default partition's nodes, one CPU each (the slurm-steps
variant: an agent a node as an srun step, the node's roles sharing its CPU). On a cluster
that holds fewer tasks than some N (its slots, CPUs or containers) the largest job it
holds is measured too; a size waits (up to 10 min) while other users' jobs leave too
little room. A backend stops at the first N it cannot hold (its ceiling of tasks, this
machine's memory, the cluster's capacity) or at the first N that fails; the line says
why. Every job runs under a private MXBATCH_HOME and is cancelled, and its processes
killed, on any error. --from-json merges several runs' files (one backend at a time,
each with its own date and load).
"""

from __future__ import annotations

import argparse
import json
import math
import os
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Dict, List, Optional, Tuple

from common import ROOT, STATE, cluster_env, compile_mxbatch, print_table
from scalefloor import FLOORS, floor_local

from mxbatch.runtime.layout import RunLayout
from mxbatch.runtime.procs import job_processes, kill_all, wait_gone

ROLE = Path(__file__).resolve().with_name("scalerole.py")
ROLE_ARGV = [sys.executable, "-I", "-S", str(ROLE)]
#: resident memory one stand-in role costs, with some of its agent's share (MiB; one
#: measured 9-10 MiB RSS, most of it the interpreter's pages shared with the others)
ROLE_MIB = 12
#: what a task's own supervisor adds where every task has one (SGE, Slurm, YARN):
#: measured 25-30 MiB RSS (``job_mib`` in the JSON), the runtime zipapp's imports
SUPERVISOR_MIB = 30
#: memory each batch task asks for: SGE's h_vmem limits the virtual memory of the task's
#: processes (a supervisor and its role reach about 120 MB of it; 64M killed them);
#: YARN's scheduler here counts memory only, so the container size sets its capacity
#: (the NodeManager checks no limit)
TASK_MEMORY = {"sge": "256M", "slurm": "256M", "yarn": "64M"}
#: skein's application master (mxbatch asks for 512 MiB)
YARN_MASTER_MB = 512
#: seconds over which the job's CPU is measured while its tasks idle
IDLE_S = 10.0
#: how long a size waits for the load of the one before to settle
SETTLE_S = 120
#: how long a size waits for other users' jobs to leave it room on a shared cluster
WAIT_FOR_ROOM_S = 600
#: seconds a size may take to have every task running before it counts as failed
RUNNING_TIMEOUT_S = 900
SLOPE_NAMES = ((0.35, "flat"), (0.8, "sub-linear"), (1.4, "linear"), (1.8, "super-linear"),
               (math.inf, "quadratic"))
COLUMNS = (("submit_to_running_s", "submit->running"), ("teardown_s", "teardown"),
           ("status_s", "status"), ("cpu_s", "CPU s"), ("peak_mib", "peak MiB"),
           ("floor_s", "floor"), ("job_mib", "job MiB"), ("idle_cores", "idle cores"))


class Stop(Exception):
    """This backend goes no further: the message says at which N and why."""


@dataclass
class Backend:
    """One way of running the jobs: its cluster env file (None: none needed), its spec
    options, and how many tasks it can hold at once (None: as many as memory allows)."""

    name: str
    cluster: Optional[str] = None
    options: Callable[[Dict[str, str]], str] = lambda env: ""
    capacity: Callable[[Dict[str, str]], Optional[int]] = lambda env: None
    extra_env: Dict[str, str] = field(default_factory=dict)
    #: the most tasks the backend allows unless the spec's max_tasks says otherwise
    ceiling: int = 10_000
    #: memory a task costs on this machine (MiB): its role, and its supervisor where
    #: every task has one (the hosts' agents and the batch systems' tasks run here too)
    task_mib: int = ROLE_MIB
    #: what ``capacity`` counts, for the line that says a size does not fit
    holds: str = "slots"
    #: how many tasks the cluster could start now (other users' jobs hold the rest;
    #: None: no cluster to share); a size waits for room (``WAIT_FOR_ROOM_S``)
    free: Callable[[Dict[str, str]], Optional[int]] = lambda env: None
    #: the mxbatch backend it runs (default: ``name``) and what the CLI runs under
    #: (``salloc ...``: inside an allocation)
    backend: str = ""
    prefix: Callable[[Dict[str, str]], List[str]] = lambda env: []

    @property
    def mxbatch(self) -> str:
        return self.backend or self.name


def sge_free(env: Dict[str, str]) -> Optional[int]:
    """The default queue's free slots (``qstat -g c``: AVAIL)."""
    out = subprocess.run(["qstat", "-g", "c"], capture_output=True, text=True, env=env,
                         timeout=30).stdout
    for line in out.splitlines():
        fields = line.split()
        if fields and fields[0] == env["MXBATCH_SGE_QUEUE"]:
            return int(fields[4])
    return None


def slurm_nodes(env: Dict[str, str]) -> int:
    """How many nodes the default partition has."""
    out = subprocess.run(["sinfo", "-h", "-o", "%P %D"], capture_output=True, text=True,
                         env=env, timeout=30).stdout
    return next(int(line.split()[1]) for line in out.splitlines()
                if line.split()[0].endswith("*"))


def slurm_free(env: Dict[str, str]) -> Optional[int]:
    """The default partition's idle CPUs."""
    return _slurm_default_cpus(env, 1)


def sge_slots(env: Dict[str, str]) -> Optional[int]:
    """The default queue's slots (the small queue takes only jobs that ask for it)."""
    return int(env["MXBATCH_SGE_SLOTS"]) * len(env["MXBATCH_SGE_HOSTS"].split())


def slurm_cpus(env: Dict[str, str]) -> Optional[int]:
    """The default partition's CPUs (``sinfo`` marks it with a ``*``): the job's tasks
    ask for one each and go there."""
    return _slurm_default_cpus(env, 3)


def _slurm_default_cpus(env: Dict[str, str], column: int) -> Optional[int]:
    out = subprocess.run(["sinfo", "-h", "-o", "%P %C"], capture_output=True, text=True,
                         env=env, timeout=30).stdout
    # one line a partition: NAME[*] allocated/idle/other/total
    for line in out.splitlines():
        name, cpus = line.split()
        if name.endswith("*"):
            return int(cpus.split("/")[column])
    return None


def _yarn_metrics(env: Dict[str, str]) -> dict:
    import urllib.request

    url = env["MXBATCH_YARN_RM_URL"] + "/ws/v1/cluster/metrics"
    with urllib.request.urlopen(url, timeout=30) as answer:
        return json.loads(answer.read())["clusterMetrics"]


def _yarn_tasks(memory_mb: int) -> int:
    """Task containers that fit in ``memory_mb`` besides the application master."""
    return max(0, (memory_mb - YARN_MASTER_MB) // int(TASK_MEMORY["yarn"].rstrip("M")))


def yarn_containers(env: Dict[str, str]) -> Optional[int]:
    """How many task containers the cluster holds besides the application master: its
    memory over the containers' (the capacity scheduler here counts memory only)."""
    return _yarn_tasks(_yarn_metrics(env)["totalMB"])


def yarn_free(env: Dict[str, str]) -> Optional[int]:
    return _yarn_tasks(_yarn_metrics(env)["availableMB"])


_HOSTFILE = "hostfile: {}".format
BACKENDS = {
    "local": Backend("local", ceiling=1_000),
    "ssh": Backend("ssh", "hosts", lambda env: _HOSTFILE(env["MXBATCH_TEST_HOSTFILE"])),
    # one agent a host since 2026-12-07; before, every rank was an agent, and 840 of them
    # took longer than the default start_timeout (120 s) to start on 2 cores (a deadline,
    # not the ceiling: kept long for measuring the code before)
    "mpi": Backend("mpi", "hosts", lambda env: _HOSTFILE(env["MXBATCH_TEST_HOSTFILE"])
                   + ", start_timeout: 30m",
                   extra_env={"OMPI_ALLOW_RUN_AS_ROOT": "1",
                              "OMPI_ALLOW_RUN_AS_ROOT_CONFIRM": "1"}),
    "slurm": Backend("slurm", "slurm", capacity=slurm_cpus, free=slurm_free,
                     task_mib=ROLE_MIB + SUPERVISOR_MIB,
                     holds="CPUs in its default partition, one a task"),
    # inside an allocation of every node of the default partition, one CPU each: one
    # agent a node (an srun step), the node's roles sharing its CPU (oversubscribed)
    "slurm-alloc": Backend("slurm-alloc", "slurm", backend="slurm",
                           prefix=lambda env: ["salloc", "--quiet", f"--nodes={slurm_nodes(env)}",
                                               "--job-name=scale-alloc"]),
    "sge": Backend("sge", "sge", lambda env: "submitter: qsub", capacity=sge_slots, free=sge_free,
                   task_mib=ROLE_MIB + SUPERVISOR_MIB,
                   holds="slots in its default queue, one a task"),
    "yarn": Backend("yarn", "yarn", capacity=yarn_containers, free=yarn_free,
                    task_mib=ROLE_MIB + SUPERVISOR_MIB,
                    holds=f"{TASK_MEMORY['yarn']} containers' room besides the application "
                          "master (its scheduler counts memory)"),
}


# ------------------------------------------------------------------ one job


def split(n: int) -> Dict[str, int]:
    """N tasks as 1 scheduler, N/8 servers (at least 1) and the rest workers."""
    servers = max(1, n // 8)
    return {"server": servers, "worker": n - 1 - servers}


def write_spec(folder: Path, backend: Backend, n: int, env: Dict[str, str],
               raise_max: bool) -> Path:
    counts = split(n)
    spec = {
        "name": f"scale{n}", "command": ROLE_ARGV, "workdir": str(folder),
        "roles": {"server": {"count": counts["server"]}, "worker": {"count": counts["worker"]}},
        "rendezvous": {"startup_timeout": "30m", "grace": "5s", "heartbeat_timeout": "2m",
                       "stall_timeout": None},
    }
    if backend.name in TASK_MEMORY:
        spec["resources"] = {"cpus": 1, "memory": TASK_MEMORY[backend.name]}
        if backend.name != "yarn":
            spec["resources"]["walltime"] = "60m"
    if raise_max and n > backend.ceiling:
        spec["max_tasks"] = n
    options = backend.options(env)
    if options or backend.name != "local":
        spec["backends"] = {backend.mxbatch: _flow_map(options)}
    path = folder / f"scale{n}-{backend.name}.yaml"
    path.write_text(json.dumps(spec, indent=1))  # JSON is YAML
    return path


def _flow_map(options: str) -> Dict[str, str]:
    """``key: value, ...`` (no nesting) as a dict."""
    found = {}
    for item in filter(None, (i.strip() for i in options.split(","))):
        key, _, value = item.partition(":")
        found[key.strip()] = value.strip()
    return found


def _read_json(path: Path) -> Optional[dict]:
    try:
        return json.loads(path.read_text())
    except (OSError, ValueError):
        return None


def _records(run_dir: Path) -> List[dict]:
    tasks = Path(RunLayout(str(run_dir)).tasks_dir)
    return [r for r in map(_read_json, sorted(tasks.glob("*.json"))) if r is not None]


def _proc_cpu_s(pid: int) -> Optional[float]:
    """User + system seconds of ``pid`` itself (not its children); works on a zombie."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_bytes()
    except OSError:
        return None
    fields = stat[stat.rindex(b")") + 2:].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def job_pss_mib(job_id: str, but: int) -> Tuple[int, float]:
    """The job's processes on this machine (supervisors, roles, the hosts' agents; not
    the CLI ``but``) and the sum of their proportional set sizes (MiB): what the job holds
    in memory here, shared pages split among the processes that share them."""
    count, kib = 0, 0
    for proc in job_processes(job_id):
        pid = proc if isinstance(proc, int) else proc.pid
        if pid == but:
            continue
        try:
            for line in Path(f"/proc/{pid}/smaps_rollup").read_text().splitlines():
                if line.startswith("Pss:"):
                    kib += int(line.split()[1])
                    count += 1
                    break
        except OSError:
            pass
    return count, kib / 1024


def idle_cores(job_id: str, but: int, seconds: float = IDLE_S) -> float:
    """The CPU the job's processes here (not the CLI ``but``) take while every task runs
    and nothing happens, in cores: their CPU seconds over ``seconds`` of wall time (the
    processes alive at both ends)."""
    def cpu() -> Dict[int, float]:
        found = {}
        for proc in job_processes(job_id):
            pid = proc if isinstance(proc, int) else proc.pid
            spent = _proc_cpu_s(pid) if pid != but else None
            if spent is not None:
                found[pid] = spent
        return found

    before, t0 = cpu(), time.time()
    time.sleep(seconds)
    after, t1 = cpu(), time.time()
    return sum(after[p] - before[p] for p in after.keys() & before.keys()) / (t1 - t0)


def _vm_hwm_kib(pid: int) -> int:
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmHWM:"):
                return int(line.split()[1])
    except OSError:
        pass
    return 0


class Job:
    """One ``mxbatch submit --wait`` of the stand-in job, as a child of this process."""

    def __init__(self, backend: Backend, n: int, env: Dict[str, str], spec: Path) -> None:
        self.backend, self.n, self.env, self.spec = backend, n, env, spec
        self.home = Path(env["MXBATCH_HOME"])
        self.out = tempfile.TemporaryFile()
        self.t0 = time.time()
        # from the spec's folder, not the checkout's root: ``python -m`` puts the working
        # directory first on sys.path, where this checkout's mxbatch would win over a
        # baseline's PYTHONPATH (MXBATCH_HOME does not exist before the submit makes it)
        self.cwd = spec.parent
        self.proc = subprocess.Popen(
            backend.prefix(env) + [sys.executable, "-m", "mxbatch", "submit", "--wait",
                                   "--quiet", "-b", backend.mxbatch, str(spec)],
            stdout=self.out, stderr=subprocess.STDOUT, env=env, start_new_session=True,
            cwd=self.cwd)
        self.job_id: Optional[str] = None
        self.run_dir: Optional[Path] = None
        self.peak_kib = 0
        self._stop = threading.Event()
        self._sampler = threading.Thread(target=self._sample, daemon=True)
        self._sampler.start()

    def _sample(self) -> None:
        while not self._stop.wait(0.25):
            self.peak_kib = max(self.peak_kib, _vm_hwm_kib(self.proc.pid))

    def output(self) -> str:
        self.out.seek(0)
        return self.out.read().decode(errors="replace")

    def said(self, keep: int = 1000) -> str:
        """The CLI's output, its start and its end when it is long (the cause comes first)."""
        text = self.output()
        return text if len(text) <= 2 * keep else f"{text[:keep]}\n[...]\n{text[-keep:]}"

    def find(self, timeout: float = 120) -> None:
        """The job's id and run directory, from its record in the private home."""
        deadline = time.time() + timeout
        while time.time() < deadline and self.proc.poll() is None:
            for path in (self.home / "jobs").glob("*.json"):
                record = _read_json(path)
                if record and record.get("run_dir"):
                    self.job_id, self.run_dir = path.stem, Path(record["run_dir"])
                    return
            time.sleep(0.1)
        raise RuntimeError(f"no job record after {timeout:.0f} s; the CLI said:\n"
                           + self.said())

    def wait_running(self, timeout: float) -> List[dict]:
        """Every task record, once every task is RUNNING: the digest says so, or (where
        the run directory mirrors a job whose digest lives elsewhere, as YARN's in the
        application's key-value store: the CLI mirrors the task records only) the
        records do."""
        assert self.run_dir is not None
        digest = Path(RunLayout(str(self.run_dir)).digest)
        deadline = time.time() + timeout
        while time.time() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"the job ended (exit {self.proc.returncode}) before every "
                                   f"task ran:\n{self.said()}")
            states = (_read_json(digest) or {}).get("states")
            if states is None or states.get("RUNNING") == self.n:
                records = _records(self.run_dir)
                if len(records) == self.n and all(r.get("exec_at") and r.get("state") == "RUNNING"
                                                  for r in records):
                    return records
            time.sleep(0.5)
        raise RuntimeError(f"not every task was running after {timeout:.0f} s")

    def status_latency(self, repeat: int = 3) -> List[float]:
        times = []
        for _ in range(repeat):
            t0 = time.time()
            result = subprocess.run([sys.executable, "-m", "mxbatch", "status", str(self.job_id),
                                     "--json"], capture_output=True, text=True, env=self.env,
                                    timeout=300, cwd=self.cwd)
            times.append(time.time() - t0)
            if result.returncode != 0:
                raise RuntimeError(f"status exited {result.returncode}: {result.stderr[-1000:]}")
            json.loads(result.stdout)
        return times

    def finish(self, timeout: float = 300) -> dict:
        """Waits for the CLI to exit; its own CPU (as a zombie) and its rusage."""
        deadline = time.time() + timeout
        while time.time() < deadline:
            if os.waitid(os.P_PID, self.proc.pid, os.WEXITED | os.WNOWAIT | os.WNOHANG):
                break
            time.sleep(0.05)
        else:
            raise RuntimeError(f"the CLI had not exited {timeout:.0f} s after the kill")
        exited_at = time.time()
        self._stop.set()
        own = _proc_cpu_s(self.proc.pid)
        _, status, usage = os.wait4(self.proc.pid, 0)
        self.proc.returncode = os.waitstatus_to_exitcode(status)
        return {"rc": self.proc.returncode, "own_cpu_s": own, "exited_at": exited_at,
                "tree_cpu_s": usage.ru_utime + usage.ru_stime,
                "tree_maxrss_mib": usage.ru_maxrss / 1024}

    def clean(self) -> List[int]:
        """Cancels the job and kills what is left of it; the pids that were left."""
        self._stop.set()
        if self.proc.poll() is None:
            kill_all([self.proc.pid], signal.SIGTERM)
            try:
                self.proc.wait(30)
            except subprocess.TimeoutExpired:
                kill_all([self.proc.pid], signal.SIGKILL)
                self.proc.wait()
        if not self.job_id:
            return []
        subprocess.run([sys.executable, "-m", "mxbatch", "cancel", self.job_id],
                       capture_output=True, env=self.env, timeout=300, cwd=self.cwd)
        left = wait_gone(job_processes(self.job_id), 30)
        kill_all(left, signal.SIGKILL)
        wait_gone(left, 10)
        return [p if isinstance(p, int) else p.pid for p in left]


def measure(backend: Backend, n: int, env: Dict[str, str], folder: Path,
            raise_max: bool, idle_s: float = IDLE_S) -> dict:
    """One job of N tasks on ``backend``; raises on any failure (after cleaning up)."""
    spec = write_spec(folder, backend, n, env, raise_max)
    env = dict(env, MXBATCH_HOME=str(folder / f"home-{n}"))  # this job's alone
    result: dict = {"backend": backend.name, "n": n, **split(n),
                    "load_at_start": [round(x, 2) for x in os.getloadavg()]}
    job = Job(backend, n, env, spec)
    try:
        job.find()
        assert job.run_dir is not None
        records = job.wait_running(RUNNING_TIMEOUT_S)
        result["job"] = job.job_id
        result["cli_cpu_to_running_s"] = _proc_cpu_s(job.proc.pid)
        result["submit_to_running_s"] = max(r["exec_at"] for r in records) - job.t0
        spent = [r["exec_cpu_s"] for r in records if r.get("exec_cpu_s") is not None]
        if spent:  # what a task's supervisor took before it exec'd the role
            result["exec_cpu_mean_s"] = statistics.mean(spent)
        reached = [r.get("reached_at") for r in records]
        if all(reached):
            result["submit_to_reached_s"] = max(reached) - job.t0
        statuses = job.status_latency()
        result["status_runs_s"] = statuses
        result["status_s"] = statistics.median(statuses)
        result["job_processes"], result["job_mib"] = job_pss_mib(str(job.job_id), job.proc.pid)
        result["idle_cores"] = idle_cores(str(job.job_id), job.proc.pid, idle_s)
        agents = {r["supervisor_pid"] for r in records if r.get("supervisor_pid")}
        agents.discard(job.proc.pid)
        result["agents_cpu_s"] = sum(_proc_cpu_s(p) or 0.0 for p in agents)
        victim = next(r for r in records
                      if r["role"] == "worker" and r["rank"] == split(n)["worker"] // 2)
        os.kill(victim["pid"], signal.SIGKILL)
        gone_at = processes_gone(str(job.job_id), job.proc.pid) if backend.name == "yarn" else 0
        ended = job.finish()
        exited_at = ended.pop("exited_at")
        result.update(ended)
        abort = _read_json(Path(RunLayout(str(job.run_dir)).abort)) or {}
        ends = [r.get("ended_at") for r in _records(job.run_dir)]
        if backend.name == "yarn" and not all(ends):
            # the tasks' last records die with the application's key-value store (the
            # CLI mirrored them while they ran): the last of the job's processes here
            # (supervisors and roles in the NodeManager's containers) stands for them
            ends = [gone_at]
            result["teardown_to"] = "the job's last process gone"
            result["app_finished_s"] = (yarn_finished_at(job.home / "jobs"
                                                         / f"{job.job_id}.json") - abort["at"])
        if not abort.get("at") or not all(ends):
            raise RuntimeError(f"no abort record or a task without ended_at: {abort}")
        result["teardown_s"] = max(ends) - abort["at"]
        result["abort_reason"] = abort.get("reason", "")
        result["cli_exit_after_abort_s"] = exited_at - abort["at"]  # +0.05 s
        if backend.name == "local":
            result["cpu_s"], result["peak_mib"] = ended["own_cpu_s"], job.peak_kib / 1024
        else:
            result["cpu_s"], result["peak_mib"] = ended["tree_cpu_s"], ended["tree_maxrss_mib"]
    finally:
        left = job.clean()
        if left:
            result["left_behind"] = left
            print(f"  {backend.name} N={n}: killed {len(left)} processes left behind: {left}",
                  flush=True)
    return result


def processes_gone(job_id: str, but: int, timeout: float = 300) -> float:
    """When the last of the job's processes on this machine (not the CLI ``but``) was
    seen gone (looked for every 0.1 s); 0 if some were still there after ``timeout``."""
    deadline = time.time() + timeout
    while time.time() < deadline:
        if not [p for p in job_processes(job_id) if (p if isinstance(p, int) else p.pid) != but]:
            return time.time()
        time.sleep(0.1)
    return 0.0


def yarn_finished_at(job_record: Path) -> float:
    """When the ResourceManager says the job's application finished (its REST API)."""
    import urllib.request

    handle = json.loads(job_record.read_text())["handle"]
    url = f"{handle['rm_urls'][0]}/ws/v1/cluster/apps/{handle['app_id']}"
    deadline = time.time() + 60
    while time.time() < deadline:
        with urllib.request.urlopen(url, timeout=30) as answer:
            finished = json.loads(answer.read())["app"].get("finishedTime") or 0
        if finished > 0:
            return finished / 1000
        time.sleep(0.5)
    raise RuntimeError(f"{handle['app_id']} had not finished 60 s after the CLI exited")


def floor(backend: Backend, n: int, env: Dict[str, str], folder: Path) -> dict:
    """One trivial job of N tasks through the backend's own tool (``scalefloor``); a
    failure is said in the row (``floor_error``), not a stop."""
    try:
        if backend.name == "local":
            return floor_local(n, env, folder, ROLE_ARGV, split(n))
        return FLOORS[backend.name](n, env, folder)
    except Exception as exc:  # the floor is a reference; the measurement stands without it
        return {"floor_error": f"{type(exc).__name__}: {str(exc).strip()[:500]}"}


# ------------------------------------------------------------------ a backend's sizes


def memory_available_mib() -> float:
    for line in Path("/proc/meminfo").read_text().splitlines():
        if line.startswith("MemAvailable:"):
            return int(line.split()[1]) / 1024
    return math.inf


def settle(timeout: float = SETTLE_S) -> None:
    """Until the 1-minute load average is below 2 a core (the previous size's teardown
    of hundreds of processes leaves it far above), at most ``timeout`` seconds."""
    deadline = time.time() + timeout
    while os.getloadavg()[0] > 2 * (os.cpu_count() or 1) and time.time() < deadline:
        time.sleep(5)


def wait_for_room(backend: Backend, n: int, env: Dict[str, str]) -> None:
    """Until the cluster could start all N tasks (other users' jobs share it), or
    ``Stop`` after WAIT_FOR_ROOM_S."""
    deadline = time.time() + WAIT_FOR_ROOM_S
    said = False
    while True:
        free = backend.free(env)
        if free is None or free >= n:
            return
        if time.time() > deadline:
            raise Stop(f"stopped before N={n}: the cluster was busy with other jobs (room "
                       f"for {free} tasks after {WAIT_FOR_ROOM_S} s)")
        if not said:
            print(f"{backend.name} N={n}: waiting for room (other jobs leave {free})",
                  flush=True)
            said = True
        time.sleep(5)


def fits_in_memory(backend: Backend, rows: List[dict]) -> int:
    """The largest N (two significant digits) that 80 % of this machine's available
    memory holds at the memory a task took so far; 0 before any size was measured."""
    if not rows:
        return 0
    n = int(0.8 * memory_available_mib() / task_mib(backend, rows))
    step = 10 ** max(0, len(str(n)) - 2)
    return n // step * step


def task_mib(backend: Backend, rows: List[dict]) -> float:
    """Memory a task will cost on this machine: what one cost at the largest N so far
    (the job's proportional set size over N), with a quarter more for what is not
    counted (sshd, orted, the batch systems' shepherds and NodeManager); before any,
    the backend's estimate."""
    if rows and rows[-1].get("job_mib"):
        return 1.25 * rows[-1]["job_mib"] / rows[-1]["n"]
    return backend.task_mib


def run_backend(backend: Backend, sizes: List[int], home: Path, raise_max: bool,
                on_row: Callable[[List[dict]], None] = lambda rows: None,
                idle_s: float = IDLE_S, settle_s: float = SETTLE_S) -> dict:
    """Every size in turn, until one cannot be held or fails: {"rows", "stopped"}.
    ``on_row``: called with the rows so far after each size."""
    env = dict(os.environ) if backend.cluster is None else cluster_env(backend.cluster)
    env.update(backend.extra_env, MXBATCH_HOME=str(home), MXBATCH_CONFIG="",
               PATH=os.path.dirname(sys.executable) + os.pathsep + env["PATH"])
    home.mkdir(parents=True, exist_ok=True)
    folder = Path(tempfile.mkdtemp(prefix=f"scale-{backend.name}-", dir=home))
    rows: List[dict] = []
    stopped = ""
    measured = {"date": time.strftime("%Y-%m-%d %H:%M %Z"),
                "load_at_start": [round(x, 2) for x in os.getloadavg()]}
    capacity = backend.capacity(env)
    if capacity is not None and capacity >= 3 and any(n > capacity for n in sizes):
        # the largest job the cluster runs at once is measured too, before the stop
        sizes = sorted({n for n in sizes if n < capacity} | {capacity}
                       | {n for n in sizes if n > capacity})
    pending = list(sizes)
    squeezed = False
    while pending:
        n = pending.pop(0)
        try:
            if n > backend.ceiling and not raise_max:
                raise Stop(f"stopped before N={n}: above the {backend.name} backend's ceiling "
                           f"of {backend.ceiling} tasks (the spec key max_tasks raises it; "
                           f"--raise-max-tasks)")
            if capacity is not None and n > capacity:
                raise Stop(f"stopped before N={n}: the cluster has {capacity} {backend.holds}, "
                           f"so not every task could run at once")
            fits = fits_in_memory(backend, rows)
            if n * task_mib(backend, rows) > 0.8 * memory_available_mib() and not squeezed \
                    and rows and rows[-1]["n"] < fits < n:
                # the largest job that fits in memory is measured first (once), then the stop
                pending.insert(0, n)
                n, squeezed = fits, True
            need = n * task_mib(backend, rows)
            if need > 0.8 * memory_available_mib():
                raise Stop(f"stopped before N={n}: about {need:.0f} MiB needed "
                           f"({need / n:.0f} MiB a task), {memory_available_mib():.0f} MiB "
                           f"available on this machine (at most 80 % of it is used)")
            wait_for_room(backend, n, env)
            settle(settle_s)
            print(f"{backend.name} N={n}: load average "
                  f"{' '.join('%.1f' % x for x in os.getloadavg())}", flush=True)
            row = measure(backend, n, env, folder, raise_max, idle_s)
            row.update(floor(backend, n, env, folder))
            if row.get("floor_error"):
                print(f"  floor: {row['floor_error']}", flush=True)
            rows.append(row)
            on_row(rows)
            print("  " + ", ".join(f"{label} {_cell(row.get(key))}" for key, label in COLUMNS),
                  flush=True)
        except Stop as stop:
            stopped = str(stop)
            break
        except Exception as exc:  # any failure stops this backend, said
            stopped = f"stopped at N={n}: {type(exc).__name__}: {str(exc).strip()[:2500]}"
            break
        finally:
            if stopped:
                print(f"  {backend.name}: {stopped}", flush=True)
    return {"rows": rows, "stopped": stopped, "slopes": slopes(rows), "measured": measured,
            "capacity": capacity}


def slopes(rows: List[dict]) -> Dict[str, dict]:
    """The log-log slope of each column between the smallest and the largest N."""
    found = {}
    for key, _ in COLUMNS:
        points = [(r["n"], r[key]) for r in rows if r.get(key)]
        if len(points) < 2:
            continue
        (n1, y1), (n2, y2) = points[0], points[-1]
        slope = math.log(y2 / y1) / math.log(n2 / n1)
        name = next(label for limit, label in SLOPE_NAMES if slope < limit)
        found[key] = {"slope": round(slope, 2), "name": name, "from": n1, "to": n2}
    return found


def _cell(value: Optional[float], digits: int = 2) -> str:
    return "-" if value is None else f"{value:.{digits}f}"


def table_rows(result: dict) -> List[List[str]]:
    rows = [["N"] + [label for _, label in COLUMNS]]
    for row in result["rows"]:
        rows.append([str(row["n"])] + [_cell(row.get(key), 1 if key.endswith("_mib") else 2)
                                       for key, _ in COLUMNS])
    named = result["slopes"]
    rows.append(["slope"] + [f"{named[k]['name']} ({named[k]['slope']})" if k in named else "-"
                             for k, _ in COLUMNS])
    return rows


def chart(name: str, result: dict) -> Optional[str]:
    """docs/img/scale-<backend>.png (log-log); None without matplotlib."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
        import matplotlib.ticker
    except ImportError:
        return None
    images = ROOT / "docs" / "img"
    images.mkdir(parents=True, exist_ok=True)
    fig, ax = plt.subplots(figsize=(6, 3.6), dpi=90)
    for key, label in COLUMNS:
        if key.endswith("_mib") or key == "idle_cores":
            continue
        points = [(r["n"], r[key]) for r in result["rows"] if r.get(key)]
        if points:
            xs, ys = zip(*points)
            slope = result["slopes"].get(key)
            named = f" ({slope['name']}, {slope['slope']})" if slope else ""
            ax.plot(xs, ys, marker="o", label=label + named)
    ax.set_xscale("log")
    ax.set_yscale("log")
    sizes = [r["n"] for r in result["rows"]]  # the N measured, as numbers
    ax.xaxis.set_minor_locator(matplotlib.ticker.NullLocator())
    ax.set_xticks(sizes)
    ax.set_xticklabels([str(n) for n in sizes])
    ax.set_title(f"mxbatch at scale: {name}")
    ax.set_xlabel("tasks (N)")
    ax.set_ylabel("seconds (CPU s: CPU seconds)")
    ax.grid(True, alpha=0.3, which="both")
    ax.legend(fontsize=8)
    fig.tight_layout()
    path = images / f"scale-{name}.png"
    fig.savefig(path)
    plt.close(fig)
    return f"![mxbatch at scale: {name}](img/scale-{name}.png)"


WHAT = """\
For each backend and N (N = 1 scheduler + N/8 servers + the rest workers) one
`mxbatch submit --wait --quiet` job of stand-in roles (`bench/scalerole.py`, run with
`python -I -S`: the scheduler listens, every server and worker connects to it and
blocks, as idle as a ps-lite role waiting for work), measured from the job's own records:

- **submit->running**: from the submit (the CLI's start) to the last task record's
  `exec_at`, once every task is RUNNING (the digest, or on YARN the task records the
  CLI mirrors from the application's key-value store);
- **teardown**: one worker SIGKILLed; from the abort record's `at` to the last task
  record's `ended_at`;
- **status**: `mxbatch status JOB --json` as a fresh process while every task runs,
  median of 3 (wall);
- **CPU s**, **peak MiB**: the launcher, over the whole job (start, the status calls,
  teardown). Local: the `submit --wait` process is the job's agent and its roles are its
  children; its own user + system time (read while it is a zombie, so the roles it
  reaped are not counted) and its own peak RSS (VmHWM). Other backends: the CLI and its
  children (ssh, mpirun, qsub/sbatch/squeue, YARN's skein driver, a Java process; the
  roles and the hosts' agents are not among them), from `wait4`;
- **floor**: one trivial job of N tasks through the backend's own tool, without
  mxbatch (`bench/scalefloor.py`). Local: N stand-ins started by a plain Python loop of
  `subprocess.Popen`, seconds until the last `Popen` returned (the child exec'd).
  Elsewhere each task is `python -I -S -c pass`, timed from the tool's start until every
  task has run and the job is gone: ssh, one session a host running a loop over its
  share; MPI, one `mpirun -n N` (`--map-by node --bind-to none`); SGE, `qsub -sync y
  -t 1-N`; Slurm, `sbatch --array=0-(N-1)` and `squeue` every 0.1 s until it is gone;
  YARN, a skein application of N 64 MiB containers, with its own skein driver's start
  (as `mxbatch submit` without a global driver);
- **job MiB**: the sum of the proportional set sizes of the job's processes on this
  machine (supervisors, roles, the hosts' agents; every test host and node is a network
  namespace of this machine) while every task runs;
- **idle cores**: the CPU those processes take while every task runs and nothing
  happens (their CPU seconds over 10 s), in cores: what holding N idle tasks costs
  (the launcher is not among them: local's agent is the launcher, so local's column
  is its idle roles' alone).

The slope is the log-log slope between the smallest and the largest N measured: flat
(< 0.35), sub-linear (< 0.8), linear (< 1.4), super-linear (< 1.8), quadratic.
Spec: `grace: 5s`, `heartbeat_timeout: 2m`, `stall_timeout: null`; SGE and Slurm tasks
ask for 1 CPU and 256M (SGE's `h_vmem`), YARN's containers for 64 MiB; MPI's
`start_timeout: 30m`. The hosts: the 4 namespace test hosts of `ci/clusters/hosts-up.sh`
(ssh, MPI, SGE's execds, Slurm's nodes), all on this machine. **slurm** submits arrays
(a task a CPU, partition `debug`: 3 nodes of 4 CPUs); **slurm-alloc** runs the same
`submit --wait` inside `salloc --nodes=3` (one CPU a node): one agent a node as an
`srun --overlap` step, the node's roles sharing its CPU, the way to oversubscribe the
nodes (its floor: `salloc --nodes=3 srun --overcommit --ntasks=N`). A backend
stops at the first N its cluster cannot hold at once (its slots, CPUs or containers),
that this machine's memory cannot (from the memory a task took at the largest N so
far), above its ceiling of tasks, or at the first N that fails; its line says which."""


def machine_line(started: dict) -> str:
    import platform

    return (f"{started['cores']} cores, {started['memory_gib']} GiB available, "
            f"{platform.system()} {platform.release()}, Python {platform.python_version()}")


def measured_line(result: dict, started: dict) -> str:
    """When a backend was measured and the load then (results of older runs: the run's)."""
    measured = result.get("measured", started)
    load = " ".join("%.1f" % x for x in measured["load_at_start"])
    return f"Measured {measured['date']}; load average {load} (1, 5, 15 min) at its start."


def stop_line(stopped: str, most: int = 600) -> str:
    """Why a backend stopped, as one sentence of the docs: the CLI's lines joined, but
    for those that only point into the scratch run directory (the job id, "submitted
    ... run directory ...", "see the log: ...")."""
    noise = ("mxbatch: submitted ", "mxbatch: see the log")
    lines = [line.strip() for line in stopped.splitlines()]
    text = " / ".join(line for line in lines  # a line without a space: the job id
                      if line and not line.startswith(noise) and " " in line)
    if len(text) > most:
        text = text[:most].rstrip() + " [...]"
    return text[0].upper() + text[1:].rstrip(".") + "."


def docs_section(started: dict, results: Dict[str, dict], charts: Dict[str, str]) -> str:
    """The Markdown of docs/benchmarks.md's scale section."""
    from report import markdown_table

    parts = ["## Scale (`bench/scale.py`)", "",
             "```bash", ".venv/bin/python bench/scale.py --backends local,ssh,mpi "
             "--sizes 16,64,256,1000 --json a.json   # and so on, a backend at a time",
             ".venv/bin/python bench/scale.py --from-json a.json,b.json --charts --write-docs",
             "```", "",
             WHAT, "", f"Machine: {machine_line(started)}."]
    for name, result in results.items():
        parts += ["", f"### {name}", ""]
        if result["rows"]:
            loads = ", ".join(f"{r['n']}: {r['load_at_start'][0]:.1f}" for r in result["rows"])
            parts += [markdown_table(table_rows(result)), "", measured_line(result, started)
                      + f" Load average (1 min) at the start of each N: {loads}."]
            failed = [f"N={r['n']}: {r['floor_error']}" for r in result["rows"]
                      if r.get("floor_error")]
            if failed:
                parts += ["", "No floor at " + "; ".join(failed) + "."]
        if result["stopped"]:
            parts += ["", stop_line(result["stopped"])]
        if name in charts:
            parts += ["", charts[name]]
    return "\n".join(parts) + "\n"


def merged(saved: List[dict]) -> Tuple[dict, Dict[str, dict]]:
    """Several --json files as one: the first's machine, each backend's last results
    (each backend keeps the date and load of its own run: ``measured``), in the order
    of BACKENDS."""
    results: Dict[str, dict] = {}
    for one in saved:
        for name, result in one["results"].items():
            result.setdefault("measured", {k: one["machine"][k]
                                           for k in ("date", "load_at_start")})
            result["slopes"] = slopes(result["rows"])
            results[name] = result
    order = [name for name in BACKENDS if name in results]
    order += [name for name in results if name not in order]
    return saved[0]["machine"], {name: results[name] for name in order}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--backends", default="local",
                        help="comma-separated, of: " + ", ".join(BACKENDS))
    parser.add_argument("--sizes", default="16,64,256,1000", help="comma-separated task counts")
    parser.add_argument("--json", type=Path, help="write the results here")
    parser.add_argument("--charts", action="store_true",
                        help="a chart per backend into docs/img/scale-<backend>.png")
    parser.add_argument("--from-json", type=lambda v: [Path(p) for p in v.split(",")],
                        help="measure nothing: print, chart and write the docs of --json "
                             "files (comma-separated; a backend in a later one replaces it)")
    parser.add_argument("--write-docs", action="store_true",
                        help="rewrite the scale section of docs/benchmarks.md")
    parser.add_argument("--idle-seconds", type=float, default=IDLE_S,
                        help="how long the idle CPU of a running job is measured")
    parser.add_argument("--settle-seconds", type=float, default=SETTLE_S,
                        help="how long each N waits for the load average to fall below 2 "
                             "a core")
    parser.add_argument("--raise-max-tasks", action="store_true",
                        help="set the spec's max_tasks to N above a backend's ceiling")
    args = parser.parse_args()
    compile_mxbatch()
    sizes = sorted(int(s) for s in args.sizes.split(","))
    if sizes[0] < 3:
        parser.error("N is at least 3 (a scheduler, a server and a worker)")
    names = [b.strip() for b in args.backends.split(",") if b.strip()]
    unknown = [b for b in names if b not in BACKENDS]
    if unknown:
        parser.error(f"unknown backends: {', '.join(unknown)}")
    if args.from_json:
        started, results = merged([json.loads(path.read_text()) for path in args.from_json])
        names = []
    else:
        started = {"date": time.strftime("%Y-%m-%d %H:%M %Z"), "cores": os.cpu_count(),
                   "memory_gib": round(memory_available_mib() / 1024, 1),
                   "load_at_start": [round(x, 2) for x in os.getloadavg()]}
        results = {}
    print(f"{started['date']}; {started['cores']} cores; load average at the start "
          f"{' '.join('%.1f' % x for x in started['load_at_start'])}", flush=True)
    home = Path(tempfile.mkdtemp(prefix="mxbatch-scale-"))
    for name in names:
        backend = BACKENDS[name]
        env_file = STATE / f"{backend.cluster}.env" if backend.cluster else None
        if env_file is not None and not env_file.is_file():
            print(f"{name}: skipped: its test cluster is not up ({env_file} does not exist)")
            results[name] = {"rows": [], "stopped": f"skipped: {env_file} does not exist",
                             "slopes": {}}
            continue
        def save(rows: List[dict], name: str = name) -> None:
            if args.json:  # what is measured so far, in case the run is stopped
                partial = dict(results, **{name: {"rows": rows, "stopped": "(running)",
                                                  "slopes": slopes(rows)}})
                args.json.write_text(json.dumps({"machine": started, "results": partial},
                                                indent=1))

        results[name] = run_backend(backend, sizes, home / name, args.raise_max_tasks, save,
                                    args.idle_seconds, args.settle_seconds)
    for name, result in results.items():
        if result["rows"]:
            print(f"\n{name} (seconds; CPU s and peak MiB: the launcher)")
            print_table(table_rows(result))
        if result["stopped"]:
            print(f"{name}: {result['stopped']}")
    charts: Dict[str, str] = {}
    if args.charts:
        for name, result in results.items():
            markdown = chart(name, result) if result["rows"] else None
            if markdown is not None:
                charts[name] = markdown
            elif result["rows"]:
                print("no charts: matplotlib is not installed (the bench extra)")
                break
    if args.write_docs:
        from report import update_section

        print(f"wrote {update_section('scale', docs_section(started, results, charts))}")
    if args.json and not args.from_json:
        args.json.write_text(json.dumps({"machine": started, "results": results}, indent=1))
    print(f"\nload average at the end {' '.join('%.1f' % x for x in os.getloadavg())}")


if __name__ == "__main__":
    main()
