"""The ``mxbatch`` command line. Formats output and errors; the work is elsewhere."""

from __future__ import annotations

import contextlib
import errno
import importlib
import os
import signal
import sys
import time
from pathlib import Path
from typing import TYPE_CHECKING, Dict, List, Optional, Tuple

import click

from .. import __version__
from ..errors import BadInput, ExitCode, MxbatchError, WaitTimeout
from ..jobs.interrupts import HeldSignals, check_interrupted
from ..spec.schema import DEFAULT_BACKEND
from . import jsonout
from . import launch as launchcli
from .completion import profile_names
from .output import Loss, OutputLost, Stream, Terminal
from .params import JOB_HELP, Duration, JobRef, backend_option

if TYPE_CHECKING:  # pragma: no cover
    from ..backends import records
    from ..backends.status import JobStatus
    from ..jobs.cause import Cause
    from ..runtime.roles import Role
    from ..spec import parse as specs

#: the commands defined in modules of their own: imported when used or listed (each
#: command imports what only it needs, so that ``launch`` starts its first role soon)
LAZY_COMMANDS: Dict[str, Tuple[str, str]] = {
    "list": ("listing", "list_command"),
    "clean": ("listing", "clean_command"),
    "logs": ("logs", "logs_command"),
    "config": ("site", "config_group"),
    "doctor": ("site", "doctor_command"),
    "completion": ("completion", "completion_command"),
    "explain": ("explain", "explain_command"),
}

_BACKEND = backend_option(f"the spec's or profile's backend, else {DEFAULT_BACKEND}")
_JSON = click.option("--json", "as_json", is_flag=True,
                     help=jsonout.OPTION_HELP)
_PROFILE = click.option("--profile", "-p", default=None, metavar="NAME",
                        shell_complete=profile_names,
                        help="Site profile of the config file (default: its default_profile).")
_NAME = click.option("--name", default=None, help="The job's name (overrides the spec's).")
_ENV = click.option("--env", "-e", "env", multiple=True, metavar="NAME[=VALUE]",
                    help="NAME=VALUE: set it for every role (over the spec's env); NAME: check "
                         "that the submitter's NAME is set (roles inherit it). Repeatable.")
_NO_CHECK = click.option("--no-check", "no_check", is_flag=True,
                         help="Submit even when the command's script (python3 X.py) does "
                              "not exist in the workdir here: for a script that exists "
                              "only on the nodes (else: exit 2, nothing submitted).")
_EXTRA_ARGS = click.argument("extra_args", nargs=-1, type=click.UNPROCESSED)
_VERBOSE = click.option("--verbose", "-v", is_flag=True,
                        help="Stream mxbatch's own lines of the logs too (notes, the role "
                             "hook's reports, stack dumps), as the log files keep them.")
_WORKERS = click.option("-n", "--workers", type=int, default=None,
                        help="Number of workers (overrides the spec).")
_SERVERS = click.option("-s", "--servers", type=int, default=None,
                        help="Number of servers (overrides the spec).")


def _err(message: str) -> None:
    """A message on stderr; nothing when stderr cannot be written to (closed, a broken
    pipe, a full device): a message never changes what a command did."""
    try:
        click.echo(message, err=True)
    except (OSError, ValueError):
        pass


def symlink_loop(exc: BaseException) -> Optional[BadInput]:
    """A symlink loop met on any path (``MXBATCH_HOME``, a folder a command makes) is
    the user's to fix, not a bug: exit 2 naming the path. None for anything else."""
    if isinstance(exc, OSError) and exc.errno == errno.ELOOP:
        where = exc.filename or "a path"
    elif isinstance(exc, RuntimeError) and str(exc).startswith("Symlink loop from "):
        where = str(exc)[len("Symlink loop from "):].strip("'")  # pathlib before 3.13
    else:
        return None
    return BadInput(f"{where} is behind a symlink loop (too many levels of symbolic links): "
                    "fix or remove the link")


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
            loop = symlink_loop(exc)
            if loop is not None:
                raise loop from None
            from .internal import internal_error

            raise internal_error(exc) from None

    def make_context(self, *args, **kwargs) -> click.Context:
        try:  # parsing the command line: click would say "Aborted!" and exit 1
            return super().make_context(*args, **kwargs)
        except KeyboardInterrupt:
            raise MxbatchError("interrupted", ExitCode.INTERRUPTED) from None

    def list_commands(self, ctx: click.Context) -> List[str]:
        return sorted(set(self.commands) | set(LAZY_COMMANDS))

    def get_command(self, ctx: click.Context, cmd_name: str) -> Optional[click.Command]:
        if cmd_name not in self.commands and cmd_name in LAZY_COMMANDS:
            module_name, attribute = LAZY_COMMANDS[cmd_name]
            module = importlib.import_module(f"{__package__}.{module_name}")
            self.add_command(getattr(module, attribute), cmd_name)
        return super().get_command(ctx, cmd_name)

    def resolve_command(self, ctx: click.Context, args: List[str]):
        if args and args[0] not in self.commands and args[0] not in LAZY_COMMANDS:
            for name in LAZY_COMMANDS:  # an unknown name: "did you mean" weighs them all
                self.get_command(ctx, name)
        return super().resolve_command(ctx, args)

    def format_commands(self, ctx: click.Context, formatter: click.HelpFormatter) -> None:
        """Each command's whole first sentence, wrapped rather than cut at the width."""
        rows = []
        for name in self.list_commands(ctx):
            command = self.get_command(ctx, name)
            if command is not None and not command.hidden:
                rows.append((name, command.get_short_help_str(limit=10_000)))
        if rows:
            with formatter.section("Commands"):
                formatter.write_dl(rows)

    def main(self, *args, **kwargs):
        try:
            return super().main(*args, **kwargs)
        except Exception as exc:  # outside invoke: parsing the command line, completion
            from .internal import internal_error

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
@_VERBOSE
@click.option("--max-restarts", type=int, default=None, metavar="N",
              help="Relaunch the job up to N times (overrides restarts.max).")
@_NAME
@_ENV
@_NO_CHECK
@_JSON
@_EXTRA_ARGS
def submit(spec_file: Path, backend: Optional[str], workers: Optional[int],
           servers: Optional[int], profile: Optional[str], wait: bool, quiet: bool,
           verbose: bool, max_restarts: Optional[int], name: Optional[str],
           env: Tuple[str, ...],
           no_check: bool, as_json: bool, extra_args: Tuple[str, ...]) -> None:
    """Submit the job described by SPEC_FILE; print its id.

    Arguments after -- are appended to every role's command:
    mxbatch submit job.yaml -- --epochs 3
    """
    from ..spec import config as siteconfig

    spec = _spec_with_flags(spec_file, profile, name, env, extra_args)
    _submit_and_maybe_follow(spec, siteconfig.backend_name(spec, backend), workers, servers,
                             wait, quiet, as_json, max_restarts=max_restarts,
                             check_scripts=not no_check, verbose=verbose)


def _spec_with_flags(spec_file: Path, profile: Optional[str], name: Optional[str],
                     env: Tuple[str, ...], extra_args: Tuple[str, ...]) -> specs.JobSpec:
    """The spec of ``submit``/``render`` with ``--name``, ``--env`` and ``-- ARGS``
    (``mxbatch.api.load_spec``, as ``mxbatch.submit`` reads it)."""
    from ..api.submitting import load_spec
    from ..spec.envflags import common_env

    return load_spec(spec_file, name=name, env=common_env(env, os.environ),
                     args=extra_args, profile=profile)


@main.command(cls=launchcli.LaunchCommand, context_settings=launchcli.CONTEXT)
@launchcli.options
def launch(**flags) -> None:
    """Run COMMAND for every role: MXNet's launch.py command line (no spec file).

    Options end where COMMAND begins. Blocks until the job ends and exits with its
    outcome:

    mxbatch launch -n 2 -H hosts --launcher ssh python3 train.py --kvstore dist_sync
    """
    spec, backend, args = launchcli.launch_job(flags)
    launchcli.warn_misplaced_flags(args)
    if args.render == launchcli.RENDER_YAML:
        click.echo(launchcli.spec_yaml(args, backend), nl=False)
        return
    if args.render:
        _render(spec, backend, args.render, None, None, launchcli.count_flags(args))
        return
    _submit_and_maybe_follow(spec, backend, None, None, not args.detach, args.quiet,
                             args.as_json, count_flags=launchcli.count_flags(args),
                             check_scripts=not args.no_check, verbose=args.verbose)


def _submit_and_maybe_follow(spec: specs.JobSpec, backend_name: str, workers: Optional[int],
                             servers: Optional[int], wait: bool, quiet: bool,
                             as_json: bool = False,
                             count_flags: Optional[Dict[Role, str]] = None,
                             max_restarts: Optional[int] = None,
                             check_scripts: bool = True, verbose: bool = False) -> None:
    from ..jobs import submit as jobs

    backend, request = jobs.prepare(spec, backend_name, workers=workers, servers=servers,
                                    count_flags=count_flags, max_restarts=max_restarts,
                                    check_scripts=check_scripts)
    for line in backend.capacity_warnings(request.plan):
        _err(f"mxbatch: warning: {line}")
    attached = backend.attach(request) if wait else None
    terminal = Terminal() if wait else None  # a job followed: its output never blocks it
    check_interrupted()  # a Ctrl-C Python dropped while preparing: submit nothing
    # from here until the job is supervised (or followed), Ctrl-C is held back so that
    # it cancels the job whenever it comes (mxbatch.interrupts)
    with HeldSignals() if wait else contextlib.nullcontext() as held:
        record = jobs.submit(backend, attached or request)
        if as_json and not wait:
            click.echo(jsonout.dumps(jsonout.document(_record_data(record))))
        elif not as_json and not (wait and _one_terminal()):
            if terminal is not None:  # for scripts; a terminal reads it on stderr below
                terminal.echo(record.job_id)
            else:
                click.echo(record.job_id)
        _err(f"mxbatch: submitted {record.job_id} to {record.backend}; "
             f"run directory {record.run_dir}")
        if attached is not None:
            _attend_and_exit(backend, record, stream_logs=not quiet and not as_json,
                             supervise_here=True, held=held, quiet=quiet, as_json=as_json,
                             terminal=terminal, verbose=verbose)
        elif wait:
            _attend_and_exit(backend, record, stream_logs=not quiet and not as_json,
                             held=held, quiet=quiet, as_json=as_json, terminal=terminal,
                             verbose=verbose)


def _one_terminal() -> bool:
    """stdout and stderr are the same terminal: an attached job's id, which the
    ``submitted`` line on stderr names, is then not printed twice."""
    try:
        return sys.stdout.isatty() and os.ttyname(1) == os.ttyname(2)
    except OSError:
        return False


def _record_data(record: records.JobRecord) -> dict:
    return {"job_id": record.job_id, "backend": record.backend, "run_dir": record.run_dir,
            "submitted_at": record.submitted_at}


def _status_document(record: records.JobRecord, status: JobStatus,
                     cause: Optional[Cause]) -> dict:
    """The JSON document of a job's status (``status``, ``wait``, attached commands):
    ``mxbatch.api.JobStatus.to_dict``."""
    from ..api.job import JobStatus as Described

    return jsonout.document(Described(record, status, cause).to_dict())


def _print_final(backend, record: records.JobRecord, status: JobStatus,
                 out: Terminal, timed_out: bool = False) -> None:
    """``--json`` of an attached command: the final status, and its cause if it failed
    (through ``out``: nothing, and no error, where stdout is lost); ``timed_out``: the
    status when ``wait --timeout`` gave up, the job going on."""
    from ..jobs.cause import failure_cause

    document = _status_document(record, status, failure_cause(backend, record, status))
    out.echo(jsonout.dumps(dict(document, timed_out=timed_out)))
    out.drain()


def _attend_and_exit(backend, record: records.JobRecord, *, stream_logs: bool,
                     supervise_here: bool = False, held: Optional[HeldSignals] = None,
                     timeout: Optional[float] = None, cancel_on_interrupt: bool = True,
                     quiet: bool = False, as_json: bool = False,
                     terminal: Optional[Terminal] = None, verbose: bool = False) -> None:
    """Stay with the job until it ends, then report its outcome and exit with it (0, 1
    when it did not succeed, 130 when interrupted). ``supervise_here``: this process is
    the job's supervisor (the local backend attached), whose handlers take Ctrl-C and
    cancel the job; else it follows the job's records (up to ``timeout``), and Ctrl-C
    cancels the job (``cancel_on_interrupt``) or leaves it running (exit 130).
    ``held``: signals held back since the submission, replayed to the supervisor's
    handlers or released here. Every output goes through ``terminal`` (``cli.output``):
    a stdout that breaks (``| head``) or fills ends a supervisor's logs, not its job,
    and ends a follower (exit 1), the job going on. The logs streamed are the roles' own
    lines unless ``verbose``; the job's events are said once, here and in ``_report``."""
    from ..jobs.follow import supervise
    from .progress import Progress, choose_mode

    out = terminal or Terminal()
    out.tell(lambda loss: _output_lost(out, record, loss, supervise_here))
    progress = Progress(choose_mode(sys.stderr, quiet), out.file(Stream.STDERR),
                        record.submitted_at)

    def echo_log(line: str) -> None:
        if not supervise_here:
            out.raise_if_lost()  # a follower whose stdout is gone stops following
        out.echo(line)

    echo, note = progress.wrap(echo_log), progress.wrap(out.note)
    interrupted: Optional[str] = None
    try:
        if supervise_here:
            status, interrupted = supervise(backend, record, stream_logs=stream_logs,
                                            echo=echo, on_status=progress.on_status,
                                            held=held, note=note,
                                            output_busy=lambda: out.busy, verbose=verbose)
        else:
            from ..api.job import Job  # not before: an attached job's roles start sooner

            if held is not None:
                held.release()  # a Ctrl-C held back meanwhile: KeyboardInterrupt now
            status = Job.of_record(record, backend).wait(
                timeout, on_log=echo if stream_logs else None, on_status=progress.on_status,
                note=note, output_busy=lambda: out.busy, verbose=verbose).detail
    except WaitTimeout:
        if as_json:  # the one document --json promises: the status it gave up at
            progress.clear()
            _print_final(backend, record, backend.status(record), out, timed_out=True)
        raise
    except OutputLost as lost:
        progress.clear()
        out.drain()
        _err(f"mxbatch: {lost.loss.describe()}: no longer following {record.job_id}, "
             f"which goes on (`mxbatch wait {record.job_id}` follows it)")
        sys.exit(ExitCode.JOB_FAILED)
    except KeyboardInterrupt:  # following, or a second Ctrl-C before the supervisor's
        progress.clear()
        out.drain()
        if not cancel_on_interrupt:
            raise MxbatchError("interrupted; the job keeps running",
                               ExitCode.INTERRUPTED) from None
        signal.signal(signal.SIGINT, signal.SIG_IGN)
        _err(f"mxbatch: interrupted: cancelling {record.job_id} ...")
        backend.cancel(record)
        status, interrupted = backend.status(record), "SIGINT"
    finally:
        progress.clear()
        out.drain()  # what this command writes next comes after it
    from ..backends.status import JobState  # not before: the roles start sooner

    if as_json:
        _print_final(backend, record, status, out)
    _report(backend, record, status)
    if interrupted:
        sys.exit(ExitCode.INTERRUPTED)
    if status.state is not JobState.SUCCEEDED:
        sys.exit(ExitCode.JOB_FAILED)


def _output_lost(out: Terminal, record: records.JobRecord, loss: Loss,
                 supervise_here: bool) -> None:
    """What an attached command says when its stdout is lost: this process supervises
    the job, which goes on (a follower says so when it stops: ``_attend_and_exit``)."""
    if supervise_here and loss.stream is Stream.STDOUT:
        out.note(f"mxbatch: {loss.describe()}: the logs are no longer shown here; this "
                 f"process supervises {record.job_id} until it ends (`mxbatch logs -f "
                 f"{record.job_id}` shows them)")


def _report(backend, record: records.JobRecord, status: JobStatus) -> None:
    """The final summary on stderr: the outcome, how long the job took (submission to
    its last task's end), and for a failure its cause in the failing role's own words."""
    from ..backends.status import JobState
    from ..jobs.cause import failure_cause

    duration = (status.ended_at or time.time()) - record.submitted_at
    if status.state is JobState.SUCCEEDED:
        _err(f"mxbatch: job {status.job_id} SUCCEEDED ({duration:.1f}s)"
             + (f"\nmxbatch: note: {status.note}" if status.note else ""))
        return
    message = f"mxbatch: job {status.job_id} {status.state.value}"
    if status.reason:
        message += f": {status.reason}"
    cause = failure_cause(backend, record, status)
    if cause is not None:
        message += f"\n{_cause_text(cause, 'mxbatch: ')}"
    if status.log:
        message += f"\nmxbatch: see the log: {status.log}"
    _err(message)


def _cause_text(cause: Cause, prefix: str = "") -> str:
    """The quoted last lines of the failing task, indented under a heading."""
    return "\n".join([f"{prefix}{cause.task}'s last output:"]
                     + [f"    {line}" for line in cause.lines])


class _RenderCommand(click.Command):
    """``render --help`` ends with the ``backends.<name>:`` options of the backend that
    ``-b`` names (default: local), or of every backend with ``--all``."""

    def parse_args(self, ctx: click.Context, args: List[str]) -> List[str]:
        # --help is handled while parsing, before -b's value is processed: look ahead
        ctx.meta["render.all"] = "--all" in args
        for index, arg in enumerate(args):
            if arg in ("-b", "--backend") and index + 1 < len(args):
                ctx.meta["render.backend"] = args[index + 1]
            elif arg.startswith("--backend="):
                ctx.meta["render.backend"] = arg.partition("=")[2]
        return super().parse_args(ctx, args)

    def format_epilog(self, ctx: click.Context, formatter: click.HelpFormatter) -> None:
        from ..backends import registry
        from ..spec.typed import describe_fields

        chosen = ctx.meta.get("render.backend", DEFAULT_BACKEND)
        every = ctx.meta.get("render.all", False)
        shown = registry.names() if every else [chosen]
        for name in shown:
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
        if not every:
            formatter.write_paragraph()
            formatter.write_text("Another backend's options: render -b NAME --help; every "
                                 "backend's: render --help --all.")


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
@click.option("--all", "all_backends", is_flag=True,
              help="With --help: the options of every backend, not only the chosen one's.")
@_NAME
@_ENV
@_EXTRA_ARGS
def render(spec_file: Path, backend: Optional[str], workers: Optional[int],
           servers: Optional[int], profile: Optional[str], output_format: str,
           as_json: bool, all_backends: bool, name: Optional[str], env: Tuple[str, ...],
           extra_args: Tuple[str, ...]) -> None:
    """Print exactly what submit would run (per-task argv and env, job scripts).

    The job id it shows is a placeholder: each submit gives its job a new one."""
    from ..spec import config as siteconfig

    spec = _spec_with_flags(spec_file, profile, name, env, extra_args)
    _render(spec, siteconfig.backend_name(spec, backend), "json" if as_json else output_format,
            workers, servers)


def _render(spec: specs.JobSpec, backend: str, output_format: str, workers: Optional[int],
            servers: Optional[int], count_flags: Optional[Dict[Role, str]] = None) -> None:
    """``render``'s output (and ``launch --render``'s): text, json or shell.
    ``count_flags``: the flags that set counts in ``spec`` (default: ``-n``, ``-s``)."""
    from ..jobs import submit as jobs

    if count_flags is None:
        count_flags = jobs.count_flags_of(workers, servers)
    if output_format == "shell":
        from ..jobs.shellscript import render_script
        from ..spec import parse as specs

        click.echo(render_script(specs.with_counts(spec, workers, servers), backend,
                                 count_flags=count_flags), nl=False)
        return
    _, request = jobs.prepare(spec, backend, workers=workers, servers=servers,
                              for_submit=False, count_flags=count_flags)
    if output_format == "json":
        click.echo(jsonout.dumps(jsonout.document(request.to_dict())))
    else:
        click.echo(request.describe(), nl=False)


# ------------------------------------------------------------------------ inspecting


@main.command(epilog=JOB_HELP)
@click.argument("job_id", type=JobRef())
@_JSON
def status(job_id: str, as_json: bool) -> None:
    """Show the state of every task of JOB_ID."""
    from ..api.job import Job
    from .tables import task_table, throughput_text

    described = Job(job_id).status()
    result, cause = described.detail, described.cause
    if as_json:
        click.echo(jsonout.dumps(jsonout.document(described.to_dict())))
        return
    click.echo(f"job {result.job_id}  backend {result.backend}  state {result.state.value}")
    if result.reason:
        click.echo(f"reason: {result.reason}")
    if result.note:
        click.echo(f"note: {result.note}")
    if cause is not None:
        click.echo(_cause_text(cause))
    if result.log:
        click.echo(f"log: {result.log}")
    if result.samples_per_sec is not None:
        click.echo(f"throughput: {throughput_text(result)}")
    _show_attempts(result)
    click.echo(task_table(result), nl=False)


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


@main.command(epilog=JOB_HELP)
@click.argument("job_id", type=JobRef())
@_JSON
def cancel(job_id: str, as_json: bool) -> None:
    """Stop JOB_ID; nothing of it stays queued or running. A no-op on an ended job."""
    from ..jobs.cancelling import cancel_job

    report = cancel_job(job_id)
    before, after = report.before, report.after
    if as_json:
        click.echo(jsonout.dumps(jsonout.document(
            {"job_id": job_id, "state": after.state.value if after else "UNKNOWN",
             "already_ended": report.already_ended,
             "state_before": before.state.value if before else "UNKNOWN",
             "submitted_at": report.record.submitted_at if report.record else None,
             "killed": [{"pid": k.pid, "command": k.command} for k in report.killed],
             **({"problem": report.problem} if report.problem else {})})))
    killed = ", ".join(k.describe() for k in report.killed)
    count = f"{len(report.killed)} process{'es' if len(report.killed) != 1 else ''}"
    if report.problem:
        _err(f"mxbatch: {report.problem}")
    if before is None:
        _err(f"mxbatch: job {job_id}: killed {count} of it on this host (found by "
             f"MXBATCH_JOB_ID): {killed}" if report.killed
             else f"mxbatch: job {job_id}: nothing of it runs on this host")
    elif before.terminal and report.killed:
        _err(f"mxbatch: job {job_id} had ended ({before.state.value}), but {count} of it "
             f"still ran without its supervisor: killed {killed}")
    elif before.terminal:
        _err(f"mxbatch: job {job_id} had already ended ({before.state.value})")
    elif report.already_ended:
        _err(f"mxbatch: job {job_id} was already ending ({before.state.value}, its tasks "
             "stopping); it has ended")
    else:
        _err(f"mxbatch: job {job_id} {after.state.value if after else 'cancelled'}"
             + (f"; killed {count} that outlived its supervisor: {killed}"
                if report.killed else ""))


@main.command(name="wait", epilog=JOB_HELP)
@click.argument("job_id", type=JobRef())
@click.option("--timeout", type=Duration(), default=None,
              help="Give up after this long (600, 90s, 10m, 1h30m; exit 124).")
@click.option("--logs/--no-logs", "stream_logs", default=False,
              help="Stream the logs of every task, prefixed role[rank].")
@click.option("--quiet", "-q", is_flag=True, help="Do not show the status line.")
@_VERBOSE
@_JSON
def wait_command(job_id: str, timeout: Optional[float], stream_logs: bool, quiet: bool,
                 verbose: bool, as_json: bool) -> None:
    """Block until JOB_ID ends; exit 0 only if it succeeded."""
    from ..api.job import Job

    job = Job(job_id)
    _attend_and_exit(job.backend, job.record,
                     stream_logs=stream_logs and not as_json, timeout=timeout,
                     cancel_on_interrupt=False, quiet=quiet, as_json=as_json,
                     verbose=verbose)
