"""Shared fixtures: an isolated MXBATCH_HOME, the CLI as a real subprocess, leftovers checks."""

from __future__ import annotations

import dataclasses
import importlib.util
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path
from typing import Dict, List, Optional, Tuple

import pytest

from mxbatch.runtime import procs
from mxbatch.runtime.layout import RunLayout
from mxbatch.runtime.planfile import RunPlan

from .polling import poll

ROOT = Path(__file__).resolve().parent.parent
EXAMPLES = ROOT / "examples"
FAKEROLE = Path(__file__).resolve().parent / "fakerole.py"


@pytest.hookimpl(tryfirst=True)
def pytest_collection_modifyitems(config, items):
    """Tests marked with a cluster run only when it is up; MXBATCH_REQUIRE lists the
    ones that must run (CI), turning a missing cluster into a failure, not a skip.
    First among the hooks: pytest-xdist's own reads the ``xdist_group`` markers given
    here to name each test's group."""
    required = {n for n in os.environ.get("MXBATCH_REQUIRE", "").split(",") if n}
    available = {"mxnet": importlib.util.find_spec("mxnet") is not None}
    for marker in ("sge", "slurm", "oar", "yarn", "cachefs", "containers", "ssh", "mpi"):
        available[marker] = cluster_env_file(MARKER_CLUSTERS.get(marker, marker)).is_file()
    for item in items:
        for marker, present in available.items():
            if marker in item.keywords and not present and marker not in required:
                item.add_marker(pytest.mark.skip(reason=f"{marker} is not available"))
        group = next((g for m, g in CLUSTER_GROUPS if m in item.keywords), None)
        if group is not None:
            item.add_marker(pytest.mark.xdist_group(group))


def pytest_collection_finish(session):
    """Under ``--dist loadgroup``, fail at once when pytest-xdist did not group the
    cluster tests: its worker appends ``@GROUP`` to each node id, which pytest 9.2 no
    longer lets it do (its ``Node.nodeid`` stopped reading ``_nodeid``), and the tests
    of one cluster then ran side by side and starved each other (a heterogeneous job
    and an array waited for each other's Slurm node until their startup deadlines)."""
    if not getattr(session.config.option, "loadgroup", False):
        return
    lost = [item.nodeid for item in session.items
            if item.get_closest_marker("xdist_group") and "@" not in item.nodeid]
    if lost:
        raise pytest.UsageError(
            f"pytest-xdist's --dist loadgroup does not group the tests with pytest "
            f"{pytest.__version__} ({lost[0]} has no @group): the clusters' tests would run "
            "side by side; install the pytest pinned in pyproject.toml")


#: with pytest-xdist (``-n N --dist loadgroup``, as ci/test.sh runs the suite) the tests
#: of one cluster run one after another in one worker, as they assume (a cell's slots, a
#: Slurm node stopped on purpose, the one NodeManager's memory); a test that needs several
#: goes with the first of them here; tests that need no cluster go to any worker
CLUSTER_GROUPS = (("yarn", "yarn"), ("sge", "sge"), ("slurm", "slurm"), ("oar", "oar"),
                  ("ssh", "hosts"), ("mpi", "hosts"), ("containers", "containers"),
                  ("cachefs", "cachefs"))


#: markers whose tests run on a cluster of another name: the ssh and MPI tests need the
#: namespace test hosts of ci/clusters/hosts-up.sh
MARKER_CLUSTERS = {"ssh": "hosts", "mpi": "hosts"}


def cluster_env_file(name: str) -> Path:
    """Where ``ci/clusters/<name>-up.sh`` writes the exports its tests need."""
    state = os.environ.get("MXBATCH_CLUSTER_STATE", "/tmp/mxbatch-clusters")
    return Path(state) / f"{name}.env"


def cluster_environment(name: str) -> Dict[str, str]:
    """The environment after sourcing the cluster's env file (through a real shell)."""
    script = f'. "{cluster_env_file(name)}" && env -0'
    out = subprocess.run(["bash", "-c", script], capture_output=True, check=True).stdout
    return dict(item.decode().split("=", 1) for item in out.split(b"\0") if b"=" in item)


@pytest.fixture
def home(tmp_path, monkeypatch) -> Path:
    """A fresh MXBATCH_HOME for this test (records and run directories)."""
    path = tmp_path / "home"
    monkeypatch.setenv("MXBATCH_HOME", str(path))
    monkeypatch.setenv("MXBATCH_CONFIG", "")  # no site config file unless a test writes one
    return path


class Cli:
    """Runs ``python -m mxbatch`` as a real process with the test's environment."""

    def __init__(self, home: Path, base_env: Optional[Dict[str, str]] = None) -> None:
        self.home = home
        base = dict(os.environ if base_env is None else base_env)
        self.env = dict(base, MXBATCH_HOME=str(home),
                        PATH=os.path.dirname(sys.executable) + os.pathsep + base["PATH"])

    def run(self, *args: str, timeout: float = 180, cwd: Optional[Path] = None,
            env: Optional[Dict[str, str]] = None) -> subprocess.CompletedProcess:
        return subprocess.run([sys.executable, "-m", "mxbatch", *args], capture_output=True,
                              text=True, timeout=timeout, cwd=cwd,
                              env=dict(self.env, **(env or {})))

    def run_bytes(self, *args: str, timeout: float = 180, cwd: Optional[Path] = None,
                  env: Optional[Dict[str, str]] = None) -> subprocess.CompletedProcess:
        """``run`` with stdout and stderr as bytes (output that need not be UTF-8)."""
        return subprocess.run([sys.executable, "-m", "mxbatch", *args], capture_output=True,
                              timeout=timeout, cwd=cwd, env=dict(self.env, **(env or {})))

    def popen(self, *args: str, env: Optional[Dict[str, str]] = None, **kwargs):
        return subprocess.Popen([sys.executable, "-m", "mxbatch", *args],
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                                env=dict(self.env, **(env or {})), **kwargs)

    def foreground(self, *args: str, env: Optional[Dict[str, str]] = None, **kwargs):
        """``popen`` as a terminal's foreground command, which Ctrl-C reaches: SIGINT at
        its default even where the tests run with it ignored (a background job)."""
        return self.popen(*args, env=env,
                          preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL),
                          **kwargs)

    def submit(self, spec: Path, *args: str, env: Optional[Dict[str, str]] = None) -> str:
        result = self.run("submit", str(spec), *args, env=env)
        assert result.returncode == 0, result.stderr
        return result.stdout.strip().splitlines()[-1]

    def status(self, job_id: str) -> dict:
        result = self.run("status", job_id, "--json")
        assert result.returncode == 0, result.stderr
        return json.loads(result.stdout)

    def run_dir(self, job: str) -> Path:
        """The job's run directory: the one its record names, else the default place."""
        record = self.home / "jobs" / f"{job}.json"
        if record.is_file():
            return Path(json.loads(record.read_text())["run_dir"])
        return self.home / "runs" / job

    def handle(self, job: str, timeout: float = 60) -> dict:
        """The native handle in ``job``'s record, once the submission wrote it: the record
        is saved first as ``submitting``, with no handle, before anything is launched."""
        path = self.home / "jobs" / f"{job}.json"

        def read() -> Optional[dict]:
            try:
                record = json.loads(path.read_text())
            except (OSError, ValueError):
                return None
            return None if record.get("submitting") else (record.get("handle") or None)
        return wait_for(read, timeout, f"the native handle in the record of {job}")

    def run_dirs(self) -> List[Path]:
        runs = self.home / "runs"
        # a dot name is no run: the submission's probe that run directories can be made
        return sorted(p for p in runs.iterdir() if not p.name.startswith(".")) \
            if runs.is_dir() else []


@pytest.fixture
def cli(home) -> Cli:
    return Cli(home)


def wait_for(predicate, timeout: float, what: str, interval: float = 0.1):
    """Poll ``predicate`` until truthy; fail the test naming ``what`` at the deadline."""
    value = poll(predicate, bool, timeout, interval)
    if not value:
        pytest.fail(f"timed out after {timeout}s waiting for {what}")
    return value


def remove_live_directory(path: Path) -> None:
    """Remove a directory that running processes still write into, as ``rm -rf`` would
    for them, without ``rmtree``'s race (a record written meanwhile: "Directory not
    empty"): rename it away first, atomically (every later lookup of its path fails, as
    after an rm), then remove the renamed tree, which nobody finds by name any more."""
    gone = path.with_name(path.name + ".removed")
    os.rename(path, gone)
    shutil.rmtree(gone)


def task_record(run_dir: Path, role: str, rank: int) -> Optional[dict]:
    try:
        return json.loads(Path(RunLayout(str(run_dir)).task_record(role, rank)).read_text())
    except (OSError, ValueError):
        return None


def assert_no_processes(job_id: str, timeout: float = 5.0) -> None:
    """Every process of the job is gone (checked through MXBATCH_JOB_ID in /proc)."""
    deadline = time.time() + timeout
    left = procs.job_processes(job_id)
    while left and time.time() < deadline:
        time.sleep(0.1)
        left = procs.job_processes(job_id)
    if left:
        procs.kill_all(left)
        pytest.fail(f"processes of {job_id} left behind: {left}")


@dataclasses.dataclass(frozen=True)
class JobTimes:
    """When things happened in a job, from its own records (epoch seconds): durations
    measured with these leave out the CLI's start-up and the machine's load on it."""

    created_at: float  # the plan: submission
    startup_deadline: float
    first_start: Optional[float]  # the earliest task start
    last_end: Optional[float]  # the latest task end
    abort_at: Optional[float]
    tasks: Dict[str, dict]  # "worker[1]" -> its task record


def job_times(run_dir: Path) -> JobTimes:
    """The ``JobTimes`` of the job in ``run_dir`` (read once it has ended)."""
    layout = RunLayout(str(run_dir))
    plan = RunPlan.from_json(Path(layout.plan).read_text())
    tasks = {t.label: task_record(run_dir, t.role.value, t.rank) or {} for t in plan.tasks}
    starts = [r["started_at"] for r in tasks.values() if r.get("started_at")]
    ends = [r["ended_at"] for r in tasks.values() if r.get("ended_at")]
    try:
        # an empty record: no abort (the run directory starts with one)
        abort_at: Optional[float] = json.loads(Path(layout.abort).read_text()).get("at")
    except FileNotFoundError:
        abort_at = None
    return JobTimes(created_at=plan.created_at, startup_deadline=plan.startup_deadline,
                    first_start=min(starts, default=None), last_end=max(ends, default=None),
                    abort_at=abort_at, tasks=tasks)


def processes_of_jobs_named(name: str) -> List[int]:
    """Live processes of any job named ``name`` (job ids are ``<name>-<8 hex>``): their
    environment has ``MXBATCH_JOB_ID=<name>-...``. Not this test's own processes."""
    needle = f"MXBATCH_JOB_ID={name}-".encode()
    return procs.processes_with_variable(lambda variable: variable.startswith(needle))


def copy_example(directory: Path) -> Path:
    """examples/mlp-ps.yaml and its training script copied into ``directory``, so the
    roles run (and write whatever they write) there, never in the checkout."""
    directory.mkdir(parents=True, exist_ok=True)
    shutil.copy(EXAMPLES / "train_mlp.py", directory / "train_mlp.py")
    return Path(shutil.copy(EXAMPLES / "mlp-ps.yaml", directory / "mlp-ps.yaml"))


@pytest.fixture
def example(tmp_path) -> Path:
    """The example job spec in a temporary directory (see ``copy_example``)."""
    return copy_example(tmp_path / "example")


def write_spec(path: Path, text: str) -> Path:
    path.write_text(text)
    return path


@pytest.fixture
def hosts_env() -> Dict[str, str]:
    """The environment of the ssh/MPI test hosts (hosts.env: MXBATCH_SSH_CONFIG, the
    hostfile, the failure hosts, Open MPI's settings), and running mpirun as root
    allowed: that is the tests' explicit choice (mxbatch never adds it)."""
    return dict(cluster_environment("hosts"), OMPI_ALLOW_RUN_AS_ROOT="1",
                OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1")


@pytest.fixture
def hosts_cli(home, hosts_env) -> Cli:
    """The CLI with the test hosts' environment."""
    return Cli(home, base_env=hosts_env)


@pytest.fixture(scope="module")
def yarn_env():
    """The YARN cluster's environment with a skein driver of the module's own (a private
    SKEIN_CONFIG: other test runs on the cluster start and stop theirs), so that CLI
    calls do not each start one."""
    from .yarnjobs import skein_driver

    with skein_driver(cluster_environment("yarn")) as env:
        yield env


@pytest.fixture
def yarn(home, yarn_env) -> Cli:
    """The CLI with the YARN cluster's environment and the module's skein driver, once
    the cluster is idle (an earlier test's application may still be releasing its
    containers; a busy cluster after 2 minutes is said, and the test goes on)."""
    from .yarnjobs import cluster_idle

    busy = cluster_idle(yarn_env)
    if busy is not None:
        sys.stderr.write(f"the YARN test cluster is still busy: {busy}\n")
    return Cli(home, yarn_env)


def interrupt(proc: subprocess.Popen, timeout: float, what: str = "mxbatch") -> Tuple[str, str]:
    """Ctrl-C (SIGINT) to ``proc``; its stdout and stderr once it exited. Fails the test,
    killing it, if it still runs ``timeout`` seconds later."""
    proc.send_signal(signal.SIGINT)
    try:
        return proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        proc.kill()
        pytest.fail(f"{what} still running {timeout:g} s after SIGINT:\n{proc.communicate()}")


@pytest.fixture
def sge(home) -> "Cli":
    """The CLI with the SGE test cell's environment (ci/clusters/sge-up.sh)."""
    return Cli(home, cluster_environment("sge"))


@pytest.fixture
def slurm(home) -> "Cli":
    """The CLI with the Slurm test cluster's environment (ci/clusters/slurm-up.sh)."""
    return Cli(home, cluster_environment("slurm"))


@pytest.fixture
def oar(home) -> "Cli":
    """The CLI with the OAR test cluster's environment (ci/clusters/oar-up.sh)."""
    return Cli(home, cluster_environment("oar"))


def time_wait_port() -> int:
    """A port of 127.0.0.1 nothing listens on, left in TIME_WAIT by a closed connection
    as an ended scheduler leaves it: the listener had SO_REUSEADDR (zmq sets it) and its
    side closed first, so the kernel keeps that end for a minute."""
    listener = socket.socket()
    listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    listener.bind(("127.0.0.1", 0))
    listener.listen(1)
    port = listener.getsockname()[1]
    client = socket.create_connection(("127.0.0.1", port))
    server, _ = listener.accept()
    listener.close()
    server.close()  # first: this end (127.0.0.1:port) goes to TIME_WAIT
    client.recv(1)  # its FIN arrived
    client.close()
    wait_for(lambda: any(line.split()[1].endswith(f":{port:04X}") and line.split()[3] == "06"
                         for line in Path("/proc/net/tcp").read_text().splitlines()[1:]),
             10, f"port {port} in TIME_WAIT")
    return port
