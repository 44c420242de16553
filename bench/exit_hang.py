"""MXNet's exit hang, end to end: mxbatch against launch.py (and an earlier mxbatch) in one run.

The job: ``examples/image_classification.py --uneven-batches 1`` (one epoch) with 2
servers and 2 workers under ``dist_sync``: every run trains to the end and then hangs at
exit (one worker in MXNet's ``atexit`` handler, the other in ``KVStore.__del__``).
``--samples`` sizes the training (the default trains about 20 s on the 2-core test VM;
more epochs would make the uneven batches a deadlock instead, which fails the job).
Each launcher runs with its defaults, interleaved, ``--repeat`` times:

- mxbatch (``mxbatch launch -n 2 -s 2``): wall time, and from its task records the
  training (first task start to the last worker's code finished) and the time from the
  last worker's code finishing to the job's end;
- ``--baseline DIR``: the same with the mxbatch of another checkout (DIR first on
  PYTHONPATH, e.g. a ``git worktree`` of the commit before ``exit_grace``);
- launch.py (``--launcher local``): it never ends by itself; it is stopped after
  ``--launchpy-timeout`` seconds, and the row says so.

    .venv/bin/python bench/exit_hang.py [--repeat 3] [--samples 16384] [--baseline DIR]
"""

from __future__ import annotations

import argparse
import json
import os
import secrets
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Dict, List, Optional

from common import EXAMPLES, compile_mxbatch, fmt, launch_py_argv, print_table

from mxbatch.runtime import procs
from mxbatch.runtime.layout import RunLayout

BASELINE = "mxbatch (baseline)"


@dataclass(frozen=True)
class Run:
    """One run of the job under one launcher (``None``: not measured)."""

    rc: Optional[int]
    wall: float
    hung: bool  # the launcher was stopped at the time limit
    training: Optional[float] = None  # first task start -> last worker's code finished
    after_code: Optional[float] = None  # last worker's code finished -> the job's end


def job_command(samples: int) -> List[str]:
    return ["python3", "image_classification.py", "--uneven-batches", "1", "--epochs", "1",
            "--samples", str(samples)]


def mxbatch_times(home: Path, job: str) -> Dict[str, Optional[float]]:
    """Training and after-code durations from the job's own task records."""
    tasks = Path(RunLayout(str(home / "runs" / job)).tasks_dir)
    records = [json.loads(p.read_text()) for p in tasks.glob("*.json")]
    finished = [r.get("code_finished_at") for r in records if r["role"] == "worker"]
    if not records or not all(finished):
        return {}
    last = max(finished)
    return {"training": last - min(r["started_at"] for r in records),
            "after_code": max(r["ended_at"] for r in records) - last}


def run_once(argv: List[str], env: Dict[str, str], cwd: Path, limit: float,
             home: Optional[Path]) -> Run:
    t0 = time.time()
    tag = f"MXBATCH_BENCH_RUN={secrets.token_hex(8)}"
    env = dict(env, MXBATCH_BENCH_RUN=tag.partition("=")[2])
    proc = subprocess.Popen(argv, cwd=cwd, env=env, stdout=subprocess.PIPE,
                            stderr=subprocess.DEVNULL, text=True, start_new_session=True)
    try:
        out, _ = proc.communicate(timeout=limit)
        hung = False
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        out, _ = proc.communicate()
        hung = True
    wall = time.time() - t0
    for pid in procs.processes_with_variable(lambda variable: variable == tag.encode()):
        try:  # what the launcher left behind (launch.py's roles)
            os.kill(pid, signal.SIGKILL)
        except OSError:
            pass
    times: Dict[str, Optional[float]] = {}
    if home is not None and out.split():
        times = mxbatch_times(home, out.split()[0])
    return Run(rc=None if hung else proc.returncode, wall=wall, hung=hung, **times)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--samples", type=int, default=16384)
    parser.add_argument("--launchpy-timeout", type=float, default=150.0)
    parser.add_argument("--baseline", metavar="DIR", default=None)
    args = parser.parse_args()
    compile_mxbatch()
    work = Path(tempfile.mkdtemp(prefix="mxbatch-bench-exit-"))
    shutil.copy(EXAMPLES / "image_classification.py", work / "image_classification.py")
    home = work / "home"
    env = dict(os.environ, MXBATCH_HOME=str(home), OMP_NUM_THREADS="1")
    command = job_command(args.samples)
    mxbatch = [sys.executable, "-m", "mxbatch", "launch", "--quiet", "-n", "2", "-s", "2",
               "--", *command]
    launchers = {"mxbatch": (mxbatch, env, 600.0, home),
                 "launch.py": (launch_py_argv("local", " ".join(command)), env,
                               args.launchpy_timeout, None)}
    if args.baseline:
        launchers[BASELINE] = (mxbatch, dict(env, PYTHONPATH=str(Path(args.baseline).resolve())),
                               600.0, home)
    results: Dict[str, List[Run]] = {name: [] for name in launchers}
    for _ in range(args.repeat):
        for name, (argv, launcher_env, limit, launcher_home) in launchers.items():
            results[name].append(run_once(argv, launcher_env, work, limit, launcher_home))
    rows = [["launcher", "ended by itself", "exit codes", "wall", "training",
             "last code finished -> job end"]]
    for name, runs in results.items():
        rows.append([name, f"{sum(not r.hung for r in runs)}/{len(runs)}",
                     ",".join("hung" if r.hung else str(r.rc) for r in runs),
                     fmt([r.wall for r in runs]), fmt([r.training for r in runs]),
                     fmt([r.after_code for r in runs])])
    print_table(rows)
    print(f"\n{args.repeat} runs each, interleaved; launch.py stopped after "
          f"{args.launchpy_timeout:.0f}s; load {os.getloadavg()[0]:.1f}")
    shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
