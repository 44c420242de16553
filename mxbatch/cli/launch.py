"""``mxbatch launch``: MXNet's ``tools/launch.py`` command line, plus mxbatch's own options.

Every launch.py option means what it meant there (docs/migration.md has the table):

=============================  ==========================================================
launch.py                      mxbatch launch
=============================  ==========================================================
``-n/--num-workers N``         workers (also ``--workers``); at least 1
``-s/--num-servers N``         servers (also ``--servers``); default: as many as workers
``-H/--hostfile FILE``         ``backends.<ssh|mpi>.hostfile``; implies ``--launcher ssh``
                               when no launcher is given (launch.py's default launcher)
``--sync-dst-dir DIR``         ``backends.ssh.sync_dst_dir``: rsync the working directory
                               to DIR on every host and run there
``--launcher L``               the backend (alias of ``--backend``): launch.py's local,
                               ssh, mpi, sge, yarn, and every other mxbatch backend
``--env NAME``                 the submitter's value of NAME reaches every role (launch
                               jobs inherit the environment: this checks NAME is set and
                               never writes its value anywhere); ``--env NAME=VALUE`` or
                               ``NAME:VALUE`` sets it
``--env-server NAME:VALUE``    a variable for the servers (``NAME=VALUE`` too)
``--env-worker NAME:VALUE``    a variable for the workers
``--p3``                       ``DMLC_PS_VAN_TYPE=p3 DMLC_PS_WATER_MARK=10`` for every role
``command...``                 the command of every role
=============================  ==========================================================

Options end where the command begins: the first word that is not an option (or
after ``--``) starts the command, and everything from there on is the command's, so
``python3 train.py -n 5`` keeps its ``-n 5``. An unknown option before the command is a
usage error (exit 2), not the start of the command.
"""

from __future__ import annotations

import dataclasses
import os
from pathlib import Path
from typing import Any, Callable, Dict, List, Optional, Sequence, Tuple

import click

from ..backends.registry import load_site_config
from ..errors import SpecError
from ..runtime import wire
from ..runtime.leanscheduler import SchedulerStart
from ..runtime.roles import Role
from ..spec import config as siteconfig
from ..spec.envflags import common_env, role_env
from ..spec.schema import JobSpec
from . import jsonout
from .completion import profile_names
from .params import BackendName, RegistryHelpOption, backend_option

#: click settings of the command: options stop at the command's first word
CONTEXT = {"allow_interspersed_args": False, "ignore_unknown_options": False,
           "help_option_names": ["-h", "--help"]}
RENDER_YAML = "yaml"
#: what ``--render`` prints: ``render``'s formats, and the job as a spec
RENDER_FORMATS = ("text", "json", "shell", RENDER_YAML)
#: launch.py's options that users put after the command (where they are the command's)
MISPLACED_FLAGS = ("-n", "-s", "-H", "--launcher", "--num-workers", "--num-servers",
                   "--hostfile", "--sync-dst-dir")
#: ``ctx.meta`` key: the command line ended mxbatch's options with an explicit ``--``
_DASHDASH = "launch.dashdash"
#: backends that take hosts (-H) from the command line
HOST_BACKENDS = ("ssh", "mpi")
#: launch.py's names of the count flags
WORKERS_FLAG, SERVERS_FLAG = "-n/--num-workers", "-s/--num-servers"
P3_ENV = {wire.DMLC_PS_VAN_TYPE: "p3", wire.DMLC_PS_WATER_MARK: "10"}
#: ``--scheduler``'s choices (``rendezvous.scheduler``)
SCHEDULER_STARTS = tuple(start.value for start in SchedulerStart)


@dataclasses.dataclass(frozen=True)
class LaunchArgs:
    """The parsed command line (click passes the options by these names)."""

    command: Tuple[str, ...]
    workers: Optional[int] = None
    servers: Optional[int] = None
    hostfile: Optional[str] = None
    sync_dst_dir: Optional[str] = None
    launcher: Optional[str] = None
    backend: Optional[str] = None
    env: Tuple[str, ...] = ()
    env_server: Tuple[str, ...] = ()
    env_worker: Tuple[str, ...] = ()
    p3: bool = False
    name: str = "launch"
    workdir: str = "."
    interface: Optional[str] = None
    ports: Optional[str] = None
    startup_timeout: Optional[str] = None
    grace: Optional[str] = None
    stall_timeout: Optional[str] = None
    exit_timeout: Optional[str] = None
    exit_grace: Optional[str] = None
    scheduler: Optional[str] = None
    container: Optional[str] = None
    mounts: Tuple[str, ...] = ()
    max_tasks: Optional[int] = None
    max_restarts: Optional[int] = None
    profile: Optional[str] = None
    detach: bool = False
    no_check: bool = False
    quiet: bool = False
    verbose: bool = False
    as_json: bool = False
    render: Optional[str] = None


_OPTIONS: List[Callable[[Callable[..., Any]], Callable[..., Any]]] = [
    click.option("-n", "--num-workers", "--workers", "workers", type=int, default=None,
                 help="Number of workers (launch.py's -n/--num-workers)."),
    click.option("-s", "--num-servers", "--servers", "servers", type=int, default=None,
                 help="Number of servers (default: as many as workers)."),
    click.option("-H", "--hostfile", default=None, metavar="FILE",
                 help="Hosts, one HOST, HOST:PORT or 'HOST slots=N' a line (ssh, mpi); "
                      "implies --launcher ssh unless a launcher is given."),
    click.option("--sync-dst-dir", default=None, metavar="DIR",
                 help="ssh: copy the working directory to DIR on every host (rsync) and "
                      "run there (hosts need not share storage)."),
    click.option("--launcher", type=BackendName(), default=None, cls=RegistryHelpOption,
                 help="Where to run, launch.py's name for --backend: {backends}."),
    backend_option("the profile's backend, else local"),
    click.option("--profile", "-p", default=None, metavar="NAME", shell_complete=profile_names,
                 help="Site profile of the config file (default: its default_profile)."),
    click.option("--env", "-e", "env", multiple=True, metavar="NAME[=VALUE]",
                 help="NAME: the submitter's value reaches every role (it must be set); "
                      "NAME=VALUE or NAME:VALUE: set it for every role. Repeatable."),
    click.option("--env-server", multiple=True, metavar="NAME:VALUE",
                 help="A variable for the servers. Repeatable."),
    click.option("--env-worker", multiple=True, metavar="NAME:VALUE",
                 help="A variable for the workers. Repeatable."),
    click.option("--p3", is_flag=True,
                 help="P3 distributed training ("
                      + " ".join(f"{k}={v}" for k, v in P3_ENV.items()) + ")."),
    click.option("--name", default="launch", show_default=True, help="Job name."),
    click.option("--workdir", default=".", show_default=True,
                 help="Working directory of every role."),
    click.option("--interface", default=None, help="Network interface to advertise."),
    click.option("--ports", default=None, help="Scheduler port range, e.g. 9000-9999."),
    click.option("--startup-timeout", default=None, help="Startup deadline, e.g. 10m."),
    click.option("--grace", default=None, help="Grace period before SIGKILL, e.g. 30s."),
    click.option("--stall-timeout", default=None,
                 help="Fail the job when a role is stopped, or a worker uses no CPU and "
                      "writes no output, this long, e.g. 20m (default 30m; 'off': never)."),
    click.option("--exit-timeout", default=None,
                 help="End a role still running this long after its code finished "
                      "(MXNet's exit hang) while another worker still trains, e.g. 2m "
                      "(default 60s; 'off': never)."),
    click.option("--exit-grace", default=None,
                 help="Once every worker's code has finished, end a worker still running "
                      "this long (MXNet's exit hang), e.g. 10s (default 5s)."),
    click.option("--scheduler", type=click.Choice(SCHEDULER_STARTS), default=None,
                 help="What the scheduler's role runs: lean (the default: ps-lite's "
                      "scheduler from MXNet's library, without the script's MXNet import) "
                      "or script (the command, as launch.py runs it)."),
    click.option("--container", default=None, metavar="RUNTIME:IMAGE",
                 help="Run every role in a container, e.g. docker:mxnet/python:1.9.1 "
                      "(docker, podman or apptainer)."),
    click.option("--mount", "mounts", multiple=True, metavar="HOST:CONTAINER[:ro]",
                 help="With --container: a bind mount for every role (repeatable)."),
    click.option("--max-tasks", type=int, default=None, metavar="N",
                 help="Allow up to N tasks (the spec's max_tasks; default: the backend's "
                      "ceiling, local 1000, others 10000)."),
    click.option("--max-restarts", type=int, default=None, metavar="N",
                 help="Relaunch the whole job up to N times when an attempt ends on a "
                      "failure, preemption, walltime or node failure (restarts.max; "
                      "default 0: never). Roles see MXBATCH_ATTEMPT."),
    click.option("--render", type=click.Choice(RENDER_FORMATS), default=None,
                 help="Print the job instead of running it: text or json (as render), "
                      "shell (a bash script), yaml (a job spec that submit runs as the "
                      "same job)."),
    click.option("--detach", is_flag=True, help="Return at once with the job id."),
    click.option("--no-check", "no_check", is_flag=True,
                 help="Run even when the command's script (python3 X.py) does not exist "
                      "in the workdir here: for a script that exists only on the hosts "
                      "(else: exit 2, nothing submitted)."),
    click.option("--quiet", "-q", is_flag=True,
                 help="Do not stream logs nor show the status line."),
    click.option("--verbose", "-v", is_flag=True,
                 help="Stream mxbatch's own lines of the logs too (notes, the role hook's "
                      "reports, stack dumps), as the log files keep them."),
    click.option("--json", "as_json", is_flag=True,
                 help=jsonout.OPTION_HELP),
    click.argument("command", nargs=-1, required=True, type=click.UNPROCESSED),
]


class LaunchCommand(click.Command):
    """The ``launch`` command: remembers whether ``--`` ended the options (then what
    follows is the command's on purpose, and no note is due)."""

    def parse_args(self, ctx: click.Context, args: List[str]) -> List[str]:
        ctx.meta[_DASHDASH] = "--" in args
        return super().parse_args(ctx, args)


def misplaced_flags(command: Sequence[str]) -> List[int]:
    """The indexes in ``command`` of launch flags after its first word (each with its
    value: every one of them takes one)."""
    found: List[int] = []
    for index in range(1, len(command)):
        if index in found:
            continue
        word = command[index]
        if word.split("=", 1)[0] in MISPLACED_FLAGS:
            found.append(index)
            if "=" not in word and index + 1 < len(command):
                found.append(index + 1)
    return found


def warn_misplaced_flags(args: LaunchArgs) -> None:
    """One line on stderr when launch flags come after the command's first word (they
    are the command's, as with launch.py), unless ``--`` said so explicitly."""
    context = click.get_current_context(silent=True)
    if context is not None and context.meta.get(_DASHDASH):
        return
    found = misplaced_flags(args.command)
    if not found:
        return
    flags = " ".join(args.command[i] for i in found)
    rest = " ".join(w for i, w in enumerate(args.command) if i not in found)
    click.echo(f"mxbatch: note: {flags} come after the command's first word, so they go to "
               f"the command ({' '.join(args.command)}), as with launch.py; to give them "
               f"to mxbatch, put them first: mxbatch launch {flags} {rest}", err=True)


def spec_yaml(args: LaunchArgs, backend: str) -> str:
    """The job of this command line as a job spec (YAML) that ``mxbatch submit`` runs as
    the same job: the flags' keys, the working directory made absolute, the backend."""
    import yaml

    data = job_data(args, dict(os.environ), Path.cwd())
    data["workdir"] = str((Path.cwd() / Path(data["workdir"]).expanduser()).resolve())
    data = {"name": data.pop("name"), "backend": backend, **data}
    header = "# a job spec from `mxbatch launch --render yaml`: mxbatch submit THIS_FILE\n"
    if args.profile:
        header += f"# made with --profile {args.profile}: submit it with the same profile\n"
    return header + yaml.safe_dump(data, sort_keys=False, default_flow_style=False)


def options(func: Callable[..., Any]) -> Callable[..., Any]:
    """Decorate the ``launch`` command with every option above."""
    for decorate in reversed(_OPTIONS):
        func = decorate(func)
    return func


def backend_of(args: LaunchArgs) -> Optional[str]:
    """The backend the flags ask for: ``--launcher`` or ``--backend``, else ssh when a
    hostfile is given (launch.py's default launcher); None: the default."""
    if args.launcher and args.backend and args.launcher != args.backend:
        raise SpecError(f"--launcher {args.launcher} and --backend {args.backend} disagree "
                        "(--launcher is launch.py's name for --backend: give one)",
                        key="--launcher")
    chosen = args.launcher or args.backend
    if chosen is None and args.hostfile:
        return "ssh"
    return chosen


def count_flags(args: LaunchArgs) -> Dict[Role, str]:
    """The flags that set role counts (for errors about a count), of those given."""
    return {role: flag for role, flag, count in ((Role.WORKER, WORKERS_FLAG, args.workers),
                                                 (Role.SERVER, SERVERS_FLAG, args.servers))
            if count is not None}


def job_data(args: LaunchArgs, environ: Dict[str, str], cwd: Path) -> Dict[str, Any]:
    """The job spec (as plain data) the command line describes."""
    for flag, count in ((WORKERS_FLAG, args.workers), (SERVERS_FLAG, args.servers)):
        if count is not None and count < 1:
            raise SpecError(f"must be at least 1, got {count}", key=flag)
    env = dict(P3_ENV) if args.p3 else {}
    env.update(common_env(args.env, environ))
    roles: Dict[str, Dict[str, Any]] = {
        "worker": {"env": role_env(args.env_worker, "--env-worker")},
        "server": {"env": role_env(args.env_server, "--env-server")}}
    for role, count in (("worker", args.workers), ("server", args.servers)):
        if count is not None:  # else the profile's, else 1 worker and servers = workers
            roles[role]["count"] = count
    data: Dict[str, Any] = {"name": args.name, "command": list(args.command),
                            "workdir": args.workdir, "env": env, "roles": roles}
    if args.interface or args.ports:
        data["network"] = {k: v for k, v in (("interface", args.interface),
                                             ("ports", args.ports)) if v}
    rendezvous: Dict[str, Any] = {k: v for k, v in (("startup_timeout", args.startup_timeout),
                                                    ("grace", args.grace),
                                                    ("stall_timeout", args.stall_timeout),
                                                    ("exit_timeout", args.exit_timeout),
                                                    ("exit_grace", args.exit_grace),
                                                    ("scheduler", args.scheduler)) if v}
    for key in ("stall_timeout", "exit_timeout"):
        if rendezvous.get(key) == "off":
            rendezvous[key] = None
    if rendezvous:
        data["rendezvous"] = rendezvous
    if args.container or args.mounts:
        data["container"] = container_data(args.container, args.mounts)
    if args.max_tasks is not None:
        data["max_tasks"] = args.max_tasks
    if args.no_check:
        data["check_script"] = False  # launch --render yaml keeps it
    if args.max_restarts is not None:
        if args.max_restarts < 0:
            raise SpecError(f"must be at least 0, got {args.max_restarts}",
                            key="--max-restarts")
        data["restarts"] = {"max": args.max_restarts}  # over the profile's restarts
    backend = backend_of(args)
    hosts: Dict[str, Any] = {}
    if args.hostfile:
        if backend not in HOST_BACKENDS:
            raise SpecError(f"a hostfile is for --launcher ssh or mpi, not {backend or 'local'}",
                            key="-H/--hostfile")
        hosts["hostfile"] = str(cwd / Path(args.hostfile).expanduser())
    if args.sync_dst_dir:
        if backend != "ssh":
            raise SpecError("works with --launcher ssh only (mpi needs the working directory "
                            "on storage every host sees)", key="--sync-dst-dir")
        hosts["sync_dst_dir"] = args.sync_dst_dir
    if hosts:
        data["backends"] = {backend: hosts}
    return data


def container_data(container: Optional[str], mounts: Sequence[str]) -> Dict[str, Any]:
    """``--container RUNTIME:IMAGE`` and ``--mount`` as the spec's ``container`` block."""
    runtime, sep, image = (container or "").partition(":")
    if not container:
        raise SpecError("needs --container RUNTIME:IMAGE", key="--mount")
    if not sep or not runtime or not image:
        raise SpecError(f"expected RUNTIME:IMAGE (docker:mxnet/python:1.9.1), got {container!r}",
                        key="--container")
    return {"runtime": runtime, "image": image, "mounts": list(mounts)}


def launch_job(flags: Dict[str, Any]) -> Tuple[JobSpec, str, LaunchArgs]:
    """The job spec, backend name and parsed flags of ``launch`` (the profile's values
    under the flags')."""
    args = LaunchArgs(**flags)
    data = job_data(args, dict(os.environ), Path.cwd())
    spec = siteconfig.job_from_mapping(data, base_dir=Path.cwd(), default_name=args.name,
                                       profile=args.profile, site=load_site_config())
    return spec, siteconfig.backend_name(spec, backend_of(args)), args
