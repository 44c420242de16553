"""Ctrl-C on an attached job, many times in a row on a loaded machine (issue 9).

Runs the Ctrl-C tests of ``tests/test_local.py`` (``submit --wait`` and ``launch``:
SIGINT at once after the job id, once the scheduler runs, once the worker runs; and
``launch`` interrupted at several moments of its start-up) ``--rounds`` times while
``--burners`` processes spin on the CPUs, and prints how many rounds passed and which
cases failed. The burners are this script's own children, each in its own process
group, and are killed by that group alone.

    python bench/ctrl_c_stress.py --rounds 50 --burners 2
"""

from __future__ import annotations

import argparse
import collections
import os
import re
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import List

ROOT = Path(__file__).resolve().parent.parent
TESTS = ["tests/test_local.py", "-k", "ctrl_c"]
BURN = "while 1: pass"


def start_burners(count: int) -> List[subprocess.Popen]:
    return [subprocess.Popen([sys.executable, "-c", BURN], start_new_session=True)
            for _ in range(count)]


def stop_burners(burners: List[subprocess.Popen]) -> None:
    for proc in burners:
        try:
            os.killpg(proc.pid, signal.SIGKILL)  # its own group: nothing else
        except ProcessLookupError:
            pass
        proc.wait()


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=50)
    parser.add_argument("--burners", type=int, default=2,
                        help="CPU-burning processes while the rounds run")
    parser.add_argument("--timeout", type=float, default=600,
                        help="seconds one round may take at most")
    args = parser.parse_args()
    # pytest and the CLIs it starts get Ctrl-C as a terminal's foreground command would,
    # even when this script runs as a background job (SIGINT ignored); SIGTERM ends this
    # script through its cleanup (the burners)
    signal.signal(signal.SIGINT, signal.default_int_handler)
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    failures: collections.Counter = collections.Counter()
    passed_rounds = 0
    burners = start_burners(args.burners)
    started = time.monotonic()
    try:
        with tempfile.TemporaryDirectory(prefix="ctrl-c-stress-") as scratch:
            for round_ in range(1, args.rounds + 1):
                argv = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider",
                        "--basetemp", os.path.join(scratch, str(round_)), *TESTS]
                try:
                    result = subprocess.run(argv, cwd=ROOT, capture_output=True, text=True,
                                            timeout=args.timeout)
                    output, ok = result.stdout + result.stderr, result.returncode == 0
                except subprocess.TimeoutExpired as exc:
                    output, ok = f"round timed out after {exc.timeout}s", False
                failed = re.findall(r"^FAILED \S+?(\[[^\]]+\])", output, re.M)
                failures.update(failed or ([] if ok else ["(round)"]))
                passed_rounds += ok
                print(f"round {round_}: {'passed' if ok else 'FAILED ' + ' '.join(failed)}"
                      f" ({time.monotonic() - started:.0f}s)", flush=True)
                if not ok:
                    print(output[-4000:], flush=True)
    finally:
        stop_burners(burners)
    print(f"{passed_rounds}/{args.rounds} rounds passed with {args.burners} burners "
          f"({time.monotonic() - started:.0f}s)")
    for case, count in failures.most_common():
        print(f"  {case}: failed {count} times")
    return 0 if passed_rounds == args.rounds else 1


if __name__ == "__main__":
    sys.exit(main())
