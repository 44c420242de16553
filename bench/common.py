"""What the benchmarks share: cluster environments, one timed ``mxbatch submit --wait``,
MXNet's own launch.py, and the median/min/max format. Imported by the scripts beside
it (``python bench/<script>.py`` puts this folder on ``sys.path``)."""

from __future__ import annotations

import json
import os
import re
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Dict, List, Optional, Sequence

from mxbatch.runtime.layout import RunLayout

ROOT = Path(__file__).resolve().parent.parent
EXAMPLES = ROOT / "examples"
STATE = Path(os.environ.get("MXBATCH_CLUSTER_STATE", "/tmp/mxbatch-clusters"))

#: runs MXNet's tools/launch.py from the installed wheel; it predates Python 3.9
LAUNCH_PY_SHIM = (
    "import importlib.util, os, runpy, sys, threading\n"
    "threading.Thread.isAlive = threading.Thread.is_alive\n"
    "package = importlib.util.find_spec('mxnet').submodule_search_locations[0]\n"
    "path = os.path.join(package, 'tools', 'launch.py')\n"
    "sys.argv = [path] + sys.argv[1:]\n"
    "runpy.run_path(path, run_name='__main__')\n"
)


def compile_mxbatch() -> None:
    """Compile mxbatch's bytecode, as ``pip install`` does, so the runs measure an
    installed package: an editable checkout used with ``PYTHONDONTWRITEBYTECODE`` would
    compile every module in every CLI and agent start (about 0.2 s of CPU each on the
    test VM), and ``runtime.pyz`` carries the bytecode it finds."""
    import compileall

    compileall.compile_dir(str(ROOT / "mxbatch"), quiet=1)


def launch_py_argv(launcher: str, command: str, workers: int = 2, servers: int = 2) -> List[str]:
    return [sys.executable, "-c", LAUNCH_PY_SHIM, "-n", str(workers), "-s", str(servers),
            "--launcher", launcher, command]


def cluster_env(name: str) -> Dict[str, str]:
    """This environment after sourcing ``<state>/<name>.env``, with this Python first."""
    out = subprocess.run(["bash", "-c", f'. "{STATE / (name + ".env")}" && env -0'],
                         capture_output=True, check=True).stdout
    env = dict(i.decode().split("=", 1) for i in out.split(b"\0") if b"=" in i)
    env["PATH"] = os.path.dirname(sys.executable) + os.pathsep + env["PATH"]
    return env


def timed_submit(env: Dict[str, str], backend: str, spec_path: Path) -> dict:
    """One ``mxbatch submit --wait`` of a 1-epoch job: exit code, wall time, submit ->
    all tasks running (latest supervisor start), submit -> the slower worker's first step,
    and the job's ``start_stages``."""
    t0 = time.time()
    # not from the checkout's root: ``python -m`` puts the working directory first on
    # sys.path, where this checkout's mxbatch would win over a baseline's PYTHONPATH
    result = subprocess.run([sys.executable, "-m", "mxbatch", "submit", "--wait", "--backend",
                             backend, str(spec_path)], capture_output=True, text=True,
                            env=dict(env, LAUNCH_T0=repr(t0), EPOCHS="1"), timeout=600,
                            cwd=EXAMPLES)
    wall = time.time() - t0
    job = result.stdout.split()[0] if result.stdout else ""
    run = Path(env["MXBATCH_HOME"]) / "runs" / job
    tasks_dir = Path(RunLayout(str(run)).tasks_dir)
    starts = [json.loads(p.read_text()).get("started_at") or 0
              for p in tasks_dir.glob("*.json")] if job else []
    firsts = [float(x) for x in re.findall(r"first step at ([\d.]+)s", result.stdout)]
    stages = start_stages(run if job else None, t0)
    if result.returncode != 0:
        sys.stderr.write(result.stderr[-2000:])
    return {"rc": result.returncode, "wall": wall, "stderr": result.stderr, "stages": stages,
            "all_running": max(starts) - t0 if len(starts) == 5 else None,
            "first_step": max(firsts) if len(firsts) == 2 else None}


def newest_run(home: Path, t0: float) -> Optional[Path]:
    """The newest run directory under ``home`` made after ``t0``; None if none."""
    runs = [p for p in (home / "runs").glob("*") if p.stat().st_mtime >= t0 - 1]
    return max(runs, key=lambda p: p.stat().st_mtime) if runs else None


def start_stages(run: Optional[Path], t0: float) -> Dict[str, Optional[float]]:
    """Where an mxbatch job's start went, from its own records in ``run``: ``plan``, the
    job's plan made (after ``t0``, the launch); then from the plan's ``created_at``:
    ``first_task``, the first task's supervisor started (a batch job: out of the queue);
    ``sched_exec``, the scheduler's role started; ``listen``, the scheduler listening;
    and ``join_lag``, the last member going on after that (``joined_at``: its
    supervisor read the listening record). ``{}`` when the records are not whole."""
    if run is None:
        return {}
    try:
        created = json.loads((run / "plan.json").read_text())["created_at"]
        records = [json.loads(p.read_text()) for p in (run / "tasks").glob("*.json")]
        scheduler = next(r for r in records if r["role"] == "scheduler")
        joined = [r["joined_at"] for r in records
                  if r["role"] != "scheduler" and r.get("joined_at")]
        return {"plan": created - t0,
                "first_task": min(r["started_at"] for r in records) - created,
                "sched_exec": scheduler["exec_at"] - created,
                "listen": scheduler["reached_at"] - created,
                "join_lag": max(joined) - scheduler["reached_at"] if joined else None}
    except (OSError, ValueError, KeyError, TypeError, StopIteration):
        return {}


def print_table(rows: List[Sequence[str]]) -> None:
    """Rows of cells as left-aligned columns; the first row is the header."""
    widths = [max(len(str(row[i])) for row in rows) for i in range(len(rows[0]))]
    print()
    for row in rows:
        print("  ".join(str(cell).ljust(widths[i]) for i, cell in enumerate(row)))


def fmt(values: List[Optional[float]], unit: str = "s") -> str:
    """``median (min-max)`` of the values that exist; ``-`` if none."""
    values = [v for v in values if v is not None]
    if not values:
        return "-"
    if len(values) == 1:
        return f"{values[0]:.2f}{unit}"
    return (f"{statistics.median(values):.2f}{unit} "
            f"({min(values):.2f}-{max(values):.2f})")
