"""mxbatch vs MXNet's own launch.py (--launcher local), side by side in one run.

Two jobs, each launcher interleaved with the other:
  - the example: examples/train_mlp.py, 2 servers, 2 workers (--repeat runs);
  - the trivial-role job: 1 server, 1 worker, every role ``python3 -c pass``
    (--trivial-repeat runs): what the launcher itself costs.
For each launcher and repetition it measures:
  - first step: seconds from launch to the first training step of the slower worker
    (the trivial job: to its worker's start)
  - first role runs: seconds from launch to the first role's command running, as a
    ``python3`` stand-in first on PATH records it (the same for both launchers: it
    writes the time, then execs the real python3); mxbatch also says, from its task
    records, when it exec'd its first role and how much CPU its CLI had used by then
  - wall: seconds from launch until the launcher exits
  - last role gone: seconds from launch until no process of the run is left (launch.py's
    local launcher returns when its scheduler exits: its servers and workers may still
    be running), and how many were left when the launcher exited
  - launcher RSS: peak summed RSS of the launcher's own processes (everything it
    started except the MXNet role processes, i.e. those with DMLC_ROLE set; for
    launch.py that leaves the tracker, for mxbatch the CLI, the job manager and
    the supervisors), sampled every 50 ms
  - crash: a worker raising after 20 steps; the launcher's exit code and how long it
    took to exit (launch.py is stopped after --crash-timeout seconds if it hangs)

``--baseline DIR`` adds "mxbatch (baseline)": the same runs with the mxbatch of another
checkout (DIR first on PYTHONPATH, e.g. a ``git worktree`` of an earlier commit, its
bytecode compiled), interleaved with the others.

    .venv/bin/python bench/local_vs_launchpy.py [--repeat 3] [--trivial-repeat 7]
        [--crash-timeout 60] [--only example|trivial] [--baseline DIR]
"""

from __future__ import annotations

import argparse
import json
import os
import re
import secrets
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Dict, List, Optional, Sequence, Tuple

from common import EXAMPLES, compile_mxbatch, fmt, launch_py_argv, print_table

TRAIN = ["python3", "train_mlp.py", "--kvstore", "dist_sync", "--epochs", "3"]
TRIVIAL = ["python3", "-c", "pass"]
#: the ``python3`` first on the roles' PATH: when each role started, then the real one
STAND_IN = """#!/bin/bash
printf '%s %s\\n' "${DMLC_ROLE:-none}" "${EPOCHREALTIME:-$(date +%s.%N)}" >> "$BENCH_STARTS"
exec @PYTHON3@ "$@"
"""


def mxbatch_argv(command: Sequence[str], workers: int, servers: int) -> List[str]:
    return [sys.executable, "-m", "mxbatch", "launch", "-n", str(workers), "-s", str(servers),
            "--grace", "5s", "--", *command]


def stand_in_dir(env: Dict[str, str]) -> str:
    """A directory with the ``python3`` stand-in (STAND_IN) for the front of PATH."""
    real = shutil.which("python3", path=env["PATH"])
    assert real, "python3 is not on PATH"
    folder = tempfile.mkdtemp(prefix="mxbatch-bench-bin-")
    path = Path(folder) / "python3"
    path.write_text(STAND_IN.replace("@PYTHON3@", real))
    path.chmod(0o755)
    return folder


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


def role_starts(path: Path, t0: float) -> Dict[str, List[float]]:
    """Seconds after ``t0`` at which each role's command started (the stand-in's lines)."""
    starts: Dict[str, List[float]] = {}
    try:
        lines = path.read_text().splitlines()
    except OSError:
        return starts
    for line in lines:
        role, _, when = line.partition(" ")
        if not when:
            raise SystemExit(f"unexpected line {line!r} in {path}: {lines}")
        starts.setdefault(role, []).append(float(when.replace(",", ".")) - t0)
    return starts


def own_first_exec(home: str, job_id: Optional[str], t0: float) -> Dict[str, Optional[float]]:
    """mxbatch's own word (its task records): when it exec'd its first role, after ``t0``,
    and the CPU seconds its CLI (the job's agent) had used by then."""
    records = []
    if job_id:
        for path in (Path(home) / "runs" / job_id / "tasks").glob("*.json"):
            record = json.loads(path.read_text())
            if record.get("exec_at"):
                records.append(record)
    if not records:
        return {"exec": None, "cpu": None}
    first = min(records, key=lambda r: r["exec_at"])
    return {"exec": first["exec_at"] - t0, "cpu": first.get("exec_cpu_s")}


def run_once(argv: List[str], env: Dict[str, str], timeout: float) -> dict:
    t0 = time.time()
    token = secrets.token_hex(8)  # marks every process of this run (roles inherit it)
    starts_file = Path(tempfile.mkstemp(prefix="mxbatch-bench-starts-")[1])
    env = dict(env, LAUNCH_T0=repr(t0), BENCH_RUN=token, BENCH_STARTS=str(starts_file))
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
    left, gone = _left_at_exit(proc.pid, token, t0, deadline=t0 + timeout)
    out.seek(0)
    text = out.read().decode(errors="replace")
    firsts = [float(x) for x in re.findall(r"first step at ([\d.]+)s after launch", text)]
    starts = role_starts(starts_file, t0)
    starts_file.unlink()
    every = [t for times in starts.values() for t in times]
    own = own_first_exec(env["MXBATCH_HOME"], job_id, t0)
    return {"rc": None if hung else proc.returncode, "wall": wall, "hung": hung,
            "first": max(firsts) if len(firsts) == 2 else None, "rss_mib": peak / 1024,
            "workers_ok": len(re.findall(r"done after \d+ steps", text)),
            "first_role": min(every) if every else None,
            "worker_runs": max(starts["worker"]) if starts.get("worker") else None,
            "own_exec": own["exec"], "own_cpu": own["cpu"], "left": left, "gone": gone}


def _left_at_exit(session: int, token: str, t0: float, deadline: float
                  ) -> Tuple[int, Optional[float]]:
    """How many processes of the run outlived its launcher, and the seconds from ``t0``
    until the last was gone (looked for every 10 ms; None: still there at ``deadline``,
    then killed)."""
    left = len(_processes_of_run(session, token))
    while _processes_of_run(session, token):
        if time.time() > deadline:
            _kill_run(session, token, None)
            return left, None
        time.sleep(0.01)
    return left, time.time() - t0


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


BASELINE = "mxbatch (baseline)"


def env_of(name: str, env: Dict[str, str], baseline: Optional[str]) -> Dict[str, str]:
    """The environment a launcher runs in: the baseline's mxbatch first on its path."""
    return dict(env, PYTHONPATH=baseline) if name == BASELINE and baseline else env


def with_baseline(launchers: Dict[str, List[str]], baseline: Optional[str]
                  ) -> Dict[str, List[str]]:
    """``launchers`` and, given a baseline, mxbatch's argv again under BASELINE."""
    return dict(launchers, **{BASELINE: launchers["mxbatch"]}) if baseline else launchers


def compare(launchers: Dict[str, List[str]], env: Dict[str, str], repeat: int,
            timeout: float = 300, baseline: Optional[str] = None) -> Dict[str, List[dict]]:
    """``repeat`` runs of each launcher, interleaved (the same machine state for all)."""
    results: Dict[str, List[dict]] = {name: [] for name in launchers}
    for _ in range(repeat):
        for name, argv in launchers.items():
            results[name].append(run_once(argv, env_of(name, env, baseline), timeout=timeout))
    return results


def rows_of(results: Dict[str, List[dict]], first_step: str) -> List[tuple]:
    names = list(results)

    def each(key: str, unit: str = "s") -> List[str]:
        return [fmt([r[key] for r in results[n]], unit) for n in names]

    def mxbatch_only(key: str, unit: str = "s") -> List[str]:
        return [fmt([r[key] for r in results[n]], unit) if n.startswith("mxbatch") else "-"
                for n in names]

    return [("", *names),
            ("exit codes", *(" ".join(str(r["rc"]) for r in results[n]) for n in names)),
            (first_step, *each("first" if "training" in first_step else "worker_runs")),
            ("launch -> first role runs", *each("first_role")),
            ("launch -> first role exec'd (own records)", *mxbatch_only("own_exec")),
            ("CLI CPU by then (own records)", *mxbatch_only("own_cpu")),
            ("wall time", *each("wall")),
            ("launch -> last role process gone", *each("gone")),
            ("role processes left at the launcher's exit",
             *(" ".join(str(r["left"]) for r in results[n]) for n in names)),
            ("launcher peak RSS", *each("rss_mib", " MiB"))]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=3, help="runs of the example job")
    parser.add_argument("--trivial-repeat", type=int, default=7,
                        help="runs of the trivial-role job")
    parser.add_argument("--crash-timeout", type=float, default=60.0)
    parser.add_argument("--only", choices=("example", "trivial"), default=None)
    parser.add_argument("--baseline", metavar="DIR", default=None,
                        help="another checkout's mxbatch, run as a third launcher")
    args = parser.parse_args()
    baseline = str(Path(args.baseline).resolve()) if args.baseline else None
    compile_mxbatch()
    home = tempfile.mkdtemp(prefix="mxbatch-bench-")
    env = dict(os.environ, MXBATCH_HOME=home, OMP_NUM_THREADS="1",
               PATH=os.path.dirname(sys.executable) + os.pathsep + os.environ["PATH"])
    env["PATH"] = stand_in_dir(env) + os.pathsep + env["PATH"]
    print(f"{time.strftime('%Y-%m-%d %H:%M')}; machine: {os.cpu_count()} cores; load "
          f"average at the start {' '.join('%.1f' % x for x in os.getloadavg())}", flush=True)
    if args.only != "example":
        trivial = with_baseline({"launch.py": launch_py_argv("local", " ".join(TRIVIAL), 1, 1),
                                 "mxbatch": mxbatch_argv(TRIVIAL, 1, 1)}, baseline)
        results = compare(trivial, env, args.trivial_repeat, timeout=60, baseline=baseline)
        print(f"\nthe trivial-role job: 1 server + 1 worker, every role {' '.join(TRIVIAL)}, "
              f"{args.trivial_repeat} runs each (median, min-max)")
        print_table(rows_of(results, "launch -> worker runs"))
    if args.only != "trivial":
        launchers = with_baseline({"launch.py": launch_py_argv("local", " ".join(TRAIN)),
                                   "mxbatch": mxbatch_argv(TRAIN, 2, 2)}, baseline)
        results = compare(launchers, env, args.repeat, baseline=baseline)
        crash_env = dict(env, CRASH_RANK="1", CRASH_AFTER_STEPS="20", EPOCHS="50")
        crashes = {name: run_once(argv, env_of(name, crash_env, baseline), args.crash_timeout)
                   for name, argv in launchers.items()}
        print(f"\n2 servers + 2 workers, dist_sync, 3 epochs, {args.repeat} runs each "
              f"(median, min-max)")
        rows = rows_of(results, "launch -> first training step (slower worker)")
        rows.insert(2, ("workers finished", *(" ".join(str(r["workers_ok"])
                                                       for r in results[n])
                                              for n in launchers)))
        rows.append(("worker raises after 20 steps",
                     *(("HUNG, killed after %.0fs" % crashes[n]["wall"]) if crashes[n]["hung"]
                       else "exit %s after %.1fs" % (crashes[n]["rc"], crashes[n]["wall"])
                       for n in launchers)))
        print_table(rows)
    print(f"\nload average at the end {' '.join('%.1f' % x for x in os.getloadavg())}")


if __name__ == "__main__":
    main()
