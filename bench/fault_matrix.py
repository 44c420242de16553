"""The fault matrix as a table: every fault (tests/faultmatrix.py) injected for real on
every backend whose test cluster is up, with the time from the fault to the end of
the job as the job's own records say.

    python bench/fault_matrix.py [--backends local,sge,slurm,yarn] [--write-docs]

``--write-docs`` writes each backend's table into its own section of
docs/fault-matrix.md (the sections of backends not run stay as they are). The same
cells run as tests (tests/test_fault_matrix.py).
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from tests.conftest import Cli, cluster_env_file, cluster_environment  # noqa: E402
from tests.faultmatrix import PROFILES, Fault, run_cell  # noqa: E402

DOC = ROOT / "docs" / "fault-matrix.md"
HEADER = (
    "# Fault matrix\n\nEvery failure mxbatch must handle, injected for real on each "
    "backend's test cluster by `bench/fault_matrix.py` (the same cells run as "
    "`tests/test_fault_matrix.py`): a job of stand-in roles (a scheduler, 1 server, "
    "2 workers) with a 2 s grace period, 6 s heartbeat and stall timeouts, a 4 s "
    "exit timeout. Each cell checks that the job ended, that its reason (for the "
    "workers hanging at exit, which succeed: its note) names the task and the "
    "cause, and that nothing of it was left running or queued; the time is from "
    "the fault (or the cancel) to the last task's end, from the job's records (on "
    "YARN: to the end of the application, as the ResourceManager records it). Each "
    "backend's section is rewritten by `bench/fault_matrix.py --backends NAME "
    "--write-docs`.\n")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--backends", default=",".join(PROFILES),
                        help="comma-separated, from: " + ", ".join(PROFILES))
    parser.add_argument("--write-docs", action="store_true")
    args = parser.parse_args()
    names = args.backends.split(",")
    unknown = [name for name in names if name not in PROFILES]
    if unknown:
        parser.error(f"unknown backend(s) {', '.join(unknown)}: choose from "
                     + ", ".join(PROFILES))
    sys.path.insert(0, str(Path(__file__).resolve().parent))
    from report import machine, markdown_table, update_section

    for name in names:
        profile = PROFILES[name]
        if profile.cluster and not cluster_env_file(profile.cluster).is_file():
            print(f"{name}: cluster not up (ci/clusters/{profile.cluster}-up.sh): skipped")
            continue
        where = machine()
        started = time.monotonic()
        env = cluster_environment(profile.cluster) if profile.cluster else dict(os.environ)
        rows = [["fault", "fault -> job ended", "result", "reason"]]
        with profile.session(env) as env:
            for fault in Fault:
                with tempfile.TemporaryDirectory(prefix="fm-") as tmp:
                    cli = Cli(Path(tmp) / "home", env)
                    cell = run_cell(cli, profile, fault, Path(tmp))
                rows.append(cell.row())
                print(f"{name:6} {' | '.join(rows[-1])}", flush=True)
        took = time.monotonic() - started
        print(f"{name}: {len(rows) - 1} cells in {took:.0f} s", flush=True)
        if args.write_docs:
            text = (f"## {name}\n\nMachine: {where}. All {len(rows) - 1} cells took "
                    f"{took:.0f} s.\n\n{markdown_table(rows)}\n")
            print(f"wrote the {name} section of {update_section(name, text, DOC, HEADER)}")


if __name__ == "__main__":
    main()
