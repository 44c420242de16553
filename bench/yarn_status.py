"""Wall time of `mxbatch status`, `logs` and `cancel` of a running YARN job, each a fresh
process as a user runs them: without a skein driver running (cold) and with one
(`skein driver start`), for this checkout and optionally for another one (``--before
DIR``: a directory holding an older ``mxbatch`` package, e.g. from ``git archive``).

The jobs (the example, 1 GB containers, long enough to stay running) are submitted
through a global skein driver of the bench's own (a private SKEIN_CONFIG with the
cluster's credentials), so nothing shared with other users of the cluster is started
or stopped. Needs the cluster up (ci/clusters/yarn-up.sh) and its env file.

    .venv/bin/python bench/yarn_status.py [--repeat 5] [--before /tmp/mxbatch-before]
"""

from __future__ import annotations

import argparse
import os
import resource
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Dict, List, Optional

from common import EXAMPLES, cluster_env, compile_mxbatch, fmt, print_table

SKEIN = [sys.executable, "-m", "skein.cli"]
#: CPU seconds of each mxbatch process run, in order
CPU: List[float] = []


def spec(tmp: Path) -> Path:
    text = (EXAMPLES / "mlp-ps.yaml").read_text()
    text = text.replace("workdir: .", f"workdir: {EXAMPLES}").replace("memory: 4G", "memory: 1G")
    text = text.replace("  ports: 9000-9999\n", "  ports: 9000-9999\n  interface: lo\n")
    path = tmp / "yarn-status-bench.yaml"
    path.write_text(text)
    return path


def cpu_of_children() -> float:
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def mxbatch(env: Dict[str, str], code: Optional[str], *args: str) -> tuple:
    """(wall seconds, completed process) of one ``python -m mxbatch ARGS``; ``code``: a
    directory put first on PYTHONPATH (the older mxbatch). Its CPU seconds (with
    its children's: a Java driver) go to ``CPU[-1]``."""
    run_env = dict(env, PYTHONPATH=code) if code else env
    started, cpu = time.monotonic(), cpu_of_children()
    result = subprocess.run([sys.executable, "-m", "mxbatch", *args], capture_output=True,
                            text=True, env=run_env, timeout=300, cwd=code or "/")
    took = time.monotonic() - started
    CPU.append(cpu_of_children() - cpu)
    if result.returncode != 0:
        sys.stderr.write(f"mxbatch {' '.join(args)}: {result.stderr[-2000:]}\n")
    return took, result


def running_job(env: Dict[str, str], spec_path: Path) -> str:
    """A submitted job whose worker 0 has made its first step."""
    _, result = mxbatch(dict(env, STEP_SLEEP="0.05", EPOCHS="1000"), None, "submit",
                           "--backend", "yarn", str(spec_path))
    job = result.stdout.split()[-1]
    deadline = time.monotonic() + 180
    while time.monotonic() < deadline:
        _, logs = mxbatch(env, None, "logs", job, "--role", "worker", "--rank", "0")
        if "first step" in logs.stdout:
            return job
        time.sleep(1)
    raise SystemExit(f"{job} made no first step in 180 s")


def measure(env: Dict[str, str], code: Optional[str], job: str, repeat: int) -> Dict[str, list]:
    times: Dict[str, List[float]] = {"status": [], "status cpu": [], "logs": []}
    for _ in range(repeat):
        took, result = mxbatch(env, code, "status", job)
        assert "state RUNNING" in result.stdout, result.stdout + result.stderr
        times["status"].append(took)
        times["status cpu"].append(CPU[-1])
        took, _ = mxbatch(env, code, "logs", job, "--role", "worker", "--rank", "0")
        times["logs"].append(took)
    return times


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument("--before", help="a directory with an older mxbatch package")
    args = parser.parse_args()
    compile_mxbatch()
    tmp = Path(tempfile.mkdtemp(prefix="mxbatch-bench-"))
    base = dict(cluster_env("yarn"), MXBATCH_HOME=str(tmp / "home"))
    creds = tmp / "skein-creds"  # the cluster's credentials, no driver: cold commands
    creds.mkdir()
    for name in ("skein.crt", "skein.pem"):
        shutil.copy(Path(base["SKEIN_CONFIG"]) / name, creds / name)
    warm_dir = tmp / "skein-driver"
    shutil.copytree(creds, warm_dir)
    cold, warm = dict(base, SKEIN_CONFIG=str(creds)), dict(base, SKEIN_CONFIG=str(warm_dir))
    subprocess.run(SKEIN + ["driver", "start"], env=warm, check=True, capture_output=True,
                   timeout=120)
    codes = [("this checkout", None)] + ([("before", args.before)] if args.before else [])
    rows = [("code", "driver", "status", "status CPU", "logs (one task)", "cancel")]
    try:
        spec_path = spec(tmp)
        for label, code in codes:
            job = running_job(warm, spec_path)
            for driver, env in (("none (cold)", cold), ("running", warm)):
                times = measure(env, code, job, args.repeat)
                cancel = ""
                if driver == "running":
                    took, result = mxbatch(cold, code, "cancel", job)
                    cancel = f"{took:.2f}s cold" + ("" if result.returncode == 0 else " (failed)")
                rows.append((label, driver, fmt(times["status"]), fmt(times["status cpu"]),
                             fmt(times["logs"]), cancel))
    finally:
        subprocess.run(SKEIN + ["driver", "stop"], env=warm, capture_output=True, timeout=60)
    print_table(rows)
    print(f"\nmedian (min-max) of {args.repeat} fresh processes each (wall; CPU: user+sys "
          "of the process and its children); cancel: one, no driver running (it waits "
          f"until YARN reports the application ended); load average {os.getloadavg()[0]:.1f} "
          f"on {os.cpu_count()} CPUs")


if __name__ == "__main__":
    main()
