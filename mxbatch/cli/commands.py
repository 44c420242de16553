"""The ``mxbatch`` command line. Formats output and errors; the work is elsewhere."""

from __future__ import annotations

import contextlib
import errno
import signal
import sys
import time
from pathlib import Path
from typing import Optional

import click

from .. import __version__
from ..backends import records
from ..backends.status import JobState, JobStatus
from ..errors import ExitCode, JobNotFound, MxbatchError
from ..jobs import submit as jobs
from ..jobs.follow import LogTail, follow, supervise
from ..jobs.interrupts import HeldSignals, check_interrupted
from ..runtime.roles import Role
from ..spec import config as siteconfig
from ..spec import parse as specs
from ..spec.schema import DEFAULT_BACKEND
from . import jsonout
from . import launch as launchcli
from .completion import backend_names, job_ids, profile_names
from .internal import internal_error

_BACKEND = click.option("--backend", "-b", default=None, shell_complete=backend_names,
                        help="Where to run: local, sge, slurm, yarn, or a plugin's name "
                             f"(default: the spec's or profile's backend, else {DEFAULT_BACKEND}).")
_JSON = click.option("--json", "as_json", is_flag=True,
                     help="Print one JSON document on stdout (schema: docs/reference/json.md).")
_PROFILE = click.option("--profile", "-p", default=None, metavar="NAME",
                        shell_complete=profile_names,
                        help="Site profile of the config file (default: its default_profile).")
_WORKERS = click.option("-n", "--workers", type=int, default=None,
                        help="Number of workers (overrides the spec).")
_SERVERS = click.option("-s", "--servers", type=int, default=None,
                        help="Number of servers (overrides the spec).")


def _err(message: str) -> None:
    click.echo(message, err=True)


class _Main(click.Group):
    """The ``mxbatch`` group: the one place that turns every exception into an exit code.

    MxbatchError and click's own exceptions keep their messages and codes; Ctrl-C that
    no command handled exits 130 (``ExitCode.INTERRUPTED``, not click's "Aborted!" and
    1); anything else is a bug of mxbatch: a one-paragraph message, the traceback in a
    log file (:mod:`mxbatch.internal`) and ``ExitCode.INTERNAL``.
    """

    def invoke(self, ctx: click.Context):
        try:
            return super().invoke(ctx)
        except (click.ClickException, click.exceptions.Exit, click.Abort):
            raise
        except KeyboardInterrupt:
            raise MxbatchError("interrupted", ExitCode.INTERRUPTED) from None
        except Exception as exc:
            if isinstance(exc, OSError) and exc.errno == errno.EPIPE:
                raise  # stdout closed early (``| head``): click ends quietly
            raise internal_error(exc) from None

    def make_context(self, *args, **kwargs) -> click.Context:
        try:  # parsing the command line: click would say "Aborted!" and exit 1
            return super().make_context(*args, **kwargs)
        except KeyboardInterrupt:
            raise MxbatchError("interrupted", ExitCode.INTERRUPTED) from None

    def main(self, *args, **kwargs):
        try:
            return super().main(*args, **kwargs)
        except Exception as exc:  # outside invoke: parsing the command line, completion
            error = internal_error(exc)
            error.show()
            sys.exit(error.exit_code)


@click.group(cls=_Main, context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(__version__, prog_name="mxbatch")
def main() -> None:
    """Run MXNet parameter-server training jobs (scheduler, servers, workers)."""


# ------------------------------------------------------------------------ submitting


@main.command()
@click.argument("spec_file", type=click.Path(dir_okay=False, path_type=Path))
@_BACKEND
@_WORKERS
@_SERVERS
@_PROFILE
@click.option("--wait/--detach", "-w", default=False,
              help="Follow the job, stream its logs and exit with its outcome.")
@click.option("--quiet", "-q", is_flag=True,
              help="With --wait: do not stream logs nor show the status line.")
@click.option("--max-restarts", type=int, default=None, metavar="N",
              help="Relaunch the job up to N times (overrides restarts.max).")
@_JSON
def submit(spec_file: Path, backend: Optional[str], workers: Optional[int],
           servers: Optional[int], profile: Optional[str], wait: bool, quiet: bool,
           max_restarts: Optional[int], as_json: bool) -> None:
    """Submit the job described by SPEC_FILE; print its id."""
    spec = siteconfig.load_job(spec_file, profile=profile)
    _submit_and_maybe_follow(spec, siteconfig.backend_name(spec, backend), workers, servers,
                             wait, quiet, as_json, max_restarts=max_restarts)


@main.command(context_settings=launchcli.CONTEXT)
@launchcli.options
def launch(**flags) -> None:
    """Run COMMAND for every role: MXNet's launch.py command line (no spec file).

    Options end where COMMAND begins. Blocks until the job ends and exits with its
    outcome:

    mxbatch launch -n 2 -H hosts --launcher ssh python3 train.py --kvstore dist_sync
    """
    spec, backend, args = launchcli.launch_job(flags)
    _submit_and_maybe_follow(spec, backend, None, None, not args.detach, args.quiet,
                             args.as_json)


def _submit_and_maybe_follow(spec: specs.JobSpec, backend_name: str, workers: Optional[int],
                             servers: Optional[int], wait: bool, quiet: bool,
                             as_json: bool = False,
                             max_restarts: Optional[int] = None) -> None:
    backend, request = jobs.prepare(spec, backend_name, workers=workers, servers=servers,
                                    max_restarts=max_restarts)
    attached = backend.attach(request) if wait else None
    check_interrupted()  # a Ctrl-C Python dropped while preparing: submit nothing
    # from here until the job is supervised (or followed), Ctrl-C is held back so that
    # it cancels the job whenever it comes (mxbatch.interrupts)
    with HeldSignals() if wait else contextlib.nullcontext() as held:
        record = jobs.submit(backend, attached or request)
        if as_json and not wait:
            click.echo(jsonout.dumps(jsonout.document(_record_data(record))))
        elif not as_json:
            click.echo(record.job_id)
        _err(f"mxbatch: submitted {record.job_id} to {record.backend}; "
             f"run directory {record.run_dir}")
        if attached is not None:
            _supervise_and_exit(backend, record, held, stream_logs=not quiet and not as_json,
                                quiet=quiet, as_json=as_json)
        elif wait:
            _follow_and_exit(backend, record, stream_logs=not quiet and not as_json,
                             timeout=None, cancel_on_interrupt=True, quiet=quiet,
                             as_json=as_json, held=held)


def _record_data(record: records.JobRecord) -> dict:
    return {"job_id": record.job_id, "backend": record.backend, "run_dir": record.run_dir,
            "submitted_at": record.submitted_at}


def _print_final(record: records.JobRecord, status: JobStatus) -> None:
    """``--json`` of an attached command: the final status."""
    click.echo(jsonout.dumps(jsonout.document(dict(_record_data(record), **status.to_dict()))))


def _supervise_and_exit(backend, record: records.JobRecord, held: HeldSignals, *,
                        stream_logs: bool, quiet: bool = False, as_json: bool = False) -> None:
    """This process supervises the job (the local backend attached): Ctrl-C cancels it.
    ``held`` holds signals back until the supervisor has installed its handlers."""
    from .progress import Progress, choose_mode

    started = time.time()
    progress = Progress(choose_mode(sys.stderr, quiet), sys.stderr, record.submitted_at)
    try:
        status, interrupted = supervise(backend, record, stream_logs=stream_logs,
                                        echo=progress.wrap(click.echo),
                                        on_status=progress.on_status, held=held,
                                        note=progress.wrap(_err))
    except KeyboardInterrupt:  # a second Ctrl-C before the supervisor took the signals
        progress.clear()
        signal.signal(signal.SIGINT, signal.SIG_IGN)
        backend.cancel(record)
        status, interrupted = backend.status(record), "SIGINT"
    finally:
        progress.clear()
    if as_json:
        _print_final(record, status)
    _report(status, time.time() - started)
    if interrupted:
        sys.exit(ExitCode.INTERRUPTED)
    if status.state is not JobState.SUCCEEDED:
        sys.exit(ExitCode.JOB_FAILED)


def _follow_and_exit(backend, record: records.JobRecord, *, stream_logs: bool,
                     timeout: Optional[float], cancel_on_interrupt: bool,
                     quiet: bool = False, as_json: bool = False,
                     held: Optional[HeldSignals] = None) -> None:
    """Follow the job until it ends; Ctrl-C cancels it (``cancel_on_interrupt``) or
    leaves it running. ``held``: signals held back since the submission, released here."""
    from .progress import Progress, choose_mode

    started = time.time()
    progress = Progress(choose_mode(sys.stderr, quiet), sys.stderr, record.submitted_at)
    try:
        if held is not None:
            held.release()  # a Ctrl-C held back meanwhile: KeyboardInterrupt now
        status = follow(backend, record, stream_logs=stream_logs,
                        echo=progress.wrap(click.echo), timeout=timeout,
                        on_status=progress.on_status, note=progress.wrap(_err))
    except KeyboardInterrupt:
        progress.clear()
        if not cancel_on_interrupt:
            raise MxbatchError("interrupted; the job keeps running",
                               ExitCode.INTERRUPTED) from None
        signal.signal(signal.SIGINT, signal.SIG_IGN)
        _err(f"mxbatch: interrupted: cancelling {record.job_id} ...")
        backend.cancel(record)
        _err(f"mxbatch: job {record.job_id} CANCELLED")
        sys.exit(ExitCode.INTERRUPTED)
    finally:
        progress.clear()
    if as_json:
        _print_final(record, status)
    _report(status, time.time() - started)
    if status.state is not JobState.SUCCEEDED:
        sys.exit(ExitCode.JOB_FAILED)


def _report(status: JobStatus, elapsed: float) -> None:
    if status.state is JobState.SUCCEEDED:
        _err(f"mxbatch: job {status.job_id} SUCCEEDED ({elapsed:.1f}s)")
        return
    message = f"mxbatch: job {status.job_id} {status.state.value}"
    if status.reason:
        message += f": {status.reason}"
    if status.log:
        message += f"\nmxbatch: see the log: {status.log}"
    _err(message)


class _RenderCommand(click.Command):
    """``render --help`` ends with every backend's ``backends.<name>:`` options."""

    def format_epilog(self, ctx: click.Context, formatter: click.HelpFormatter) -> None:
        from ..backends import registry
        from ..spec.typed import describe_fields

        for name in registry.names():
            try:
                fields = describe_fields(registry.backend_class(name).options_class)
            except MxbatchError:
                continue
            if not fields:
                continue
            formatter.write_paragraph()
            formatter.write_text(f"backends.{name}:")
            with formatter.indentation():
                formatter.write_dl([(f"{f.name} ({f.type}, default {f.default!r})", f.help)
                                    for f in fields])


@main.command(cls=_RenderCommand)
@click.argument("spec_file", type=click.Path(dir_okay=False, path_type=Path))
@_BACKEND
@_WORKERS
@_SERVERS
@_PROFILE
@click.option("--format", "output_format", type=click.Choice(["text", "json", "shell"]),
              default="text", show_default=True,
              help="text: what submit runs; json: the same as data; shell: a bash script "
                   "that starts every role by hand with its DMLC_* variables (local).")
@click.option("--json", "as_json", is_flag=True, help="Machine-readable output (--format json).")
def render(spec_file: Path, backend: Optional[str], workers: Optional[int],
           servers: Optional[int], profile: Optional[str], output_format: str,
           as_json: bool) -> None:
    """Print exactly what submit would run (per-task argv and env, job scripts)."""
    spec = siteconfig.load_job(spec_file, profile=profile)
    backend = siteconfig.backend_name(spec, backend)
    if output_format == "shell":
        from ..jobs.shellscript import render_script

        click.echo(render_script(specs.with_counts(spec, workers, servers), backend), nl=False)
        return
    _, request = jobs.prepare(spec, backend, workers=workers, servers=servers,
                              for_submit=False)
    if as_json or output_format == "json":
        click.echo(jsonout.dumps(request.to_dict()))
    else:
        click.echo(request.describe(), nl=False)


# ------------------------------------------------------------------------ inspecting


@main.command()
@click.argument("job_id", shell_complete=job_ids)
@_JSON
def status(job_id: str, as_json: bool) -> None:
    """Show the state of every task of JOB_ID."""
    record = records.load(job_id)
    result = jobs.backend_for_record(record).status(record)
    if as_json:
        click.echo(jsonout.dumps(jsonout.document(result.to_dict())))
        return
    click.echo(f"job {result.job_id}  backend {result.backend}  state {result.state.value}")
    if result.reason:
        click.echo(f"reason: {result.reason}")
    if result.log:
        click.echo(f"log: {result.log}")
    _show_attempts(result)
    rows = [("TASK", "STATE", "HOST", "PID", "EXIT", "NOTE")]
    for task in result.tasks:
        exit_text = task.signal or ("" if task.exit_code is None else str(task.exit_code))
        rows.append((task.label, task.state.value, task.host, str(task.pid or ""), exit_text,
                     task.note))
    widths = [max(len(r[i]) for r in rows) for i in range(5)]
    for row in rows:
        click.echo("  ".join(cell.ljust(widths[i]) for i, cell in enumerate(row[:5]))
                   + "  " + row[5])


def _show_attempts(result: JobStatus) -> None:
    """The attempts of a job with restarts: which one the tasks below belong to, and how
    every attempt ended (the table's ATTEMPT is ``MXBATCH_ATTEMPT``, from 0)."""
    if result.max_attempts <= 1 and len(result.attempts) <= 1:
        return
    click.echo(f"attempt {result.attempt} (MXBATCH_ATTEMPT; at most {result.max_attempts} "
               "attempts, the tasks below are this one's)")
    if result.excluded_hosts:
        click.echo("excluded hosts (node failures): " + ", ".join(result.excluded_hosts))
    rows = [("ATTEMPT", "STARTED", "ENDED", "REASON", "DETAIL")]
    for attempt in result.attempts:
        ended = time.strftime("%H:%M:%S", time.localtime(attempt.ended_at)) \
            if attempt.ended_at else ""
        detail = "; ".join(x for x in (attempt.detail, attempt.decision) if x)
        rows.append((str(attempt.index),
                     time.strftime("%H:%M:%S", time.localtime(attempt.started_at)), ended,
                     attempt.reason or "running", detail))
    widths = [max(len(r[i]) for r in rows) for i in range(4)]
    for row in rows:
        click.echo("  " + "  ".join(cell.ljust(widths[i]) for i, cell in enumerate(row[:4]))
                   + "  " + row[4])


@main.command()
@click.argument("job_id", shell_complete=job_ids)
@click.option("--role", type=click.Choice([r.value for r in Role]), default=None,
              help="Only this role's tasks (without -f and --rank: its rank 0).")
@click.option("--rank", type=int, default=None,
              help="Only tasks of this rank; a task the job does not have is an error (exit 4).")
@click.option("--follow", "-f", is_flag=True, help="Keep printing until the job ends.")
@click.option("--attempt", type=int, default=None,
              help="The logs of this attempt (MXBATCH_ATTEMPT; default: the current one).")
def logs(job_id: str, role: Optional[str], rank: Optional[int], follow: bool,
         attempt: Optional[int]) -> None:
    """Print the logs of JOB_ID (all tasks prefixed, or one task)."""
    from ..backends.base import current_attempt

    record = records.load(job_id)
    backend = jobs.backend_for_record(record)
    plan_tasks = _chosen_tasks(record, role, rank)
    latest = current_attempt(record)
    if attempt is None:
        attempt = latest
    elif not 0 <= attempt <= latest:
        raise JobNotFound(f"job {job_id} has no attempt {attempt} (attempts 0-{latest})")
    if role is not None and not follow:
        task = min(plan_tasks, key=lambda t: t.rank)  # --role alone: its rank 0
        # (attempt 0 as before: a plugin's logs() may not know attempts)
        for line in backend.logs(record, task.role, task.rank, *([attempt] if attempt else [])):
            click.echo(line, nl=False)
        return
    width = max([len(t.label) for t in plan_tasks] or [1])
    layout = record.layout.attempt(attempt)
    tails = [LogTail(Path(layout.task_log(t.role.value, t.rank)),
                     f"{t.label:<{width}} | ",
                     backend.log_reader(record, t.role, t.rank,
                                        *([attempt] if attempt else [])))
             for t in plan_tasks]
    while True:
        done = not follow or backend.status(record).terminal
        for tail in tails:
            for line in tail.read(final=done):
                click.echo(line)
        if done:
            return
        time.sleep(0.25)


def _plan_tasks(record: records.JobRecord):
    from ..backends.base import load_run_plan

    return load_run_plan(record).tasks


def _chosen_tasks(record: records.JobRecord, role: Optional[str], rank: Optional[int]):
    """The job's tasks that ``--role``/``--rank`` select; JobNotFound (exit 4) naming the
    job's tasks when they select none."""
    tasks = _plan_tasks(record)
    chosen = [t for t in tasks
              if (role is None or t.role == role) and (rank is None or t.rank == rank)]
    if not chosen:
        wanted = f"{role or 'any role'}[{'any rank' if rank is None else rank}]"
        raise JobNotFound(f"job {record.job_id} has no task {wanted}; its tasks: "
                          + ", ".join(t.label for t in tasks))
    return chosen


@main.command()
@click.argument("job_id", shell_complete=job_ids)
@_JSON
def cancel(job_id: str, as_json: bool) -> None:
    """Stop JOB_ID; nothing of it stays queued or running. A no-op on an ended job."""
    record = records.load(job_id)
    backend = jobs.backend_for_record(record)
    before = backend.status(record)
    backend.cancel(record)
    after = backend.status(record)
    if as_json:
        click.echo(jsonout.dumps(jsonout.document(
            {"job_id": job_id, "state": after.state.value, "already_ended": before.terminal,
             "state_before": before.state.value})))
    if before.terminal:
        _err(f"mxbatch: job {job_id} had already ended ({before.state.value})")
    else:
        _err(f"mxbatch: job {job_id} {after.state.value}")


@main.command(name="wait")
@click.argument("job_id", shell_complete=job_ids)
@click.option("--timeout", type=float, default=None, help="Give up after this many seconds.")
@click.option("--logs/--no-logs", "stream_logs", default=False,
              help="Stream the logs of every task, prefixed role[rank].")
@click.option("--quiet", "-q", is_flag=True, help="Do not show the status line.")
@_JSON
def wait_command(job_id: str, timeout: Optional[float], stream_logs: bool, quiet: bool,
                 as_json: bool) -> None:
    """Block until JOB_ID ends; exit 0 only if it succeeded."""
    record = records.load(job_id)
    _follow_and_exit(jobs.backend_for_record(record), record,
                     stream_logs=stream_logs and not as_json, timeout=timeout,
                     cancel_on_interrupt=False, quiet=quiet, as_json=as_json)


@main.command(name="list")
@_JSON
def list_jobs(as_json: bool) -> None:
    """List submitted jobs, newest first."""
    rows = []
    for record in records.all_records():
        try:
            state = jobs.backend_for_record(record).status(record).state.value
        except (MxbatchError, OSError, ValueError):
            state = "UNKNOWN"
        rows.append({"job_id": record.job_id, "backend": record.backend, "state": state,
                     "submitted": time.strftime("%Y-%m-%d %H:%M:%S",
                                                time.localtime(record.submitted_at)),
                     "run_dir": record.run_dir})
    if as_json:
        click.echo(jsonout.dumps([jsonout.document(row) for row in rows]))
        return
    for row in rows:
        click.echo(f"{row['job_id']:<32} {row['backend']:<6} {row['state']:<10} "
                   f"{row['submitted']}")


def _add_site_commands() -> None:
    from .completion import completion_command
    from .site import config_group, doctor_command

    main.add_command(config_group)
    main.add_command(doctor_command)
    main.add_command(completion_command)


_add_site_commands()
