"""The job spec as frozen dataclasses: what ``spec.load`` returns. No parsing here.

Every value is already validated and typed; ``JobSpec.error`` cites file:line
for a key, for checks made later (by a backend, for instance).
"""

from __future__ import annotations

import dataclasses
import enum
from pathlib import Path
from typing import Any, Mapping, Optional, Tuple

from .errors import SpecError
from .located import KeyPath, Locations
from .records import mxbatch_home
from .runtime.roles import Role

DEFAULT_BACKEND = "local"


class ContainerRuntime(str, enum.Enum):
    """What runs a role's container."""

    DOCKER = "docker"
    PODMAN = "podman"
    APPTAINER = "apptainer"


@dataclasses.dataclass(frozen=True)
class Resources:
    """What one task of a role asks for. ``None`` means "the backend's default"."""

    cpus: int = 1
    memory_mib: Optional[int] = None
    gpus: int = 0
    walltime_s: Optional[float] = None


@dataclasses.dataclass(frozen=True)
class RoleSpec:
    role: Role
    count: int
    command: Tuple[str, ...]
    resources: Resources
    env: Mapping[str, str]


@dataclasses.dataclass(frozen=True)
class NetworkSpec:
    interface: Optional[str] = None
    port_low: int = 9000
    port_high: int = 9999


@dataclasses.dataclass(frozen=True)
class RendezvousSpec:
    dir: Path
    startup_timeout_s: float = 600.0
    grace_s: float = 30.0
    heartbeat_timeout_s: float = 30.0
    #: a stopped role, or a worker without CPU or output, this long fails the job
    stall_timeout_s: Optional[float] = 1800.0


@dataclasses.dataclass(frozen=True)
class ContainerSpec:
    """``container:``: run every role in this image. Which runtimes a backend can use
    is its own business (it rejects the others); ``mounts`` are ``host:container[:ro|rw]``,
    ``options`` are passed to the runtime as the backend documents."""

    runtime: ContainerRuntime
    image: str
    mounts: Tuple[str, ...] = ()
    options: Tuple[str, ...] = ()


@dataclasses.dataclass(frozen=True)
class JobSpec:
    """A validated job. ``backend_options`` holds the parsed ``backends.<name>`` blocks
    (each its backend's options dataclass); ``locations`` lets later checks cite
    file:line for a key."""

    name: str
    workdir: Path
    env: Mapping[str, str]
    inherit_env: bool
    roles: Mapping[Role, RoleSpec]
    network: NetworkSpec
    rendezvous: RendezvousSpec
    backend_options: Mapping[str, Any] = dataclasses.field(default_factory=dict)
    source: Optional[Path] = None
    container: Optional[ContainerSpec] = None
    core_dumps: bool = False
    locations: Locations = dataclasses.field(
        default_factory=lambda: Locations(None), compare=False, repr=False)
    backend: Optional[str] = None

    def role(self, role: Role) -> RoleSpec:
        return self.roles[role]

    def error(self, key_path: KeyPath, problem: str, hint: Optional[str] = None) -> SpecError:
        """A ``SpecError`` at ``key_path`` of this spec's file (for later checks)."""
        return self.locations.error(key_path, problem, hint)


def default_runs_dir() -> Path:
    """``$MXBATCH_HOME/runs`` (``~/.mxbatch/runs``): shared storage on most clusters."""
    return mxbatch_home() / "runs"
