"""Start-up latency of mxbatch on the YARN test cluster: with a skein driver already
running (``skein driver start``) and from cold (the CLI starts its own driver).

It runs the example job (2 servers, 2 workers, 1 epoch, 1 GB containers, ps-lite on
loopback) with ``submit --wait --backend yarn`` and reports:
  - submit -> all tasks running: latest supervisor start (task records) - submit time
  - submit -> first training step: the slower worker's first step (LAUNCH_T0 = submit)
  - total wall time of ``mxbatch submit --wait``
and, as the floor, ``skein.Client()`` start-up alone and one trivial skein application
(``true``) from submit to finished through a running driver.

Needs the cluster up (ci/clusters/yarn-up.sh) and its env file; stops the global
driver again if it started it.

    .venv/bin/python bench/yarn_startup.py [--repeat 3]
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Dict

from common import EXAMPLES, cluster_env, compile_mxbatch, fmt, print_table, timed_submit

SKEIN = [sys.executable, "-m", "skein.cli"]


def spec(tmp: Path) -> Path:
    text = (EXAMPLES / "mlp-ps.yaml").read_text()
    text = text.replace("workdir: .", f"workdir: {EXAMPLES}").replace("memory: 4G", "memory: 1G")
    text = text.replace("--epochs 5", "--epochs 1")
    text = text.replace("  ports: 9000-9999\n", "  ports: 9000-9999\n  interface: lo\n")
    path = tmp / "yarn-bench.yaml"
    path.write_text(text)
    return path


def run_mxbatch(env: Dict[str, str], spec_path: Path) -> dict:
    result = timed_submit(env, "yarn", spec_path)
    result["cold"] = "starting a skein driver" in result["stderr"]
    return result


def driver_start(env: Dict[str, str]) -> float:
    code = ("import time, skein; t = time.time(); c = skein.Client(log=False); "
            "print(time.time() - t); c.close()")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         env=env, check=True, timeout=120).stdout
    return float(out.split()[-1])


def trivial_app(env: Dict[str, str]) -> float:
    code = ("import time, skein\n"
            "c = skein.Client.from_global_driver()\n"
            "spec = skein.ApplicationSpec(name='floor', services={'s': skein.Service("
            "resources=skein.Resources(memory=128, vcores=1), script='true')})\n"
            "t = time.time(); app = c.submit(spec)\n"
            "while c.application_report(app).state not in ('FINISHED', 'FAILED', 'KILLED'):\n"
            "    time.sleep(0.1)\n"
            "print(time.time() - t)\n")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         env=env, check=True, timeout=300).stdout
    return float(out.split()[-1])


def global_driver(env: Dict[str, str], running: bool) -> None:
    subprocess.run(SKEIN + ["driver", "start" if running else "stop"], env=env,
                   capture_output=True, check=True, timeout=120)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args()
    compile_mxbatch()
    home = tempfile.mkdtemp(prefix="mxbatch-bench-")
    env = dict(cluster_env("yarn"), MXBATCH_HOME=home)
    spec_path = spec(Path(home))
    was_running = subprocess.run(SKEIN + ["driver", "address"], env=env,
                                 capture_output=True).returncode == 0
    rows = [("", "submit->all running", "submit->first step", "wall", "exit codes")]
    try:
        global_driver(env, False)
        cold = [run_mxbatch(env, spec_path) for _ in range(args.repeat)]
        assert all(r["cold"] for r in cold)
        global_driver(env, True)
        warm = [run_mxbatch(env, spec_path) for _ in range(args.repeat)]
        assert not any(r["cold"] for r in warm)
        for label, runs in (("driver already running", warm), ("cold (CLI starts a driver)",
                                                                cold)):
            rows.append((label, fmt([r["all_running"] for r in runs]),
                         fmt([r["first_step"] for r in runs]), fmt([r["wall"] for r in runs]),
                         " ".join(str(r["rc"]) for r in runs)))
        rows.append(("floor: skein application `true`, submit->finished", "", "",
                     fmt([trivial_app(env) for _ in range(args.repeat)]), ""))
        global_driver(env, False)
        rows.append(("floor: skein.Client() driver start", "", "",
                     fmt([driver_start(env) for _ in range(args.repeat)]), ""))
    finally:
        global_driver(env, was_running)
    print_table(rows)


if __name__ == "__main__":
    main()
