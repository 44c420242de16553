"""Entry point of the runtime zipapp.

    python3 runtime.pyz run RUN_DIR [--task N | --task-from VAR | --role ROLE
                                     [--array-base B]]        supervise one task
    python3 runtime.pyz manage RUN_DIR [--slots N]             local backend's job manager

Exit status: 0 when the task (or, for ``manage``, the manager) succeeded,
1 when it failed or was stopped, 2 for a usage or identity error.

``run ... --kv-store MODULE:FACTORY`` keeps the rendezvous in a key-value store
(``kvrendezvous``) instead of files in RUN_DIR: ``MODULE`` is imported with
importlib (it may need more than the standard library, e.g. skein on YARN) and
``FACTORY(plan)`` returns the store; its ``close`` runs when the task has ended.

A relative ``run_dir`` or ``workdir`` in ``plan.json`` is taken relative to
RUN_DIR, so one plan file works wherever a launcher unpacks it (YARN
containers run from their own working directory).
"""

import argparse
import dataclasses
import importlib
import os
import sys
from typing import List, Optional

from .kvrendezvous import KeyValueRendezvous
from .layout import RunLayout
from .manager import LocalManager
from .planfile import RunPlan
from .rendezvous import FileRendezvous, Rendezvous
from .roles import Role
from .supervisor import Supervisor
from .task import TaskIdentityError, resolve


def _load_plan(run_dir: str) -> RunPlan:
    with open(RunLayout(run_dir).plan) as handle:
        plan = RunPlan.from_json(handle.read())
    return dataclasses.replace(
        plan, run_dir=os.path.normpath(os.path.join(run_dir, plan.run_dir)),
        workdir=os.path.normpath(os.path.join(run_dir, plan.workdir)))


def _kv_rendezvous(target: str, plan: RunPlan) -> KeyValueRendezvous:
    """The rendezvous on the store made by ``MODULE:FACTORY`` (ValueError if unusable)."""
    module_name, _, factory_name = target.partition(":")
    if not module_name or not factory_name:
        raise ValueError("--kv-store wants MODULE:FACTORY, got %r" % target)
    factory = getattr(importlib.import_module(module_name), factory_name)
    return KeyValueRendezvous(factory(plan))


def main(argv: Optional[List[str]] = None) -> int:
    parser = argparse.ArgumentParser(prog="mxbatch-runtime")
    commands = parser.add_subparsers(dest="command", required=True)
    run = commands.add_parser("run", help="supervise one task")
    run.add_argument("run_dir")
    run.add_argument("--task", type=int, default=None)
    run.add_argument("--role", choices=[r.value for r in Role], default=None)
    run.add_argument("--kv-store", metavar="MODULE:FACTORY", default=None,
                     help="rendezvous in the key-value store FACTORY(plan) makes")
    run.add_argument("--task-from", metavar="VAR", default=None,
                     help="read the task index from this environment variable")
    run.add_argument("--array-base", type=int, default=None,
                     help="first array index of the batch system's array (default: its own)")
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
    rendezvous: Rendezvous = FileRendezvous(run_dir)
    if args.command == "manage":
        return LocalManager(plan, rendezvous, args.slots).run()
    try:
        task = resolve(plan, os.environ, index=args.task, role=args.role,
                       index_variable=args.task_from, array_base=args.array_base)
    except TaskIdentityError as exc:
        sys.stderr.write("mxbatch runtime: %s\n" % exc)
        return 2
    if args.kv_store:
        try:
            rendezvous = _kv_rendezvous(args.kv_store, plan)
        except Exception as exc:  # any import or connection failure
            sys.stderr.write("mxbatch runtime: --kv-store %s: %s: %s\n"
                             % (args.kv_store, type(exc).__name__, exc))
            return 2
    code = Supervisor(plan, task, rendezvous).run()
    rendezvous.close(code)
    return code


if __name__ == "__main__":
    sys.exit(main())
