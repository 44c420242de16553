"""The ``mxbatch config`` commands: the site's config file and what a job would get
from it. Formatting only; the work is in ``config`` and ``effective``."""

from __future__ import annotations

from pathlib import Path
from typing import Dict, Optional

import click

from ..backends.registry import load_site_config
from ..runtime.roles import Role
from ..spec import config as siteconfig
from ..spec.located import KeyPath
from . import jsonout
from .completion import profile_names
from .effective import Setting, effective_settings, format_settings
from .params import Duration, backend_option

#: keys that belong to one job; left out when no SPEC is given
_JOB_KEYS = ("name", "workdir")


PROFILE = click.option("--profile", "-p", default=None, metavar="NAME",
                       shell_complete=profile_names,
                       help="Site profile of the config file (default: its default_profile).")
BACKEND = backend_option("the spec's or profile's backend, else local")
JSON = click.option("--json", "as_json", is_flag=True,
                    help=jsonout.OPTION_HELP)


@click.group(name="config")
def config_group() -> None:
    """The site config file: defaults and named profiles (see `config show`)."""


@config_group.command(name="path")
def config_path() -> None:
    """Print where the config file is read from ($MXBATCH_CONFIG, XDG, ~/.config)."""
    path = siteconfig.config_path()
    click.echo(str(path) if path is not None else "(none: MXBATCH_CONFIG is empty)")


@config_group.command(name="show")
@click.argument("spec_file", required=False,
                type=click.Path(dir_okay=False, path_type=Path))
@PROFILE
@BACKEND
@click.option("-n", "--workers", type=int, default=None, help="Number of workers.")
@click.option("-s", "--servers", type=int, default=None, help="Number of servers.")
@JSON
def config_show(spec_file: Optional[Path], profile: Optional[str], backend: Optional[str],
                workers: Optional[int], servers: Optional[int], as_json: bool) -> None:
    """Print the merged settings (flags > SPEC_FILE > profile > defaults > built-in),
    each with the file and line, or flag, it came from."""
    from ..spec.parse import SERVERS_FLAG, WORKERS_FLAG, with_counts

    site = load_site_config()
    spec = siteconfig.site_job(spec_file, profile=profile, site=site, command=["COMMAND"],
                               default_name="job")
    spec = with_counts(spec, workers=workers, servers=servers)
    flags: Dict[KeyPath, str] = {}
    if backend:
        flags[("backend",)] = "--backend"
    if workers is not None:
        flags[("roles", Role.WORKER.value, "count")] = WORKERS_FLAG
    if servers is not None:
        flags[("roles", Role.SERVER.value, "count")] = SERVERS_FLAG
    settings = effective_settings(spec, siteconfig.backend_name(spec, backend), flags)
    if spec_file is None:
        settings = [s for s in settings if not _job_only(s)]
    used = site.profile_name(profile)
    path = str(site.path) if site.path is not None else None
    if as_json:
        click.echo(jsonout.dumps(jsonout.document(
            {"config_file": path, "config_exists": bool(site.path and site.path.is_file()),
             "profile": used, "spec": str(spec_file) if spec_file else None,
             "settings": [s.to_dict() for s in settings]})))
        return
    exists = site.path is not None and site.path.is_file()
    click.echo(f"# config file: {path or '(none)'}{'' if exists else ' (not present)'}")
    click.echo(f"# profile: {used or '(none)'}")
    click.echo("# precedence: command line > job spec > profile > defaults > built-in")
    click.echo(format_settings(settings), nl=False)


def _job_only(setting: Setting) -> bool:
    parts = setting.key.split(".")
    return parts[0] in _JOB_KEYS or (parts[0] == "roles" and parts[-1] == "command")


@click.command(name="doctor")
@click.argument("spec_file", required=False,
                type=click.Path(dir_okay=False, path_type=Path))
@BACKEND
@PROFILE
@click.option("--probe/--no-probe", default=True, show_default=True,
              help="Run a tiny probe job through the backend (proves the compute nodes see "
                   "the rendezvous directory and run the runtime).")
@click.option("--probe-timeout", type=Duration(), default="3m", show_default=True,
              help="Cancel the probe job when it has not ended by then (90s, 3m...).")
@JSON
def doctor_command(spec_file: Optional[Path], backend: Optional[str], profile: Optional[str],
                   probe: bool, probe_timeout: float, as_json: bool) -> None:
    """Check that this site can run jobs: Python, MXNet, the rendezvous directory, the
    backend's tools, the network, and a probe job. Exit 0 when every check passes."""
    import sys

    from ..doctor.runner import format_checks, run_checks
    from ..jobs import submit as jobs

    site = load_site_config()
    spec = siteconfig.site_job(spec_file, profile=profile, site=site, command=["python3"],
                               default_name="doctor")
    name = siteconfig.backend_name(spec, backend)
    target = jobs.backend_for_spec(spec, name)
    if not as_json:
        click.echo(f"mxbatch doctor: backend {name}, profile "
                   f"{site.profile_name(profile) or '(none)'}, rendezvous.dir "
                   f"{spec.rendezvous.dir}", err=True)
    checks = run_checks(spec, name, target, probe=probe, probe_timeout=probe_timeout,
                        with_script=spec_file is not None)
    ok = all(check.ok for check in checks)
    if as_json:
        click.echo(jsonout.dumps(jsonout.document(
            {"ok": ok, "backend": name, "profile": site.profile_name(profile),
             "rendezvous_dir": str(spec.rendezvous.dir),
             "checks": [check.to_dict() for check in checks]})))
    else:
        click.echo(format_checks(checks), nl=False)
    sys.exit(0 if ok else 1)
