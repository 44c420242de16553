"""Entry point of the runtime zipapp.

    python3 runtime.pyz run RUN_DIR [--task N | --task-from VAR [--task-groups G] |
                                     --role ROLE [--array-base B]]
                                    [--kv-store MODULE:FACTORY]
        supervise one task (a batch array task, a YARN container), or the group of
        tasks that VAR picks of G (an MPI rank: the tasks of its host)
    python3 runtime.pyz agent RUN_DIR [--tasks all|I,J,...] [--slots N] [--cancel-on-signal]
        supervise several tasks in one process (the local backend's job); with every
        task, attempt after attempt (``jobloop``: restarts)
    python3 runtime.pyz remote DIR
        the agent of an ssh host, driven through stdin and stdout (``remote``)

``run --task-from A,B`` reads the index from the first of these variables that is set
(``OMPI_COMM_WORLD_RANK,PMI_RANK``); with ``--task-groups 0,4/1,5/2/3`` it picks a group
of tasks instead (``task.format_groups``: one ``mpirun`` rank per host, each the agent of
the tasks dealt to its host). ``--environ-file
FILE`` gives the roles the environment in FILE (a JSON object, mode 0600, written by
the submitter) on top of this process's own, instead of relying on the launcher to
pass it (mpirun passes only what it is told to). ``--exit-zero``: the outcome is in the
records; a non-zero exit would make mpirun kill every other task's agent before it
could stop its role and record why. ``--launcher-signals``: mpirun's SIGTERM stops the
role but is not the job's abort: the controller that runs mpirun knows the cause.

``run`` supervises attempt ``$MXBATCH_ATTEMPT`` (default 0) of the job, launched for
``$MXBATCH_RESTART_REASON``: the batch system's submission of that attempt sets both.

Exit status: 0 when every task supervised succeeded, 1 when one failed or was
stopped, 2 for a usage or identity error.

``--kv-store MODULE:FACTORY`` keeps the rendezvous in a key-value store
(``kvrendezvous``) instead of files in RUN_DIR: ``MODULE`` is imported with
importlib (it may need more than the standard library, e.g. skein on YARN) and
``FACTORY(plan)`` returns the store.

A relative ``run_dir`` or ``workdir`` in ``plan.json`` is taken relative to
RUN_DIR, so one plan file works wherever a launcher unpacks it (YARN
containers run from their own working directory).
"""

import argparse
import dataclasses
import importlib
import json
import os
import sys
import time
from typing import Dict, List, Optional

from . import wire
from .agent import Agent
from .attempts import read_attempts
from .jobloop import AttemptContext, AttemptLoop, attempt_plan, file_attempt_end
from .kvrendezvous import KeyValueRendezvous
from .layout import RunLayout
from .osbytes import relay_streams
from .planfile import RunPlan, TaskInfo
from .remote import main as remote_main
from .remote import merged_environment
from .rendezvous import FileRendezvous
from .roles import Role
from .states import EndReason
from .task import TaskIdentityError, resolve, resolve_group, tasks_at


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


def _select(plan: RunPlan, spec: str) -> List[TaskInfo]:
    """``all`` or comma-separated task indexes."""
    return list(plan.tasks) if spec == "all" else tasks_at(plan, spec)


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="mxbatch-runtime")
    commands = parser.add_subparsers(dest="command", required=True)
    run = commands.add_parser("run", help="supervise one task (or one group of tasks)")
    run.add_argument("run_dir")
    run.add_argument("--task", type=int, default=None)
    run.add_argument("--role", choices=[r.value for r in Role], default=None)
    run.add_argument("--kv-store", metavar="MODULE:FACTORY", default=None,
                     help="rendezvous in the key-value store FACTORY(plan) makes")
    run.add_argument("--task-from", metavar="VAR", default=None,
                     help="read the task index from this environment variable (with "
                          "--role: the rank in the role, less --array-base)")
    run.add_argument("--task-groups", metavar="G", default=None,
                     help="groups of task indexes (0,4/1,5/2): --task-from's variable picks "
                          "the group this process supervises")
    run.add_argument("--array-base", type=int, default=None,
                     help="first array index of the batch system's array (default: its own)")
    run.add_argument("--environ-file", metavar="FILE", default=None,
                     help="the submitter's environment (JSON), added to this process's")
    run.add_argument("--launcher-signals", action="store_true",
                     help="a SIGTERM comes from the launcher ending the job (mpirun): stop "
                          "the role, and leave the job's abort to the launcher's controller")
    run.add_argument("--exit-zero", action="store_true",
                     help="exit 0 once the task's outcome is recorded, whatever it is (for "
                          "launchers that kill every task when one exits non-zero: mpirun)")
    agent = commands.add_parser("agent", help="supervise several tasks in one process")
    agent.add_argument("run_dir")
    agent.add_argument("--tasks", default="all", help="all, or task indexes I,J,...")
    agent.add_argument("--slots", type=int, default=None,
                       help="run at most this many tasks at once (the rest queue)")
    agent.add_argument("--cancel-on-signal", action="store_true",
                       help="a signal to the agent cancels the job (it stands for the user)")
    remote = commands.add_parser("remote", help="an ssh host's agent, over stdin/stdout")
    remote.add_argument("run_dir")
    return parser


def _environ(path: Optional[str]) -> Optional[Dict[str, str]]:
    """This process's environment with the one in ``path`` on top (None: no file)."""
    if path is None:
        return None
    with open(path) as handle:
        submitted = json.load(handle)
    if not isinstance(submitted, dict):
        raise ValueError("%s: not a JSON object" % path)
    return merged_environment(os.environ, {str(k): str(v) for k, v in submitted.items()})


def _attempt_from_environment(plan: RunPlan) -> AttemptContext:
    """The attempt a batch system's submission says this task belongs to, and when that
    attempt started (``attempts.json``; else now: the start-up deadline counts from it)."""
    index_text = os.environ.get(wire.ATTEMPT, "0")
    index = int(index_text) if index_text.isdigit() else 0
    started = plan.created_at
    if index > 0:
        record = read_attempts(plan.layout.attempts_record)
        known = [a for a in (record.attempts if record else []) if a.index == index]
        started = known[0].started_at if known else time.time()
    return AttemptContext(index, EndReason.parse(os.environ.get(wire.RESTART_REASON)), (),
                          started)


def _run_all(plan: RunPlan, tasks: List[TaskInfo], args: argparse.Namespace,
             environ: Optional[Dict[str, str]]) -> int:
    """Every task of the job in this process, attempt after attempt (the local job
    manager): 0 when the job succeeded."""

    def run_attempt(ctx: AttemptContext):
        rdv = FileRendezvous(plan.run_dir, ctx.index)
        agent = Agent(attempt_plan(plan, ctx.started_at, ctx.index), tasks, rdv,
                      slots=args.slots, environ=environ, signals_cancel=args.cancel_on_signal,
                      attempt=ctx.index, restart_reason=ctx.reason_name, reap_job=True,
                      pending_signal=loop.pending_signal)
        code = agent.run()
        rdv.close(code)
        if agent.storage_error is not None:
            raise agent.storage_error  # the loop ends the job: nothing more can be kept
        return file_attempt_end(plan, rdv)

    loop = AttemptLoop(plan, run_attempt)
    outcome = loop.run().outcome
    return 0 if outcome is EndReason.SUCCEEDED else 1


def main(argv: Optional[List[str]] = None) -> int:
    relay_streams()  # the supervisor's own output may quote commands and values
    args = _parser().parse_args(argv)
    run_dir = os.path.abspath(args.run_dir)
    if args.command == "remote":
        return remote_main(run_dir)
    try:
        plan = _load_plan(run_dir)
    except (OSError, ValueError, TypeError, KeyError) as exc:
        sys.stderr.write("mxbatch runtime: cannot read %s: %s\n" % (RunLayout(run_dir).plan, exc))
        return 2
    rendezvous = FileRendezvous(run_dir)  # type: Rendezvous
    try:
        if args.command == "agent":
            tasks = _select(plan, args.tasks)
        elif args.task_groups is not None:
            if not args.task_from:
                raise ValueError("--task-groups needs --task-from")
            tasks = resolve_group(plan, os.environ, args.task_groups, args.task_from)
        else:
            tasks = [resolve(plan, os.environ, index=args.task, role=args.role,
                             index_variable=args.task_from, array_base=args.array_base)]
    except (TaskIdentityError, ValueError) as exc:
        sys.stderr.write("mxbatch runtime: %s\n" % exc)
        return 2
    try:
        environ = _environ(getattr(args, "environ_file", None))
    except (OSError, ValueError) as exc:
        sys.stderr.write("mxbatch runtime: --environ-file: %s\n" % exc)
        return 2
    if args.command == "run" and args.kv_store:
        try:
            rendezvous = _kv_rendezvous(args.kv_store, plan)
        except Exception as exc:  # any import or connection failure
            sys.stderr.write("mxbatch runtime: --kv-store %s: %s: %s\n"
                             % (args.kv_store, type(exc).__name__, exc))
            return 2
    if args.command == "agent" and len(tasks) == len(plan.tasks):
        return _run_all(plan, tasks, args, environ)
    ctx = _attempt_from_environment(plan) if args.command == "run" else AttemptContext(
        0, None, (), plan.created_at)
    if ctx.index and isinstance(rendezvous, FileRendezvous):
        rendezvous = FileRendezvous(run_dir, ctx.index)
    agent = Agent(attempt_plan(plan, ctx.started_at, ctx.index), tasks, rendezvous,
                  slots=getattr(args, "slots", None),
                  environ=environ, signals_cancel=getattr(args, "cancel_on_signal", False),
                  signals_from_launcher=getattr(args, "launcher_signals", False),
                  attempt=ctx.index, restart_reason=ctx.reason_name,
                  reruns=args.command == "run")
    code = agent.run()
    rendezvous.close(code)
    return 0 if getattr(args, "exit_zero", False) else code


if __name__ == "__main__":
    sys.exit(main())
