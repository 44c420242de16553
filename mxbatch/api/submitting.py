"""Submitting from Python: ``submit`` (a spec file, YAML text or a mapping) and
``launch`` (a command, as ``mxbatch launch`` takes it), each returning a ``Job``
without waiting for it; ``load_spec`` is the spec with the caller's settings, which
``mxbatch submit`` and ``render`` use too.

The flow is the CLI's (``jobs.submit``: spec -> backend -> plan -> checks -> render ->
submit -> record): everything that can fail on bad input fails before anything is
created, with the CLI's typed errors (a ``SpecError`` carries ``path``, ``line`` and
``key``).
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import TYPE_CHECKING, Any, Dict, Mapping, Optional, Sequence, Union

from ..errors import SpecError
from ..jobs import submit as jobs
from ..spec import config as siteconfig
from ..spec import parse as specs
from ..spec.schema import JobSpec

if TYPE_CHECKING:  # pragma: no cover
    from .job import Job

#: what ``submit`` takes as a spec: a file's path, YAML text, plain data or a parsed spec
SpecSource = Union[str, "os.PathLike[str]", Mapping[str, Any], JobSpec]
#: how errors name a spec given as YAML text
TEXT_ORIGIN = Path("<string>")


def is_yaml_text(text: str) -> bool:
    """Whether a ``str`` spec is YAML rather than a path: it has a line break, or a
    ``key: value`` or ``{`` of YAML and names no existing file."""
    if "\n" in text:
        return True
    looks = ": " in text or text.lstrip().startswith("{") or text.rstrip().endswith(":")
    return looks and not os.path.exists(text)


def nested(overrides: Optional[Mapping[str, Any]]) -> Dict[str, Any]:
    """``overrides`` with dotted top-level keys (``{"rendezvous.grace": "10s"}``) as the
    nested mappings a spec writes (``{"rendezvous": {"grace": "10s"}}``); mappings of
    the same key merge. Keys inside values are left alone (an ``env`` name)."""
    result: Dict[str, Any] = {}
    for key, value in (overrides or {}).items():
        *parents, leaf = str(key).split(".")
        branch = {leaf: _plain(value)}
        for part in reversed(parents):
            branch = {part: branch}
        result = _merged(result, branch)
    return result


def _plain(value: Any) -> Any:
    """Mappings as dicts, all the way down (what YAML would give)."""
    if isinstance(value, Mapping):
        return {k: _plain(v) for k, v in value.items()}
    return value


def _merged(lower: Dict[str, Any], upper: Dict[str, Any]) -> Dict[str, Any]:
    out = dict(lower)
    for key, value in upper.items():
        out[key] = (_merged(out[key], value) if isinstance(value, dict)
                    and isinstance(out.get(key), dict) else value)
    return out


def load_spec(spec: SpecSource, *, overrides: Optional[Mapping[str, Any]] = None,
              env: Optional[Mapping[str, str]] = None, args: Sequence[str] = (),
              name: Optional[str] = None, profile: Optional[str] = None) -> JobSpec:
    """The validated job spec of ``spec`` (see ``submit``) over the site config's
    defaults and ``profile``, with ``overrides`` (spec keys, nested or dotted) over it,
    the job ``name``, ``env`` for every role, and ``args`` appended to every role's
    command (``mxbatch submit SPEC --name N -e K=V -- ARGS``)."""
    from ..backends.registry import load_site_config

    upper = nested(overrides)
    if isinstance(spec, JobSpec):
        if upper:
            raise SpecError("overrides apply to a spec file, YAML text or a mapping, not "
                            "to a parsed JobSpec", key="overrides")
        job_spec = spec
    elif isinstance(spec, Mapping):
        job_spec = siteconfig.job_from_mapping(nested(spec), base_dir=Path.cwd(),
                                               default_name="job", profile=profile,
                                               site=load_site_config(), overrides=upper)
    elif isinstance(spec, str) and is_yaml_text(spec):
        job_spec = siteconfig.job_from_text(spec, TEXT_ORIGIN, base_dir=Path.cwd(),
                                            default_name="job", profile=profile,
                                            site=load_site_config(), overrides=upper)
    else:
        job_spec = siteconfig.load_job(Path(os.fspath(spec)), profile=profile,
                                       site=load_site_config(), overrides=upper)
    return specs.with_overrides(job_spec, name=name, env=dict(env) if env else None,
                                extra_args=tuple(args))


def submit(spec: SpecSource, backend: Optional[str] = None,
           overrides: Optional[Mapping[str, Any]] = None,
           env: Optional[Mapping[str, str]] = None, args: Sequence[str] = (), *,
           name: Optional[str] = None, profile: Optional[str] = None,
           workers: Optional[int] = None, servers: Optional[int] = None,
           max_restarts: Optional[int] = None) -> Job:
    """Submit a job and return it at once (``Job.wait()`` follows it).

    ``spec``: a spec file's path (``str`` or ``Path``), YAML text (a ``str`` with a line
    break or a ``key: value``), a mapping of spec keys (relative paths against the
    current directory), or a parsed ``JobSpec``. ``backend``: over the spec's (and the
    profile's; default ``local``); ``overrides``: spec keys over the spec's, nested or
    dotted (``{"roles.worker.count": 4}``); ``env``: variables for every role; ``args``:
    appended to every role's command; ``workers``/``servers``/``max_restarts``: as
    ``-n``/``-s``/``--max-restarts``. A bad spec raises ``SpecError`` (``path``,
    ``line``, ``key``) and creates nothing."""
    job_spec = load_spec(spec, overrides=overrides, env=env, args=args, name=name,
                         profile=profile)
    chosen, request = jobs.prepare(job_spec, siteconfig.backend_name(job_spec, backend),
                                   workers=workers, servers=servers,
                                   max_restarts=max_restarts)
    from .job import Job  # not before: ``mxbatch submit`` loads this module too

    return Job.of_record(jobs.submit(chosen, request))


def launch(command: Union[str, Sequence[str]], workers: int = 1,
           servers: Optional[int] = None, backend: Optional[str] = None,
           **options: Any) -> Job:
    """Submit ``command`` for every role (a string, split as a shell would, or a list),
    with ``workers`` workers and ``servers`` servers (default: as many as workers), as
    ``mxbatch launch`` does, and return the job at once. ``options``: any other spec
    keys (``name="sweep"``, ``env={...}``, ``rendezvous={"grace": "10s"}``,
    ``resources={"cpus": 2}``)."""
    roles: Dict[str, Any] = {"worker": {"count": workers}}
    if servers is not None:
        roles["server"] = {"count": servers}
    data = _merged(nested(options), {"command": command if isinstance(command, str)
                                     else list(command), "roles": roles})
    return submit(data, backend=backend)
