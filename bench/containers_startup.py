"""Start-up cost of a container per role: bare processes, docker and podman side by side.

Runs the example job (2 servers, 2 workers, dist_sync, 1 epoch) on the local backend
with ``mxbatch submit --wait``, as bare processes and with every role in a docker and
in a podman container (the test image and mounts of ci/clusters/containers-up.sh: the
roles run the host's virtualenv Python), interleaved so each mode sees the same machine
state, and reports (median, min-max over the repetitions):
  - submit -> first training step of the slower worker (LAUNCH_T0 = submit)
  - wall time of ``submit --wait`` (the job's end includes stopping 5 containers)
  - the overhead of each runtime over bare processes (medians)

Needs the container runtimes up (ci/clusters/containers-up.sh) and their env file.

    .venv/bin/python bench/containers_startup.py [--repeat 3]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import tempfile
from pathlib import Path
from typing import Dict, List, Optional

import yaml
from common import EXAMPLES, cluster_env, fmt, print_table, timed_submit

MODES = ("bare", "docker", "podman")


def spec(tmp: Path, mode: str, env: Dict[str, str]) -> Path:
    """The example job in ``mode``: bare processes, or every role in that runtime."""
    data = yaml.safe_load((EXAMPLES / "mlp-ps.yaml").read_text())
    data["workdir"] = str(EXAMPLES)
    if mode != "bare":
        data["command"] = [env["MXBATCH_TEST_CONTAINER_PYTHON"], "train_mlp.py", "--kvstore",
                           "dist_sync"]
        data["container"] = {"runtime": mode, "image": env["MXBATCH_TEST_IMAGE"],
                             "mounts": env["MXBATCH_TEST_CONTAINER_MOUNTS"].split(",")}
    path = tmp / f"{mode}.yaml"
    path.write_text(json.dumps(data))
    return path


def overhead(runs: List[dict], bare: List[dict], key: str) -> str:
    mine = [r[key] for r in runs if r[key] is not None]
    base = [r[key] for r in bare if r[key] is not None]
    if not mine or not base:
        return "-"
    return f"{statistics.median(mine) - statistics.median(base):+.2f}s"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args()
    tmp = Path(tempfile.mkdtemp(prefix="mxbatch-bench-containers-"))
    env = dict(cluster_env("containers"), MXBATCH_HOME=str(tmp / "home"), OMP_NUM_THREADS="1")
    modes = [m for m in MODES if m == "bare" or m in env["MXBATCH_TEST_RUNTIMES"].split()]
    specs = {mode: spec(tmp, mode, env) for mode in modes}
    results: Dict[str, List[dict]] = {mode: [] for mode in modes}
    for _ in range(args.repeat):
        for mode in modes:  # interleaved
            results[mode].append(timed_submit(env, "local", specs[mode]))

    def column(mode: str, key: str, unit: str = "s") -> str:
        values: List[Optional[float]] = [r[key] for r in results[mode]]
        return fmt(values, unit)

    print(f"\nexample job on the local backend: 2 servers + 2 workers, dist_sync, 1 epoch; "
          f"{args.repeat} runs each (median (min-max)); {os.cpu_count()} cores, load "
          f"{os.getloadavg()[0]:.1f}\n")
    rows = [("", *modes)]
    rows.append(("exit codes", *(" ".join(str(r["rc"]) for r in results[m]) for m in modes)))
    rows.append(("submit -> first step (slower worker)",
                 *(column(m, "first_step") for m in modes)))
    rows.append(("  overhead over bare", *(overhead(results[m], results["bare"], "first_step")
                                           for m in modes)))
    rows.append(("wall time (submit --wait)", *(column(m, "wall") for m in modes)))
    rows.append(("  overhead over bare", *(overhead(results[m], results["bare"], "wall")
                                           for m in modes)))
    print_table(rows)


if __name__ == "__main__":
    main()
