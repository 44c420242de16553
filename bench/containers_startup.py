"""Start-up cost of a container per role: bare processes, docker and podman side by side.

Two measurements, each interleaved so every mode sees the same machine state:

1. One role's start: seconds from starting the command to the first statement of its
   Python (``python -c 'print(time.time())'``), bare and through ``<runtime> run --rm
   --init --network host`` with the test image and mounts: the price of a container
   per role, without MXNet.
2. The example job (2 servers, 2 workers, dist_sync, 1 epoch) on the local backend with
   ``mxbatch submit --wait``: submit -> first training step of the slower worker
   (LAUNCH_T0 = submit) and the wall time, as bare processes, with every role in
   docker and in podman, and in both with ``--cgroup-parent=/``. Docker and podman put
   their containers under one cgroup of theirs (``/docker``, ``/libpod_parent``), which
   competes for CPU as a single entity with every process group of a busy host (the
   kernel's autogroups: each bare role, in its own session, is one); with
   ``--cgroup-parent=/`` each container competes on its own, as a bare role does.

Needs the container runtimes up (ci/clusters/containers-up.sh) and their env file.

    .venv/bin/python bench/containers_startup.py [--repeat 3] [--starts 5]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import tempfile
import time
from pathlib import Path
from typing import Dict, List, Optional

import yaml
from common import EXAMPLES, cluster_env, compile_mxbatch, fmt, print_table, timed_submit

#: mode -> (runtime or None for bare processes, extra container options)
MODES = {"bare": (None, []), "docker": ("docker", []), "podman": ("podman", []),
         "docker /": ("docker", ["--cgroup-parent=/"]),
         "podman /": ("podman", ["--cgroup-parent=/"])}
FIRST_STATEMENT = "import time; print(repr(time.time()))"


def container_argv(env: Dict[str, str], runtime: str) -> List[str]:
    argv = [runtime, "run", "--rm", "--init", "--network", "host"]
    for mount in env["MXBATCH_TEST_CONTAINER_MOUNTS"].split(","):
        argv += ["-v", mount]
    return argv + [env["MXBATCH_TEST_IMAGE"]]


def role_start(env: Dict[str, str], runtime: Optional[str]) -> float:
    """Seconds from starting a role's command to its Python's first statement."""
    prefix = container_argv(env, runtime) if runtime else []
    t0 = time.time()
    out = subprocess.run(prefix + [env["MXBATCH_TEST_CONTAINER_PYTHON"], "-c", FIRST_STATEMENT],
                         env=env, capture_output=True, text=True, check=True, timeout=300).stdout
    return float(out.strip()) - t0


def spec(tmp: Path, mode: str, env: Dict[str, str]) -> Path:
    """The example job in ``mode``: bare processes, or every role in a container."""
    runtime, options = MODES[mode]
    data = yaml.safe_load((EXAMPLES / "mlp-ps.yaml").read_text())
    data["workdir"] = str(EXAMPLES)
    if runtime:
        data["command"] = [env["MXBATCH_TEST_CONTAINER_PYTHON"], "train_mlp.py", "--kvstore",
                           "dist_sync"]
        data["container"] = {"runtime": runtime, "image": env["MXBATCH_TEST_IMAGE"],
                             "mounts": env["MXBATCH_TEST_CONTAINER_MOUNTS"].split(","),
                             "options": options}
    path = tmp / f"{mode.replace(' /', '-root')}.yaml"
    path.write_text(json.dumps(data))
    return path


def overhead(mine: List[Optional[float]], base: List[Optional[float]]) -> str:
    mine_ok = [v for v in mine if v is not None]
    base_ok = [v for v in base if v is not None]
    if not mine_ok or not base_ok:
        return "-"
    return f"{statistics.median(mine_ok) - statistics.median(base_ok):+.2f}s"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=3, help="jobs per mode")
    parser.add_argument("--starts", type=int, default=5, help="single role starts per mode")
    args = parser.parse_args()
    compile_mxbatch()
    tmp = Path(tempfile.mkdtemp(prefix="mxbatch-bench-containers-"))
    env = dict(cluster_env("containers"), MXBATCH_HOME=str(tmp / "home"), OMP_NUM_THREADS="1")
    available = env["MXBATCH_TEST_RUNTIMES"].split()
    modes = [m for m, (rt, _) in MODES.items() if rt is None or rt in available]
    starts: Dict[str, List[Optional[float]]] = {m: [] for m in modes if not MODES[m][1]}
    for _ in range(args.starts):
        for mode in starts:
            starts[mode].append(role_start(env, MODES[mode][0]))
    specs = {mode: spec(tmp, mode, env) for mode in modes}
    jobs: Dict[str, List[dict]] = {mode: [] for mode in modes}
    for _ in range(args.repeat):
        for mode in modes:
            jobs[mode].append(timed_submit(env, "local", specs[mode]))

    print(f"\n{os.cpu_count()} cores, load {os.getloadavg()[0]:.1f} at the end; "
          "median (min-max)\n")
    rows = [("one role: start -> first Python statement", *starts)]
    rows.append((f"  {args.starts} starts each", *(fmt(starts[m]) for m in starts)))
    rows.append(("  overhead over bare", *(overhead(starts[m], starts["bare"]) for m in starts)))
    print_table(rows)
    first = {m: [r["first_step"] for r in jobs[m]] for m in modes}
    wall = {m: [r["wall"] for r in jobs[m]] for m in modes}
    rows = [(f"example job, 2 servers + 2 workers, 1 epoch, {args.repeat} runs each", *modes)]
    rows.append(("exit codes", *(" ".join(str(r["rc"]) for r in jobs[m]) for m in modes)))
    rows.append(("submit -> first step (slower worker)", *(fmt(first[m]) for m in modes)))
    rows.append(("  overhead over bare", *(overhead(first[m], first["bare"]) for m in modes)))
    rows.append(("wall time (submit --wait)", *(fmt(wall[m]) for m in modes)))
    rows.append(("  overhead over bare", *(overhead(wall[m], wall["bare"]) for m in modes)))
    print_table(rows)


if __name__ == "__main__":
    main()
