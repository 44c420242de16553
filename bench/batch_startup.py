"""Start-up latency of mxbatch on the SGE and Slurm test clusters, next to each cell's floor.

For each way of submitting (SGE via DRMAA and qsub, Slurm arrays and heterogeneous
job) it runs the example job (2 servers, 2 workers, 1 epoch) with ``submit --wait``
and reports, from one run:
  - submit -> all tasks running: latest supervisor start (task records) - submit time
  - submit -> first training step: the slower worker's first step (LAUNCH_T0 = submit)
  - total wall time of ``mxbatch submit --wait``
The floor is one trivial job through the same cell: ``qsub -sync y -b y true`` and
``sbatch --wait --wrap true`` (sbatch polls every 2 s, so also one ``sbatch`` polled
with ``squeue`` every 0.1 s). It also runs MXNet's own ``launch.py --launcher sge``
and prints what it does.

Needs the clusters up (ci/clusters/sge-up.sh, slurm-up.sh) and their env files.

    .venv/bin/python bench/batch_startup.py [--repeat 3] [--only sge|slurm]
"""

from __future__ import annotations

import argparse
import json
import os
import re
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Dict, List, Optional

ROOT = Path(__file__).resolve().parent.parent
EXAMPLES = ROOT / "examples"
STATE = Path(os.environ.get("MXBATCH_CLUSTER_STATE", "/tmp/mxbatch-clusters"))


def cluster_env(name: str) -> Dict[str, str]:
    out = subprocess.run(["bash", "-c", f'. "{STATE / (name + ".env")}" && env -0'],
                         capture_output=True, check=True).stdout
    env = dict(i.decode().split("=", 1) for i in out.split(b"\0") if b"=" in i)
    env["PATH"] = os.path.dirname(sys.executable) + os.pathsep + env["PATH"]
    return env


def spec(tmp: Path, backend: str, options: str) -> Path:
    text = (EXAMPLES / "mlp-ps.yaml").read_text()
    memory = "1G" if backend == "slurm" else "4G"  # the Slurm test nodes advertise 4096 MB
    text = text.replace("workdir: .", f"workdir: {EXAMPLES}").replace("memory: 4G",
                                                                      f"memory: {memory}")
    path = tmp / f"{backend}-{abs(hash(options))}.yaml"
    path.write_text(text + f"backends:\n  {backend}: {{{options}}}\n")
    return path


def run_mxbatch(env: Dict[str, str], backend: str, spec_path: Path) -> dict:
    t0 = time.time()
    result = subprocess.run([sys.executable, "-m", "mxbatch", "submit", "--wait", "--backend",
                             backend, str(spec_path)], capture_output=True, text=True,
                            env=dict(env, LAUNCH_T0=repr(t0), EPOCHS="1"), timeout=600)
    wall = time.time() - t0
    job = result.stdout.split()[0] if result.stdout else ""
    run_dir = Path(env["MXBATCH_HOME"]) / "runs" / job
    starts = [json.loads(p.read_text()).get("started_at") or 0
              for p in (run_dir / "tasks").glob("*.json")] if job else []
    firsts = [float(x) for x in re.findall(r"first step at ([\d.]+)s", result.stdout)]
    return {"rc": result.returncode, "wall": wall,
            "all_running": max(starts) - t0 if starts else None,
            "first_step": max(firsts) if len(firsts) == 2 else None}


def floor(argv: List[str], env: Dict[str, str]) -> float:
    t0 = time.time()
    subprocess.run(argv, capture_output=True, env=env, check=True, timeout=120)
    return time.time() - t0


def sbatch_polled(env: Dict[str, str]) -> float:
    t0 = time.time()
    job = subprocess.run(["sbatch", "--parsable", "--output=/dev/null", "--wrap", "true"],
                         capture_output=True,
                         text=True, env=env, check=True).stdout.strip().split(";")[0]
    while subprocess.run(["squeue", "-h", "-j", job], capture_output=True, text=True,
                         env=env).stdout.strip():
        time.sleep(0.1)
    return time.time() - t0


def launch_py_sge(env: Dict[str, str]) -> str:
    shim = ("import runpy, sys, threading, importlib.util, os\n"
            "threading.Thread.isAlive = threading.Thread.is_alive\n"
            "p = os.path.join(importlib.util.find_spec('mxnet').submodule_search_locations[0],"
            " 'tools', 'launch.py')\n"
            "sys.argv = [p] + sys.argv[1:]\nrunpy.run_path(p, run_name='__main__')\n")
    try:
        result = subprocess.run([sys.executable, "-c", shim, "-n", "2", "-s", "2", "--launcher",
                                 "sge", "python3 train_mlp.py"], cwd=EXAMPLES, env=env,
                                capture_output=True, text=True, timeout=60)
        lines = (result.stderr or result.stdout).strip().splitlines()
        return f"exit {result.returncode}: {lines[-1] if lines else '(no output)'}"
    except subprocess.TimeoutExpired:
        return "no exit within 60 s"


def fmt(values: List[Optional[float]]) -> str:
    values = [v for v in values if v is not None]
    if not values:
        return "-"
    return (f"{statistics.median(values):.2f}s" if len(values) == 1 else
            f"{statistics.median(values):.2f}s ({min(values):.2f}-{max(values):.2f})")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--only", choices=["sge", "slurm"], default=None)
    args = parser.parse_args()
    home = tempfile.mkdtemp(prefix="mxbatch-bench-")
    tmp = Path(home)
    variants = []
    if args.only in (None, "sge"):
        env = dict(cluster_env("sge"), MXBATCH_HOME=home)
        variants += [("sge drmaa", env, "sge", "submitter: drmaa"),
                     ("sge qsub", env, "sge", "submitter: qsub")]
    if args.only in (None, "slurm"):
        env = dict(cluster_env("slurm"), MXBATCH_HOME=home)
        variants += [("slurm arrays", env, "slurm", "het: false"),
                     ("slurm het", env, "slurm", "het: true")]
    rows = [("", "submit->all running", "submit->first step", "wall", "exit codes")]
    for label, env, backend, options in variants:
        runs = [run_mxbatch(env, backend, spec(tmp, backend, options)) for _ in range(args.repeat)]
        rows.append((label, fmt([r["all_running"] for r in runs]),
                     fmt([r["first_step"] for r in runs]), fmt([r["wall"] for r in runs]),
                     " ".join(str(r["rc"]) for r in runs)))
    if args.only in (None, "sge"):
        env = cluster_env("sge")
        rows.append(("floor: qsub -sync y -b y true", "", "",
                     fmt([floor(["qsub", "-sync", "y", "-b", "y", "true"], env)
                          for _ in range(args.repeat)]), ""))
        rows.append(("launch.py --launcher sge", "", "", "", launch_py_sge(env)))
    if args.only in (None, "slurm"):
        env = cluster_env("slurm")
        rows.append(("floor: sbatch --wait --wrap true", "", "",
                     fmt([floor(["sbatch", "--wait", "--output=/dev/null", "--wrap", "true"], env)
                          for _ in range(args.repeat)]), ""))
        rows.append(("floor: sbatch + squeue every 0.1s", "", "",
                     fmt([sbatch_polled(env) for _ in range(args.repeat)]), ""))
    widths = [max(len(r[i]) for r in rows) for i in range(5)]
    print()
    for row in rows:
        print("  ".join(cell.ljust(widths[i]) for i, cell in enumerate(row)))


if __name__ == "__main__":
    main()
