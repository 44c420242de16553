"""Start-up inside an allocation against the array submission on the same Slurm cluster,
and against the floor.

For each repetition, inside one ``salloc -N 3`` (its own wait for the allocation left
out):
  - floor: ``srun --overlap -N 3 --ntasks-per-node=1 true`` across the same nodes
  - inside: ``mxbatch launch --backend slurm -n 2 -s 2`` of the example job (1 epoch),
    launch -> the slower worker's first training step (LAUNCH_T0 = launch), and the
    launch's wall time
and outside any allocation ``mxbatch submit --wait --backend slurm`` of the same job
(one array a role), submit -> the slower worker's first step. The same for SGE with
``--sge``: inside ``qsub -pe mpi 5`` (from the job script's start) against the arrays,
and ``gang: true`` (one parallel job whose master starts the tasks with qrsh -inherit).

Needs the clusters up (ci/clusters/slurm-up.sh, sge-up.sh) and their env files.

    .venv/bin/python bench/allocation_startup.py [--repeat 3] [--sge]
"""

from __future__ import annotations

import argparse
import re
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Dict, List, Optional

from batch_startup import spec
from common import EXAMPLES, cluster_env, compile_mxbatch, fmt, print_table, timed_submit

#: the end of each script: times the launch; prints RC= and WALL= and the roles' lines
#: (not the status lines: on stderr, they would cut the roles' lines where SGE's -j y
#: joins both into one file)
LAUNCH = """t0=$(date +%s.%N)
EPOCHS=1 LAUNCH_T0=$t0 {python} -m mxbatch launch --backend {backend} -n 2 -s 2 --grace 5s \\
    -- python3 train_mlp.py --kvstore dist_sync 2>/dev/null
echo "RC=$?"
echo "WALL=$(echo "$(date +%s.%N) - $t0" | bc)"
"""
#: inside salloc: the floor (srun true on every node; FLOOR=), then the launch
SALLOC_SCRIPT = """#!/bin/bash
cd {examples}
t0=$(date +%s.%N)
srun --overlap -N 3 --ntasks-per-node=1 true
echo "FLOOR=$(echo "$(date +%s.%N) - $t0" | bc)"
""" + LAUNCH
#: in an SGE parallel job: the floor (qrsh -inherit true to every host), then the launch
PE_SCRIPT = """#!/bin/sh
export PATH={bindir}:$PATH
cd {examples}
t0=$(date +%s.%N)
while read -r h _; do qrsh -inherit "$h" true </dev/null; done <"$PE_HOSTFILE"
echo "FLOOR=$(echo "$(date +%s.%N) - $t0" | bc)"
""" + LAUNCH


def parse(text: str) -> Dict[str, Optional[float]]:
    said = dict(re.findall(r"^([A-Z]+)=([\d.]+)$", text, re.MULTILINE))
    if said.get("RC") != "0":
        sys.stderr.write("a launch inside the allocation failed:\n" + text[-3000:] + "\n")
    firsts = [float(x) for x in re.findall(r"first step at ([\d.]+)s", text)]
    return {"floor": float(said["FLOOR"]) if "FLOOR" in said else None,
            "wall": float(said["WALL"]) if "WALL" in said else None,
            "first": max(firsts) if len(firsts) == 2 and said.get("RC") == "0" else None}


def inside_slurm(env: Dict[str, str], tmp: Path) -> Dict[str, Optional[float]]:
    script = tmp / "in-salloc.sh"
    script.write_text(SALLOC_SCRIPT.format(examples=EXAMPLES, python=sys.executable,
                                           backend="slurm"))
    script.chmod(0o755)
    result = subprocess.run(["salloc", "-N", "3", "-t", "10", str(script)], capture_output=True,
                            text=True, env=env, timeout=600)
    return parse(result.stdout + result.stderr)


def inside_sge(env: Dict[str, str], tmp: Path) -> Dict[str, Optional[float]]:
    script = tmp / "in-pe.sh"
    script.write_text(PE_SCRIPT.format(examples=EXAMPLES, python=sys.executable,
                                       bindir=Path(sys.executable).parent, backend="sge"))
    out = tmp / "in-pe.out"
    subprocess.run(["qsub", "-sync", "y", "-V", "-j", "y", "-o", str(out), "-pe",
                    env.get("MXBATCH_SGE_GANG_PE", "mpi"), "5", str(script)],
                   capture_output=True, text=True, env=env, timeout=600)
    return parse(out.read_text() if out.exists() else "")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--sge", action="store_true", help="also SGE (qsub -pe mpi 5)")
    args = parser.parse_args()
    compile_mxbatch()
    rows: List[List[str]] = [["variant", "floor", "to first step", "wall"]]
    systems = [("slurm", inside_slurm, "srun true, 3 nodes")]
    if args.sge:
        systems.append(("sge", inside_sge, "qrsh -inherit true, each host"))
    for backend, inside, floor_name in systems:
        with tempfile.TemporaryDirectory(prefix="mxbatch-bench-") as scratch:
            tmp = Path(scratch)
            env = dict(cluster_env(backend), MXBATCH_HOME=str(tmp / "home"))
            runs = [inside(env, tmp) for _ in range(args.repeat)]
            arrays = [timed_submit(env, backend, spec(tmp, backend, "inside: false"))
                      for _ in range(args.repeat)]
        rows.append([f"{backend}: {floor_name}", fmt([r["floor"] for r in runs]), "", ""])
        rows.append([f"{backend}: inside the allocation (launch)", "",
                     fmt([r["first"] for r in runs]), fmt([r["wall"] for r in runs])])
        rows.append([f"{backend}: arrays (submit --wait)", "",
                     fmt([a["first_step"] for a in arrays]), fmt([a["wall"] for a in arrays])])
        if backend == "sge":
            with tempfile.TemporaryDirectory(prefix="mxbatch-bench-") as scratch:
                tmp = Path(scratch)
                env = dict(cluster_env(backend), MXBATCH_HOME=str(tmp / "home"))
                gangs = [timed_submit(env, backend, spec(tmp, backend, "gang: true"))
                         for _ in range(args.repeat)]
            rows.append(["sge: gang (submit --wait, gang: true)", "",
                         fmt([g["first_step"] for g in gangs]),
                         fmt([g["wall"] for g in gangs])])
    print(f"(median (min-max) of {args.repeat}; {time.strftime('%Y-%m-%d %H:%M')})")
    print_table(rows)


if __name__ == "__main__":
    main()
