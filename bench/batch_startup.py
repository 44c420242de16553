"""Start-up latency of mxbatch on the SGE and Slurm test clusters, next to each cell's floor.

For each way of submitting (SGE via DRMAA and qsub, Slurm arrays and heterogeneous
job) it runs the example job (2 servers, 2 workers, 1 epoch) with ``submit --wait``
and reports, from one run:
  - submit -> all tasks running: latest supervisor start (task records) - submit time
  - submit -> first training step: the slower worker's first step (LAUNCH_T0 = submit)
  - total wall time of ``mxbatch submit --wait``
  - where the start went, from the job's own records (``common.start_stages``): the CLI
    to the plan, the queue to the first task's supervisor, the scheduler's role started
    and listening, the last member going on after that
The floor is one trivial job through the same cell: ``qsub -sync y -b y true`` and
``sbatch --wait --wrap true`` (sbatch polls every 2 s, so also one ``sbatch`` polled
with ``squeue`` every 0.1 s). It also runs MXNet's own ``launch.py --launcher sge``
and prints what it does.

Needs the clusters up (ci/clusters/sge-up.sh, slurm-up.sh) and their env files.
``--baseline DIR`` adds each way of submitting with the mxbatch of another checkout (DIR
first on PYTHONPATH; compile its bytecode first), the runs interleaved with the others.

    .venv/bin/python bench/batch_startup.py [--repeat 3] [--only sge|slurm] [--baseline DIR]
"""

from __future__ import annotations

import argparse
import subprocess
import tempfile
import time
from pathlib import Path
from typing import Dict, List

from common import (
    EXAMPLES,
    cluster_env,
    compile_mxbatch,
    fmt,
    launch_py_argv,
    print_table,
    timed_submit,
)

#: the stages of ``common.start_stages`` shown, and their column names
STAGES = {"plan": "submit->plan", "first_task": "plan->first task", "sched_exec":
          "plan->scheduler exec", "listen": "plan->listening", "join_lag":
          "listening->last member on"}


def spec(tmp: Path, backend: str, options: str) -> Path:
    text = (EXAMPLES / "mlp-ps.yaml").read_text()
    memory = "1G" if backend == "slurm" else "4G"  # the Slurm test nodes advertise 4096 MB
    text = text.replace("workdir: .", f"workdir: {EXAMPLES}").replace("memory: 4G",
                                                                      f"memory: {memory}")
    path = tmp / f"{backend}-{abs(hash(options))}.yaml"
    path.write_text(text + f"backends:\n  {backend}: {{{options}}}\n")
    return path


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
    try:
        result = subprocess.run(launch_py_argv("sge", "python3 train_mlp.py"), cwd=EXAMPLES,
                                env=env, capture_output=True, text=True, timeout=60)
        lines = (result.stderr or result.stdout).strip().splitlines()
        return f"exit {result.returncode}: {lines[-1] if lines else '(no output)'}"
    except subprocess.TimeoutExpired:
        return "no exit within 60 s"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--only", choices=["sge", "slurm"], default=None)
    parser.add_argument("--baseline", metavar="DIR", default=None,
                        help="also run the mxbatch of this checkout (see the docstring)")
    args = parser.parse_args()
    compile_mxbatch()
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
    if args.baseline:
        base = str(Path(args.baseline).resolve())
        variants = [twin for label, env, backend, options in variants
                    for twin in ((f"{label} (baseline)", dict(env, PYTHONPATH=base), backend,
                                  options), (label, env, backend, options))]
    runs: Dict[str, List[dict]] = {label: [] for label, *_ in variants}
    for _ in range(args.repeat):  # interleaved: the same machine state for all
        for label, env, backend, options in variants:
            runs[label].append(timed_submit(env, backend, spec(tmp, backend, options)))
    rows = [("", "submit->all running", "submit->first step", "wall", "exit codes")]
    stage_rows = [("", *STAGES.values())]
    for label, done in runs.items():
        rows.append((label, fmt([r["all_running"] for r in done]),
                     fmt([r["first_step"] for r in done]), fmt([r["wall"] for r in done]),
                     " ".join(str(r["rc"]) for r in done)))
        stage_rows.append((label, *(fmt([r["stages"].get(key) for r in done])
                                    for key in STAGES)))
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
    print_table(rows)
    print("\nwhere the start went, from the jobs' own records (see common.start_stages):")
    print_table(stage_rows)


if __name__ == "__main__":
    main()
