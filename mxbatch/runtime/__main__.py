"""Entry point of the runtime zipapp.

    python3 runtime.pyz run RUN_DIR [--task N | --role ROLE]   supervise one task
    python3 runtime.pyz manage RUN_DIR [--slots N]             local backend's job manager

Exit status: 0 when the task (or, for ``manage``, the manager) succeeded,
1 when it failed or was stopped, 2 for a usage or identity error.
"""

import argparse
import os
import sys
from typing import List, Optional

from .manager import LocalManager
from .planfile import RunPlan
from .rendezvous import FileRendezvous
from .supervisor import Supervisor
from .task import TaskIdentityError, resolve


def _load_plan(run_dir: str) -> RunPlan:
    with open(os.path.join(run_dir, "plan.json")) as handle:
        return RunPlan.from_json(handle.read())


def main(argv: Optional[List[str]] = None) -> int:
    parser = argparse.ArgumentParser(prog="mxbatch-runtime")
    commands = parser.add_subparsers(dest="command", required=True)
    run = commands.add_parser("run", help="supervise one task")
    run.add_argument("run_dir")
    run.add_argument("--task", type=int, default=None)
    run.add_argument("--role", choices=("scheduler", "server", "worker"), default=None)
    manage = commands.add_parser("manage", help="run a local job's tasks")
    manage.add_argument("run_dir")
    manage.add_argument("--slots", type=int, default=None)
    args = parser.parse_args(argv)

    run_dir = os.path.abspath(args.run_dir)
    try:
        plan = _load_plan(run_dir)
    except (OSError, ValueError, TypeError) as exc:
        sys.stderr.write("mxbatch runtime: cannot read %s/plan.json: %s\n" % (run_dir, exc))
        return 2
    rendezvous = FileRendezvous(run_dir)
    if args.command == "manage":
        runtime_path = os.path.join(run_dir, "runtime.pyz")
        return LocalManager(plan, rendezvous, runtime_path, args.slots).run()
    try:
        task = resolve(plan, os.environ, index=args.task, role=args.role)
    except TaskIdentityError as exc:
        sys.stderr.write("mxbatch runtime: %s\n" % exc)
        return 2
    return Supervisor(plan, task, rendezvous).run()


if __name__ == "__main__":
    sys.exit(main())
