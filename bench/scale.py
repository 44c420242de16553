"""mxbatch at scale: jobs of N stand-in roles, measured from the job's own records.

    python bench/scale.py [--backends local,ssh,mpi,slurm,sge] [--sizes 16,64,256,1000]
        [--json PATH] [--charts] [--write-docs] [--raise-max-tasks]

For each backend and each N (N = servers + workers + 1 scheduler, servers = N/8) it
submits one job of stand-in roles (bench/scalerole.py: the scheduler listens, every
server and worker connects to it, keeps the connection and blocks, as idle as a ps-lite
role waiting for work) with ``mxbatch submit --wait`` and measures:

  - submit -> all running: from the submit (the CLI's start) to the last task record's
    ``exec_at`` (the supervisor's exec of the role), once every task is RUNNING;
  - status: ``mxbatch status JOB --json`` as a fresh process, median of 3 (wall);
  - teardown: one worker is SIGKILLed; from the abort record's ``at`` to the last task
    record's ``ended_at``;
  - CPU s and peak MiB of the launcher: the ``submit --wait`` process. Local: it is the
    job's agent, its roles are its children; CPU is its own user + system time (read
    from /proc/PID/stat while it is a zombie, so the roles it reaped are not counted)
    and peak is its own VmHWM (sampled every 0.25 s). Other backends: the CLI and its
    children (ssh, mpirun, sbatch, qsub, the DRMAA helper; the roles are not among
    them), from wait4; the per-host agents' CPU just before the kill is in the JSON
    (``agents_cpu_s``);
  - floor (local only): N stand-ins started by a plain Python loop of
    ``subprocess.Popen`` (seconds until the last Popen returned, i.e. was exec'd).

The slope of each column is the log-log slope between the smallest and the largest N
measured, named flat (< 0.35), sub-linear (< 0.8), linear (< 1.4), super-linear (< 1.8)
or quadratic. Backends other than local need their test cluster up (an env file under
$MXBATCH_CLUSTER_STATE, default /tmp/mxbatch-clusters: hosts.env for ssh and mpi,
slurm.env, sge.env); one that is not up is skipped with a line. A backend stops at the
first N it cannot hold (its ceiling of tasks, this machine's memory, the cluster's
slots) or at the first N that fails; the line says why. Every job runs under a private
MXBATCH_HOME and is cancelled, and its processes killed, on any error.
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
from typing import Callable, Dict, List, Optional

from common import ROOT, STATE, cluster_env, print_table

from mxbatch.runtime.layout import RunLayout
from mxbatch.runtime.procs import job_processes, kill_all, wait_gone

ROLE = Path(__file__).resolve().with_name("scalerole.py")
ROLE_ARGV = [sys.executable, "-I", "-S", str(ROLE)]
#: resident memory one stand-in role costs, with some of its agent's share (MiB; one
#: measured 9-10 MiB RSS, most of it the interpreter's pages shared with the others)
ROLE_MIB = 12
#: seconds a size may take to have every task running before it counts as failed
RUNNING_TIMEOUT_S = 900
SLOPE_NAMES = ((0.35, "flat"), (0.8, "sub-linear"), (1.4, "linear"), (1.8, "super-linear"),
               (math.inf, "quadratic"))
COLUMNS = (("submit_to_running_s", "submit->running"), ("teardown_s", "teardown"),
           ("status_s", "status"), ("cpu_s", "CPU s"), ("peak_mib", "peak MiB"),
           ("floor_s", "floor"))


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


def sge_slots(env: Dict[str, str]) -> Optional[int]:
    return int(env["MXBATCH_SGE_SLOTS"]) * len(env["MXBATCH_SGE_HOSTS"].split())


def slurm_cpus(env: Dict[str, str]) -> Optional[int]:
    out = subprocess.run(["sinfo", "-h", "-o", "%C"], capture_output=True, text=True,
                         env=env, timeout=30).stdout.strip()
    # one line a partition: allocated/idle/other/total
    return sum(int(line.split("/")[-1]) for line in out.splitlines()) if out else None


BACKENDS = {
    "local": Backend("local", ceiling=1_000),
    "ssh": Backend("ssh", "hosts", lambda env: f"hostfile: {env['MXBATCH_TEST_HOSTFILE']}"),
    "mpi": Backend("mpi", "hosts", lambda env: f"hostfile: {env['MXBATCH_TEST_HOSTFILE']}",
                   extra_env={"OMPI_ALLOW_RUN_AS_ROOT": "1",
                              "OMPI_ALLOW_RUN_AS_ROOT_CONFIRM": "1"}),
    "slurm": Backend("slurm", "slurm", capacity=slurm_cpus),
    "sge": Backend("sge", "sge", lambda env: "submitter: qsub", capacity=sge_slots),
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
    if backend.name in ("slurm", "sge"):
        spec["resources"] = {"cpus": 1, "memory": "64M", "walltime": "60m"}
    if raise_max and n > backend.ceiling:
        spec["max_tasks"] = n
    options = backend.options(env)
    if options or backend.name != "local":
        spec["backends"] = {backend.name: _flow_map(options)}
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
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "mxbatch", "submit", "--wait", "--quiet", "-b", backend.name,
             str(spec)], stdout=self.out, stderr=subprocess.STDOUT, env=env,
            start_new_session=True)
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
                           + self.output()[-2000:])

    def wait_running(self, timeout: float) -> List[dict]:
        """Every task record, once the digest counts every task RUNNING."""
        assert self.run_dir is not None
        digest = Path(RunLayout(str(self.run_dir)).digest)
        deadline = time.time() + timeout
        while time.time() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"the job ended (exit {self.proc.returncode}) before every "
                                   f"task ran:\n{self.output()[-2000:]}")
            states = (_read_json(digest) or {}).get("states", {})
            if states.get("RUNNING") == self.n:
                records = _records(self.run_dir)
                if len(records) == self.n and all(r.get("exec_at") for r in records):
                    return records
            time.sleep(0.5)
        raise RuntimeError(f"not every task was running after {timeout:.0f} s")

    def status_latency(self, repeat: int = 3) -> List[float]:
        times = []
        for _ in range(repeat):
            t0 = time.time()
            result = subprocess.run([sys.executable, "-m", "mxbatch", "status", str(self.job_id),
                                     "--json"], capture_output=True, text=True, env=self.env,
                                    timeout=300)
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
                       capture_output=True, env=self.env, timeout=300)
        left = wait_gone(job_processes(self.job_id), 30)
        kill_all(left, signal.SIGKILL)
        wait_gone(left, 10)
        return [p if isinstance(p, int) else p.pid for p in left]


def measure(backend: Backend, n: int, env: Dict[str, str], folder: Path,
            raise_max: bool) -> dict:
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
        reached = [r.get("reached_at") for r in records]
        if all(reached):
            result["submit_to_reached_s"] = max(reached) - job.t0
        statuses = job.status_latency()
        result["status_runs_s"] = statuses
        result["status_s"] = statistics.median(statuses)
        agents = {r["supervisor_pid"] for r in records if r.get("supervisor_pid")}
        agents.discard(job.proc.pid)
        result["agents_cpu_s"] = sum(_proc_cpu_s(p) or 0.0 for p in agents)
        victim = next(r for r in records
                      if r["role"] == "worker" and r["rank"] == split(n)["worker"] // 2)
        os.kill(victim["pid"], signal.SIGKILL)
        ended = job.finish()
        exited_at = ended.pop("exited_at")
        result.update(ended)
        abort = _read_json(Path(RunLayout(str(job.run_dir)).abort)) or {}
        ends = [r.get("ended_at") for r in _records(job.run_dir)]
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


def floor_local(n: int) -> dict:
    """N stand-ins started by a plain loop of ``subprocess.Popen``: seconds until the last
    Popen returned (the child exec'd), the loop's CPU; then all are killed."""
    import socket

    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    base = dict(os.environ, DMLC_PS_ROOT_URI="127.0.0.1", DMLC_PS_ROOT_PORT=str(port))
    roles = ["scheduler"] + ["server"] * split(n)["server"] + ["worker"] * split(n)["worker"]
    procs: List[subprocess.Popen] = []
    cpu0 = os.times()
    t0 = time.time()
    try:
        for role in roles:
            procs.append(subprocess.Popen(ROLE_ARGV, env=dict(base, DMLC_ROLE=role),
                                          stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                                          stderr=subprocess.DEVNULL))
        seconds = time.time() - t0
        cpu1 = os.times()
    finally:
        for proc in procs:
            proc.kill()
        for proc in procs:
            proc.wait()
    cpu = (cpu1.user - cpu0.user) + (cpu1.system - cpu0.system)
    return {"floor_s": seconds, "floor_cpu_s": cpu}


# ------------------------------------------------------------------ a backend's sizes


def memory_available_mib() -> float:
    for line in Path("/proc/meminfo").read_text().splitlines():
        if line.startswith("MemAvailable:"):
            return int(line.split()[1]) / 1024
    return math.inf


def run_backend(backend: Backend, sizes: List[int], home: Path, raise_max: bool,
                on_row: Callable[[List[dict]], None] = lambda rows: None) -> dict:
    """Every size in turn, until one cannot be held or fails: {"rows", "stopped"}.
    ``on_row``: called with the rows so far after each size."""
    env = dict(os.environ) if backend.cluster is None else cluster_env(backend.cluster)
    env.update(backend.extra_env, MXBATCH_HOME=str(home), MXBATCH_CONFIG="",
               PATH=os.path.dirname(sys.executable) + os.pathsep + env["PATH"])
    home.mkdir(parents=True, exist_ok=True)
    folder = Path(tempfile.mkdtemp(prefix=f"scale-{backend.name}-", dir=home))
    rows: List[dict] = []
    stopped = ""
    capacity = backend.capacity(env)
    for n in sizes:
        try:
            if n > backend.ceiling and not raise_max:
                raise Stop(f"stopped before N={n}: above the {backend.name} backend's ceiling "
                           f"of {backend.ceiling} tasks (the spec key max_tasks raises it; "
                           f"--raise-max-tasks)")
            if capacity is not None and n > capacity:
                raise Stop(f"stopped before N={n}: the cluster has {capacity} slots, so "
                           f"not every task could run at once")
            need = n * ROLE_MIB
            if need > 0.8 * memory_available_mib():
                raise Stop(f"stopped before N={n}: about {need:.0f} MiB needed, "
                           f"{memory_available_mib():.0f} MiB available on this machine")
            print(f"{backend.name} N={n}: load average "
                  f"{' '.join('%.1f' % x for x in os.getloadavg())}", flush=True)
            row = measure(backend, n, env, folder, raise_max)
            if backend.name == "local":
                row.update(floor_local(n))
            rows.append(row)
            on_row(rows)
            print("  " + ", ".join(f"{label} {_cell(row.get(key))}" for key, label in COLUMNS),
                  flush=True)
        except Stop as stop:
            stopped = str(stop)
            break
        except Exception as exc:  # any failure stops this backend, said
            stopped = f"stopped at N={n}: {type(exc).__name__}: {str(exc).strip()[:1500]}"
            break
        finally:
            if stopped:
                print(f"  {backend.name}: {stopped}", flush=True)
    return {"rows": rows, "stopped": stopped, "slopes": slopes(rows)}


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
        rows.append([str(row["n"])] + [_cell(row.get(key), 1 if key == "peak_mib" else 2)
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
    except ImportError:
        return None
    images = ROOT / "docs" / "img"
    images.mkdir(parents=True, exist_ok=True)
    fig, ax = plt.subplots(figsize=(6, 3.6), dpi=90)
    for key, label in COLUMNS:
        if key in ("peak_mib",):
            continue
        points = [(r["n"], r[key]) for r in result["rows"] if r.get(key)]
        if points:
            xs, ys = zip(*points)
            ax.plot(xs, ys, marker="o", label=label)
    ax.set_xscale("log")
    ax.set_yscale("log")
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
  `exec_at`, once the digest counts every task RUNNING;
- **teardown**: one worker SIGKILLed; from the abort record's `at` to the last task
  record's `ended_at`;
- **status**: `mxbatch status JOB --json` as a fresh process while every task runs,
  median of 3 (wall);
- **CPU s**, **peak MiB**: the launcher, over the whole job (start, the status calls,
  teardown). Local: the `submit --wait` process is the job's agent and its roles are its
  children; its own user + system time (read while it is a zombie, so the roles it
  reaped are not counted) and its own peak RSS (VmHWM). Other backends: the CLI and its
  children (ssh, mpirun, sbatch/qsub; the roles are not among them), from `wait4`;
- **floor** (local): N stand-ins started by a plain Python loop of `subprocess.Popen`,
  seconds until the last `Popen` returned (the child exec'd).

The slope is the log-log slope between the smallest and the largest N measured: flat
(< 0.35), sub-linear (< 0.8), linear (< 1.4), super-linear (< 1.8), quadratic.
Spec: `grace: 5s`, `heartbeat_timeout: 2m`, `stall_timeout: null`."""


def machine_line(started: dict) -> str:
    import platform

    load = " ".join("%.1f" % x for x in started["load_at_start"])
    return (f"{started['cores']} cores, {started['memory_gib']} GiB available, "
            f"{platform.system()} {platform.release()}, Python {platform.python_version()}; "
            f"load average {load} (1, 5, 15 min) at the start; {started['date']}")


def docs_section(started: dict, results: Dict[str, dict], charts: Dict[str, str]) -> str:
    """The Markdown of docs/benchmarks.md's scale section."""
    from report import markdown_table

    parts = ["## Scale (`bench/scale.py`)", "",
             "```bash", ".venv/bin/python bench/scale.py --backends local,ssh,mpi,slurm,sge "
             "--sizes 16,64,256,1000 --json scale.json --charts --write-docs", "```", "",
             WHAT, "", f"Machine: {machine_line(started)}."]
    for name, result in results.items():
        parts += ["", f"### {name}", ""]
        if result["rows"]:
            loads = ", ".join(f"{r['n']}: {r['load_at_start'][0]:.1f}" for r in result["rows"])
            parts += [markdown_table(table_rows(result)), "",
                      f"Load average (1 min) at the start of each N: {loads}."]
        if result["stopped"]:
            parts += ["", result["stopped"][0].upper() + result["stopped"][1:].rstrip(".") + "."]
        if name in charts:
            parts += ["", charts[name]]
    return "\n".join(parts) + "\n"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--backends", default="local",
                        help="comma-separated, of: " + ", ".join(BACKENDS))
    parser.add_argument("--sizes", default="16,64,256,1000", help="comma-separated task counts")
    parser.add_argument("--json", type=Path, help="write the results here")
    parser.add_argument("--charts", action="store_true",
                        help="a chart per backend into docs/img/scale-<backend>.png")
    parser.add_argument("--from-json", type=Path,
                        help="measure nothing: print, chart and write the docs of a --json file")
    parser.add_argument("--write-docs", action="store_true",
                        help="rewrite the scale section of docs/benchmarks.md")
    parser.add_argument("--raise-max-tasks", action="store_true",
                        help="set the spec's max_tasks to N above a backend's ceiling")
    args = parser.parse_args()
    sizes = sorted(int(s) for s in args.sizes.split(","))
    if sizes[0] < 3:
        parser.error("N is at least 3 (a scheduler, a server and a worker)")
    names = [b.strip() for b in args.backends.split(",") if b.strip()]
    unknown = [b for b in names if b not in BACKENDS]
    if unknown:
        parser.error(f"unknown backends: {', '.join(unknown)}")
    if args.from_json:
        saved = json.loads(args.from_json.read_text())
        started, results = saved["machine"], saved["results"]
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

        results[name] = run_backend(backend, sizes, home / name, args.raise_max_tasks, save)
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
