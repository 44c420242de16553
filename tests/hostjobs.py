"""Helpers of the tests on the ssh/MPI test hosts (ci/clusters/hosts-up.sh): stand-in
jobs across the hosts, the job's records, and the processes the tests look for."""

from __future__ import annotations

import glob
import json
import os
import signal
import sys
from pathlib import Path
from typing import Dict, List, Optional, Tuple

from mxbatch.runtime.layout import RunLayout

from .conftest import FAKEROLE, assert_no_processes, wait_for


def host_addresses(env: Dict[str, str]) -> Dict[str, str]:
    """{host name: address} of the test hosts (hosts.map)."""
    found = {}
    for line in Path(env["MXBATCH_TEST_HOST_MAP"]).read_text().splitlines():
        fields = line.split()
        if len(fields) >= 2 and not line.startswith("#") and fields[0] != "-":
            found[fields[0]] = fields[1]
    return found


def fake_spec(tmp_path: Path, backend: str, hosts_env: Dict[str, str], *, name: str,
              workers: int = 2, servers: int = 2, env: Optional[Dict[str, str]] = None,
              grace: str = "2s", startup: str = "120s", heartbeat: str = "30s",
              worker: Optional[List[str]] = None) -> Path:
    """A job of stand-in roles (tests/fakerole.py) on the 4 test hosts through
    ``backend`` (ssh or mpi); ``worker``: the workers' command instead."""
    role = [sys.executable, str(FAKEROLE)]
    options = f"hostfile: {hosts_env['MXBATCH_TEST_HOSTFILE']}"
    text = (f"name: {name}\ncommand: {json.dumps(role)}\nworkdir: {tmp_path}\n"
            f"env: {json.dumps(env or {})}\n"
            f"roles:\n  server: {{count: {servers}}}\n"
            f"  worker: {{count: {workers}, command: {json.dumps(worker or role)}}}\n"
            f"rendezvous: {{startup_timeout: {startup}, grace: {grace}, "
            f"heartbeat_timeout: {heartbeat}}}\n"
            f"backends:\n  {backend}: {{{options}}}\n")
    path = tmp_path / f"{name}.yaml"
    path.write_text(text)
    return path


def start_long_job(cli, hosts_env: Dict[str, str], tmp_path: Path, backend: str,
                   name: str) -> Tuple[str, Path]:
    """A detached stand-in job whose workers run for minutes, once every task runs."""
    spec = fake_spec(tmp_path, backend, hosts_env, name=name, env={"FAKE_SLEEP": "300"})
    job = cli.submit(spec, "-b", backend)
    run_dir = cli.run_dir(job)
    wait_for(lambda: all_running(run_dir, 5), 90, "every task running")
    return job, run_dir


def assert_clean(job: str) -> None:
    """No process of ``job`` on any host (the pid namespace is shared), and no agent's
    private directory left (/tmp is shared too)."""
    assert_no_processes(job, timeout=15)
    assert remote_temp_dirs(job) == []


def records(run_dir: Path) -> Dict[str, dict]:
    """Every task record of a job, by ``role-rank``."""
    found = {}
    for path in Path(RunLayout(str(run_dir)).tasks_dir).glob("*.json"):
        try:
            found[path.stem] = json.loads(path.read_text())
        except (OSError, ValueError):
            continue
    return found


def all_running(run_dir: Path, count: int) -> bool:
    found = records(run_dir)
    return len(found) == count and all(r.get("state") == "RUNNING" for r in found.values())


def abort_record(run_dir: Path) -> dict:
    return json.loads(Path(RunLayout(str(run_dir)).abort).read_text())


def last_end(run_dir: Path) -> float:
    """When the last task of the job ended, from its records."""
    return max(r.get("ended_at") or 0 for r in records(run_dir).values())


def remote_temp_dirs(job_id: str) -> List[str]:
    """The agents' private directories of a job that still exist (/tmp is shared by the
    test hosts)."""
    return glob.glob(f"/tmp/mxbatch-{job_id}-*")


def on_command_lines(text: str) -> List[int]:
    """Pids of processes on any host whose command line contains ``text``."""
    needle = text.encode()
    found = []
    for entry in os.listdir("/proc"):
        if entry.isdigit() and int(entry) != os.getpid():
            try:
                if needle in Path(f"/proc/{entry}/cmdline").read_bytes():
                    found.append(int(entry))
            except OSError:
                continue
    return found


def parent(pid: int) -> int:
    stat = Path(f"/proc/{pid}/stat").read_bytes()
    return int(stat[stat.rindex(b")") + 2:].split()[1])


def ssh_session_of(pid: int) -> List[int]:
    """The sshd processes between ``pid`` (a process started over ssh) and its host's
    sshd listener: killing them is what a host's sshd dying does to the session."""
    session = []
    current = parent(pid)
    while current > 1:
        comm = Path(f"/proc/{current}/comm").read_text().strip()
        if comm not in ("sshd", "sshd-session"):
            break
        args = Path(f"/proc/{current}/cmdline").read_bytes()
        if b"sshd_config" in args:  # the listener itself (sshd -f .../sshd_config)
            break
        session.append(current)
        current = parent(current)
    return session


def kill(pids: List[int]) -> None:
    for pid in pids:
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
