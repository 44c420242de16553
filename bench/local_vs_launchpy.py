"""mxbatch vs MXNet's own launch.py (--launcher local), side by side in one run.

Same training script (examples/train_mlp.py), same counts (2 servers, 2 workers).
For each launcher and repetition it measures:
  - first step: seconds from launch to the first training step of the slower worker
  - wall: seconds from launch until the launcher exits
  - launcher RSS: peak summed RSS of the launcher's own processes (everything it
    started except the MXNet role processes, i.e. those with DMLC_ROLE set; for
    launch.py that leaves the tracker, for mxbatch the CLI, the job manager and
    the supervisors), sampled every 50 ms
  - crash: a worker raising after 20 steps; the launcher's exit code and how long it
    took to exit (launch.py is stopped after --crash-timeout seconds if it hangs)

    .venv/bin/python bench/local_vs_launchpy.py [--repeat 3] [--crash-timeout 60]
"""

from __future__ import annotations

import argparse
import os
import re
import secrets
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Dict, List, Optional

from common import EXAMPLES, fmt, launch_py_argv, print_table

TRAIN = ["python3", "train_mlp.py", "--kvstore", "dist_sync", "--epochs", "3"]

def mxbatch_argv() -> List[str]:
    return [sys.executable, "-m", "mxbatch", "launch", "-n", "2", "-s", "2", "--grace", "5s",
            "--", *TRAIN]


def _children() -> Dict[int, List[int]]:
    tree: Dict[int, List[int]] = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            stat = Path(f"/proc/{entry}/stat").read_bytes()
            ppid = int(stat[stat.rindex(b")") + 2:].split()[1])
        except (OSError, ValueError, IndexError):
            continue
        tree.setdefault(ppid, []).append(int(entry))
    return tree


def _rss_kib(pid: int) -> int:
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    except OSError:
        pass
    return 0


def _is_role(pid: int) -> bool:
    """An MXNet role process (scheduler, server or worker): both launchers set DMLC_ROLE."""
    try:
        environ = Path(f"/proc/{pid}/environ").read_bytes().split(b"\0")
    except OSError:
        return False
    return any(v.startswith(b"DMLC_ROLE=") for v in environ)


def launcher_rss_kib(root: int, job_id: Optional[str]) -> int:
    """Summed RSS of the launcher's processes (not roles), found through the process tree
    and, for mxbatch's detached job manager, through MXBATCH_JOB_ID."""
    tree = _children()
    todo, seen = [root], set()
    if job_id:
        from mxbatch.runtime.procs import job_processes

        todo += job_processes(job_id)
    total = 0
    while todo:
        pid = todo.pop()
        if pid in seen:
            continue
        seen.add(pid)
        todo += tree.get(pid, [])
        if not _is_role(pid):
            total += _rss_kib(pid)
    return total


def run_once(argv: List[str], env: Dict[str, str], timeout: float) -> dict:
    t0 = time.time()
    token = secrets.token_hex(8)  # marks every process of this run (roles inherit it)
    env = dict(env, LAUNCH_T0=repr(t0), BENCH_RUN=token)
    out = tempfile.TemporaryFile()
    proc = subprocess.Popen(argv, cwd=EXAMPLES, env=env, stdout=out, stderr=subprocess.STDOUT,
                            start_new_session=True)
    peak, job_id, hung = 0, None, False
    while proc.poll() is None:
        if time.time() - t0 > timeout:
            hung = True
            break
        if job_id is None:
            out.seek(0)
            match = re.search(rb"submitted (\S+) to local", out.read())
            job_id = match.group(1).decode() if match else None
        peak = max(peak, launcher_rss_kib(proc.pid, job_id))
        time.sleep(0.05)
    wall = time.time() - t0
    if hung:
        _kill_run(proc.pid, token, job_id)
    proc.wait()
    out.seek(0)
    text = out.read().decode(errors="replace")
    firsts = [float(x) for x in re.findall(r"first step at ([\d.]+)s after launch", text)]
    return {"rc": None if hung else proc.returncode, "wall": wall, "hung": hung,
            "first": max(firsts) if len(firsts) == 2 else None, "rss_mib": peak / 1024,
            "workers_ok": len(re.findall(r"done after \d+ steps", text))}


def _processes_of_run(session: int, token: str) -> List[int]:
    """Live processes this run started: in the launcher's session (launch.py's roles),
    or carrying its ``BENCH_RUN`` token (mxbatch's roles, in sessions of their own)."""
    mark = f"BENCH_RUN={token}".encode()
    found = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit() or int(entry) == os.getpid():
            continue
        try:
            stat = Path(f"/proc/{entry}/stat").read_bytes()
            sid = int(stat[stat.rindex(b")") + 2:].split()[3])
            marked = mark in Path(f"/proc/{entry}/environ").read_bytes().split(b"\0")
        except (OSError, ValueError, IndexError):
            continue
        if sid == session or marked:
            found.append(int(entry))
    return found


def _kill_run(session: int, token: str, job_id: Optional[str]) -> None:
    """SIGKILL what this run started, and nothing else on the machine: the launcher's
    session, the processes with its token, and the mxbatch job's (MXBATCH_JOB_ID)."""
    from mxbatch.runtime.procs import job_processes, kill_all, wait_gone

    pids = set(_processes_of_run(session, token))
    if job_id:
        pids.update(job_processes(job_id))
    kill_all(sorted(pids), signal.SIGKILL)
    wait_gone(sorted(pids), 10)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--crash-timeout", type=float, default=60.0)
    args = parser.parse_args()
    home = tempfile.mkdtemp(prefix="mxbatch-bench-")
    env = dict(os.environ, MXBATCH_HOME=home, OMP_NUM_THREADS="1",
               PATH=os.path.dirname(sys.executable) + os.pathsep + os.environ["PATH"])
    launchers = {"launch.py": launch_py_argv("local", " ".join(TRAIN)), "mxbatch": mxbatch_argv()}
    results: Dict[str, List[dict]] = {name: [] for name in launchers}
    for _ in range(args.repeat):
        for name, argv in launchers.items():  # interleaved: same machine state for both
            results[name].append(run_once(argv, env, timeout=300))
    crash_env = dict(env, CRASH_RANK="1", CRASH_AFTER_STEPS="20", EPOCHS="50")
    crashes = {name: run_once(argv, crash_env, args.crash_timeout)
               for name, argv in launchers.items()}

    print(f"\n2 servers + 2 workers, dist_sync, 3 epochs, {args.repeat} runs each "
          f"(median, min, max); machine: {os.cpu_count()} cores\n")
    rows = [("", *launchers)]
    rows.append(("exit codes", *(" ".join(str(r["rc"]) for r in results[n]) for n in launchers)))
    rows.append(("workers finished", *(" ".join(str(r["workers_ok"]) for r in results[n])
                                       for n in launchers)))
    rows.append(("launch -> first step (slower worker)",
                 *(fmt([r["first"] for r in results[n]]) for n in launchers)))
    rows.append(("wall time", *(fmt([r["wall"] for r in results[n]]) for n in launchers)))
    rows.append(("launcher peak RSS", *(fmt([r["rss_mib"] for r in results[n]], " MiB")
                                        for n in launchers)))
    rows.append(("worker raises after 20 steps",
                 *(("HUNG, killed after %.0fs" % crashes[n]["wall"]) if crashes[n]["hung"]
                   else "exit %s after %.1fs" % (crashes[n]["rc"], crashes[n]["wall"])
                   for n in launchers)))
    print_table(rows)


if __name__ == "__main__":
    main()
