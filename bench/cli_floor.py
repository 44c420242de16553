"""The launcher's own CPU up to its first role: mxbatch, launch.py, and the floor of the
stack mxbatch is built on, side by side in one run.

Each row is a fresh process whose CPU time (user + system, from ``wait4``) is counted
until it ends; the launchers are made to end where they would start their first role
(a probe replaces ``subprocess.Popen``'s start with ``os._exit``), so nothing runs but
the launcher. Rows, interleaved run by run (the same machine state for all):

  - the interpreter: ``python -c pass`` (with ``site``: this venv's, as the CLI's);
  - + click: the command-line framework the product is written in;
  - + the standard library the launch path needs (dataclasses with inspect, json,
    socket, subprocess, selectors, pathlib, enum, typing);
  - + N frozen dataclasses of six fields, N the count mxbatch creates before its first
    role (counted in its own rows): what Python 3.11 spends on the classes alone;
  - mxbatch: ``mxbatch launch -n 1 -s 1 python3 -c pass`` to its first role;
  - launch.py: MXNet's ``tools/launch.py --launcher local``, the same job, to its first
    role.

The first four rows are a floor: what any launcher written with click and dataclasses
on this Python pays before its own code runs. The mxbatch row runs this checkout's
mxbatch (first on PYTHONPATH); ``--baseline DIR`` adds another checkout's.

    .venv/bin/python bench/cli_floor.py [--repeat 30] [--baseline DIR]
"""

from __future__ import annotations

import argparse
import dataclasses
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Dict, List, Optional, Tuple

from common import LAUNCH_PY_SHIM, ROOT, compile_mxbatch, print_table

#: ends the process (exit 0) when it would start its first subprocess, after writing
#: how many dataclasses it had created to the file named by CLASSES_OUT (one thread
#: does: launch.py starts its roles from several)
FIRST_POPEN_PROBE = (
    "import dataclasses, os, subprocess, sys, threading\n"
    "_made = [0]\n"
    "_first_only = threading.Lock()\n"
    "_process = dataclasses._process_class\n"
    "def _count(cls, *args, **kwargs):\n"
    "    _made[0] += 1\n"
    "    return _process(cls, *args, **kwargs)\n"
    "dataclasses._process_class = _count\n"
    "def _first(self, *args, **kwargs):\n"
    "    _first_only.acquire()\n"
    "    with open(os.environ['CLASSES_OUT'], 'w') as out:\n"
    "        out.write(str(_made[0]))\n"
    "    os._exit(0)\n"
    "subprocess.Popen.__init__ = _first\n"
)

#: the standard library the launch path imports (beside what click imports)
STDLIB = "import dataclasses, json, socket, subprocess, selectors, pathlib, enum, typing"

#: a frozen dataclass of six fields, as the spec's and the plan's are
CLASSES = (
    "from typing import Optional, Tuple\n"
    "for index in range({count}):\n"
    "    namespace = {{'__module__': __name__, '__annotations__': {{\n"
    "        'name': 'str', 'count': 'int', 'limit': 'Optional[int]', 'share': 'float',\n"
    "        'words': 'Tuple[str, ...]', 'on': 'bool'}},\n"
    "        'name': '', 'count': 0, 'limit': None, 'share': 0.0, 'words': (), 'on': False}}\n"
    "    dataclasses.dataclass(frozen=True)(type('Class%d' % index, (), namespace))\n"
)

EXIT = "\nimport os; os._exit(0)\n"


def cpu_ms(argv: List[str], env: Dict[str, str]) -> Tuple[float, int]:
    """Run ``argv`` to its end, its output discarded; its CPU milliseconds (user +
    system) and exit status."""
    pid = os.fork()
    if pid == 0:  # pragma: no cover (the child)
        try:
            quiet = os.open(os.devnull, os.O_WRONLY)
            os.dup2(quiet, 1)
            os.dup2(quiet, 2)
            os.execve(argv[0], argv, env)
        finally:
            os._exit(127)
    _, status, usage = os.wait4(pid, 0)
    return (usage.ru_utime + usage.ru_stime) * 1000, os.waitstatus_to_exitcode(status)


@dataclasses.dataclass(frozen=True)
class Row:
    """One process to measure: its argv, whether it is a probed launcher (its classes
    counted), and the mxbatch checkout first on its PYTHONPATH (None: none)."""

    argv: List[str]
    probed: bool = False
    mxbatch: Optional[str] = None


def classes_made(path: str) -> int:
    """The count a probed launcher wrote to ``path``."""
    return int(Path(path).read_text())


def rows_to_run(classes: int, baseline: Optional[str]) -> Dict[str, Row]:
    """The rows, by name, in the order they run and print."""
    py = sys.executable
    launch = ["launch", "-q", "-n", "1", "-s", "1", "--", "python3", "-c", "pass"]
    mxbatch = [py, "-c", FIRST_POPEN_PROBE + "sys.argv = ['mxbatch'] + sys.argv[1:]\n"
               "from mxbatch.cli.entry import run\nrun()\n", *launch]
    rows = {
        "the interpreter": Row([py, "-c", "pass" + EXIT]),
        "+ click": Row([py, "-c", "import click" + EXIT]),
        "+ the launch path's standard library": Row([py, "-c", "import click\n" + STDLIB + EXIT]),
        f"+ {classes} frozen dataclasses": Row(
            [py, "-c", "import click\n" + STDLIB + "\n" + CLASSES.format(count=classes) + EXIT]),
        "mxbatch launch, to its first role": Row(mxbatch, probed=True, mxbatch=str(ROOT)),
        "launch.py, to its first role": Row(
            [py, "-c", FIRST_POPEN_PROBE + LAUNCH_PY_SHIM, "-n", "1", "-s", "1",
             "--launcher", "local", "python3 -c pass"], probed=True),
    }
    if baseline:
        rows["mxbatch (baseline), to its first role"] = Row(mxbatch, probed=True,
                                                             mxbatch=baseline)
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=30, help="runs of each row")
    parser.add_argument("--baseline", metavar="DIR", default=None,
                        help="another checkout's mxbatch, as one more row")
    args = parser.parse_args()
    baseline = os.path.abspath(args.baseline) if args.baseline else None
    compile_mxbatch()
    home = tempfile.mkdtemp(prefix="mxbatch-bench-")
    classes_out = os.path.join(home, "classes")
    env = dict(os.environ, MXBATCH_HOME=home, CLASSES_OUT=classes_out,
               PATH=os.path.dirname(sys.executable) + os.pathsep + os.environ["PATH"])
    # mxbatch's dataclasses before its first role, for the floor's class row
    _, status = cpu_ms(rows_to_run(0, baseline)["mxbatch launch, to its first role"].argv,
                       dict(env, PYTHONPATH=str(ROOT)))
    if status != 0:
        sys.exit(f"mxbatch launch: exit status {status}")
    rows = rows_to_run(classes_made(classes_out), baseline)
    print(f"{time.strftime('%Y-%m-%d %H:%M')}; machine: {os.cpu_count()} cores; Python "
          f"{sys.version.split()[0]}; load average at the start "
          f"{' '.join('%.1f' % x for x in os.getloadavg())}", flush=True)
    times: Dict[str, List[float]] = {name: [] for name in rows}
    made: Dict[str, int] = {}
    for _ in range(args.repeat):
        for name, row in rows.items():
            row_env = dict(env, PYTHONPATH=row.mxbatch) if row.mxbatch else env
            if row.probed and os.path.exists(classes_out):
                os.unlink(classes_out)
            spent, status = cpu_ms(row.argv, row_env)
            if status != 0:
                sys.exit(f"{name}: exit status {status}")
            times[name].append(spent)
            if row.probed:
                made[name] = classes_made(classes_out)
    table = [("CPU ms (user + system)", "median", "lowest tenth", "dataclasses made")]
    for name, values in times.items():
        values.sort()
        table.append((name, f"{statistics.median(values):.1f}",
                      f"{values[len(values) // 10]:.1f}",
                      str(made.get(name, ""))))
    print_table(table)
    print(f"\n{args.repeat} runs each, interleaved; load average at the end "
          f"{' '.join('%.1f' % x for x in os.getloadavg())}")


if __name__ == "__main__":
    main()
