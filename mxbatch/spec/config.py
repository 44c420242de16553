"""Site defaults and named profiles: ``~/.config/mxbatch/config.yaml``.

The file (``$MXBATCH_CONFIG``, else ``$XDG_CONFIG_HOME/mxbatch/config.yaml``, else
``~/.config/mxbatch/config.yaml``; ``MXBATCH_CONFIG=`` empty: no file)::

    default_profile: campus            # used when no --profile is given
    defaults: {network: {ports: 9000-9999}}      # under every profile
    profiles:
      campus:
        backend: sge
        rendezvous: {dir: /shared/$USER/mxbatch}
        backends: {sge: {queue: gpu.q, project: ml}}

A profile (and ``defaults``) holds job-spec keys that describe a site, not a job:
every spec key but ``name``, ``command`` and ``workdir``. The layers merge key by key,
mappings recursively, lists and scalars replaced whole; precedence, highest first:
command-line flags > job spec > profile > ``defaults`` > built-in defaults. The
merged data is validated by ``spec`` like any spec, and every value keeps the file
and line it came from, so an error in a profile names ``config.yaml:LINE:
profiles.campus.KEY``. Each profile is validated when the file is read, whether it is
used or not. Paths (``rendezvous.dir``) expand ``~`` and ``$VAR`` of the submitting
environment and must then be absolute; an unset variable is an error only when that
profile is used (it may be set where the profile is meant for).
"""

from __future__ import annotations

import dataclasses
import os
from pathlib import Path
from typing import Any, Dict, List, Optional, Sequence, Tuple

from ..errors import SpecError, did_you_mean
from . import inputfile
from . import parse as specs
from .located import KeyPath, Locations, Origin, load_located
from .paths import CONFIG_ENV, config_path
from .schema import DEFAULT_BACKEND, JobSpec
from .typed import kind_of

#: spec keys a profile may not set: they describe one job, not a site
JOB_ONLY_KEYS = ("name", "command", "workdir")
PROFILE_KEYS = tuple(k for k in specs.SPEC_KEYS if k not in JOB_ONLY_KEYS)
CONFIG_KEYS = ("default_profile", "defaults", "profiles")
#: spec keys only a site config (a profile or ``defaults``) may set: what a site knows
#: of its shared storage, never a job's choice
SITE_ONLY_KEYS: Tuple[KeyPath, ...] = (("rendezvous", "trust_shared"),)
#: stands in for the command while a profile is validated alone
_PLACEHOLDER_COMMAND = ["mxbatch-profile-check"]


@dataclasses.dataclass(frozen=True)
class Layer:
    """One source of spec keys: ``data`` as YAML gives it, with every key's origin."""

    label: str
    data: Dict[str, Any]
    locations: Locations
    #: an error raised only when the layer is used (an unset $VAR in a path: it may be
    #: set where that profile is meant to be used)
    deferred_error: Optional[SpecError] = None
    #: the layer validated alone as a job spec (its ``backends:`` blocks still raw: the
    #: backends' registry checks them, ``registry.load_site_config``)
    alone: Optional[JobSpec] = None


@dataclasses.dataclass(frozen=True)
class SiteConfig:
    """The config file, read and validated. ``path`` None or missing: no site settings."""

    path: Optional[Path]
    default_profile: Optional[str] = None
    defaults: Optional[Layer] = None
    profiles: Dict[str, Layer] = dataclasses.field(default_factory=dict)

    def all_layers(self) -> List[Layer]:
        """``defaults`` and every profile, used or not."""
        return ([self.defaults] if self.defaults is not None else []) + list(
            self.profiles.values())

    def profile_name(self, requested: Optional[str]) -> Optional[str]:
        """The profile in use: ``requested`` (``--profile``) or ``default_profile``."""
        return requested if requested is not None else self.default_profile

    def layers(self, requested: Optional[str]) -> List[Layer]:
        """``defaults`` then the profile in use (lowest precedence first); a usage error
        (exit 2) naming the profiles there are when ``requested`` is not one."""
        name = self.profile_name(requested)
        layers = [self.defaults] if self.defaults is not None else []
        if name is not None and name not in self.profiles:
            where = (f"in {self.path}" if self.path is not None and self.path.is_file()
                     else f"(no config file at {self.path})" if self.path is not None
                     else f"(no config file: {CONFIG_ENV} is set empty)")
            hint = did_you_mean(name, list(self.profiles), "profiles: " + (
                ", ".join(sorted(self.profiles)) or "none"), cutoff=0.5)
            raise SpecError(f"no profile {name!r} {where}", key="--profile", hint=hint)
        if name is not None:
            layers.append(self.profiles[name])
        for layer in layers:
            if layer.deferred_error is not None:
                raise layer.deferred_error
        return layers


def load_config(path: Optional[Path] = None) -> SiteConfig:
    """Read and validate the config file (``config_path()`` unless ``path``); an empty
    ``SiteConfig`` when there is none. ``SpecError`` (file:line:key) when it is wrong;
    an explicitly named (``MXBATCH_CONFIG``) file that does not exist is an error too."""
    path = config_path() if path is None else path
    if path is None:
        return SiteConfig(path=None)
    text = inputfile.read_text(path, "the config file", missing_ok=True)
    if text is None:
        if os.environ.get(CONFIG_ENV):
            raise SpecError(f"no such config file ({CONFIG_ENV}={os.environ[CONFIG_ENV]})",
                            path=path)
        return SiteConfig(path=path)
    data, locations = load_located(text, path)
    if data is None:
        return SiteConfig(path=path)
    if not isinstance(data, dict):
        raise locations.error((), f"the config file must be a mapping, got {kind_of(data)}")
    _reject_unknown(data, (), CONFIG_KEYS, locations)
    defaults = None
    if data.get("defaults") is not None:
        defaults = _layer(data["defaults"], ("defaults",), "defaults", locations)
    profiles: Dict[str, Layer] = {}
    raw_profiles = data.get("profiles") or {}
    if not isinstance(raw_profiles, dict):
        raise locations.error(("profiles",), "profiles must be a mapping of name to "
                              f"settings, got {kind_of(raw_profiles)}")
    for name, value in raw_profiles.items():
        profiles[name] = _layer(value, ("profiles", name), f"profile {name}", locations)
    default_profile = data.get("default_profile")
    if default_profile is not None and default_profile not in profiles:
        raise locations.error(("default_profile",), f"no profile {default_profile!r}",
                              "profiles: " + (", ".join(profiles) or "none"))
    return SiteConfig(path=path, default_profile=default_profile, defaults=defaults,
                      profiles=profiles)


def _reject_unknown(data: Dict[str, Any], key_path: KeyPath, known: Sequence[str],
                    locations: Locations, job_only: Sequence[str] = ()) -> None:
    for key in data:
        if key in known:
            continue
        if key in job_only:
            raise locations.error(key_path + (key,), "a profile cannot set this key",
                                  "it describes one job: set it in the job spec")
        # a profile's (or the defaults') key is a spec's: pointed to where it belongs
        hint = (specs.unknown_key_hint((), key, known, data[key]) if key_path
                else did_you_mean(key, known, "valid keys: " + ", ".join(known)))
        raise locations.error(key_path + (key,), "unknown key", hint)


def _layer(value: Any, key_path: KeyPath, label: str, locations: Locations) -> Layer:
    """One profile (or ``defaults``): checked, paths expanded, and validated as a spec."""
    if value is None:
        value = {}
    if not isinstance(value, dict):
        raise locations.error(key_path, f"a profile must be a mapping, got {kind_of(value)}")
    _reject_unknown(value, key_path, PROFILE_KEYS, locations, JOB_ONLY_KEYS)
    deferred = None
    try:
        data = _expanded(value, key_path, locations)
    except _UnsetVariable as unset:
        deferred = unset.error
        data = dict(value, rendezvous={k: v for k, v in value["rendezvous"].items()
                                       if k != "dir"})
    layer_locations = locations.subtree(key_path, label)
    alone = specs.from_mapping(dict(data, command=_PLACEHOLDER_COMMAND), base_dir=Path.cwd(),
                               locations=layer_locations, source=locations.path)
    return Layer(label=label, data=data, locations=layer_locations, deferred_error=deferred,
                 alone=alone)


class _UnsetVariable(Exception):
    def __init__(self, error: SpecError) -> None:
        super().__init__(str(error))
        self.error = error


def _expanded(data: Dict[str, Any], key_path: KeyPath, locations: Locations) -> Dict[str, Any]:
    """``rendezvous.dir`` with ``~``/``$VAR`` expanded; it must then be absolute."""
    rendezvous = data.get("rendezvous")
    if not isinstance(rendezvous, dict) or not isinstance(rendezvous.get("dir"), str):
        return data
    where = key_path + ("rendezvous", "dir")
    try:
        path = specs.expand_path(rendezvous["dir"])
    except ValueError as exc:
        raise _UnsetVariable(locations.error(where, str(exc))) from None
    if not os.path.isabs(path):
        raise locations.error(where, f"must be an absolute path in the config file, got "
                                     f"{path!r}")
    return dict(data, rendezvous=dict(rendezvous, dir=path))


# --------------------------------------------------------------------------- merging


def merge(layers: Sequence[Layer], root: Optional[Origin] = None) -> Tuple[Dict[str, Any],
                                                                            Locations]:
    """The layers merged (later ones win; mappings merge key by key, anything else is
    replaced whole), with each key's origin taken from the layer that supplied it."""
    data: Dict[str, Any] = {}
    locations = Locations(None)
    for layer in layers:
        _merge_into(data, layer.data, (), layer.locations, locations)
    if root is not None:
        locations.set_origin((), root)
    return data, locations


def _merge_into(target: Dict[str, Any], upper: Dict[str, Any], key_path: KeyPath,
                source: Locations, locations: Locations) -> None:
    for key, value in upper.items():
        path = key_path + (key,)
        if isinstance(value, dict) and isinstance(target.get(key), dict):
            target[key] = dict(target[key])
        elif isinstance(value, dict):
            target[key] = {}
            _forget(locations, path)
        else:
            target[key] = value
            _forget(locations, path)
            _copy_origins(source, locations, path)
            continue
        origin = source.origin(path, exact=True)
        if origin is not None:
            locations.set_origin(path, origin)
        _merge_into(target[key], value, path, source, locations)


def _copy_origins(source: Locations, target: Locations, key_path: KeyPath) -> None:
    """The origin of ``key_path`` and of everything under it (list items)."""
    for path, origin in source.items():
        if path[:len(key_path)] == key_path:
            target.set_origin(path, origin)


def _forget(locations: Locations, key_path: KeyPath) -> None:
    locations.remove_under(key_path)


# --------------------------------------------------------------------------- jobs


def _reject_site_only(data: Any, locations: Locations) -> None:
    """A ``SpecError`` at the first ``SITE_ONLY_KEYS`` key a job spec sets."""
    for key_path in SITE_ONLY_KEYS:
        section = data
        for key in key_path[:-1]:
            section = section.get(key) if isinstance(section, dict) else None
        if isinstance(section, dict) and key_path[-1] in section:
            raise locations.error(key_path, "only the site config may set this key",
                                  "it says what a site's shared storage is: set it in "
                                  "defaults or a profile of the config file")


#: the label of the caller's overrides (``mxbatch.submit(..., overrides=...)``)
OVERRIDES = "overrides"


def load_job(spec_file: Path, *, profile: Optional[str] = None,
             site: Optional[SiteConfig] = None,
             overrides: Optional[Dict[str, Any]] = None) -> JobSpec:
    """The job spec at ``spec_file`` over the site's defaults and profile (validated);
    ``overrides``: spec keys (nested mappings) over the file's."""
    spec_file = Path(spec_file)
    text = inputfile.read_text(spec_file, "the job spec") or ""
    return job_from_text(text, spec_file, base_dir=spec_file.resolve().parent,
                         default_name=spec_file.stem, source=spec_file, profile=profile,
                         site=site, overrides=overrides)


def job_from_text(text: str, origin: Path, *, base_dir: Path, default_name: str,
                  source: Optional[Path] = None, profile: Optional[str] = None,
                  site: Optional[SiteConfig] = None,
                  overrides: Optional[Dict[str, Any]] = None) -> JobSpec:
    """A job spec's YAML ``text`` over the site's layers, ``overrides`` over it. Errors
    name ``origin`` (the file, or ``<string>``) and the line; ``source``: the spec file
    (None for text that no file holds); relative paths resolve against ``base_dir``."""
    data, locations = load_located(text, origin)
    _reject_site_only(data, locations)
    layers = (site or load_config()).layers(profile)
    upper = _overrides_layer(overrides)
    if not (layers or upper) or not isinstance(data, dict):  # a non-mapping: fails in specs
        return specs.from_mapping(data, base_dir=base_dir, default_name=default_name,
                                  locations=locations, source=source)
    merged, merged_locations = merge(layers + [Layer(str(origin), data, locations)] + upper,
                                     root=locations.origin((), exact=True))
    return specs.from_mapping(merged, base_dir=base_dir, default_name=default_name,
                              locations=merged_locations, source=source)


def _overrides_layer(overrides: Optional[Dict[str, Any]]) -> List[Layer]:
    """The caller's overrides as the top layer (none when there are none); a site-only
    key among them is refused as in a spec."""
    if not overrides:
        return []
    locations = Locations(None)
    _reject_site_only(overrides, locations)
    return [Layer(OVERRIDES, dict(overrides), locations)]


def job_from_mapping(data: Dict[str, Any], *, base_dir: Path, default_name: str,
                     profile: Optional[str] = None,
                     site: Optional[SiteConfig] = None,
                     overrides: Optional[Dict[str, Any]] = None) -> JobSpec:
    """A job built from command-line flags (``launch``) or a mapping (the Python API)
    over the site's layers; ``overrides``: spec keys over ``data``."""
    layers = (site or load_config()).layers(profile)
    flags = Layer("command line", data, Locations(None))
    merged, locations = merge(layers + [flags] + _overrides_layer(overrides))
    return specs.from_mapping(merged, base_dir=base_dir, default_name=default_name,
                              locations=locations)


def site_job(spec_file: Optional[Path], *, profile: Optional[str], site: SiteConfig,
             command: Sequence[str], default_name: str) -> JobSpec:
    """The job at ``spec_file`` over the site's layers; without a file, what the layers
    give a job running ``command`` (``config show`` and ``doctor`` without a SPEC)."""
    if spec_file is not None:
        return load_job(spec_file, profile=profile, site=site)
    return job_from_mapping({"command": list(command)}, base_dir=Path.cwd(),
                            default_name=default_name, profile=profile, site=site)


def backend_name(spec: JobSpec, flag: Optional[str]) -> str:
    """The backend to use: ``--backend`` > the spec's (or profile's) ``backend:`` >
    ``local``."""
    return flag or spec.backend or DEFAULT_BACKEND
