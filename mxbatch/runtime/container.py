"""A role in a container (docker, podman, apptainer): its command line, its environment
file, its processes as the host sees them, and its removal.

The supervisor stays on the host; only the role runs in the container:

- docker/podman: ``<runtime> run --rm --init --network host --name <name> --env-file
  <file> -e DMLC_PS_ROOT_URI -e DMLC_PS_ROOT_PORT -e DMLC_NODE_HOST -v <workdir>:<workdir>
  -v <hook dir>:<hook dir>:ro [mounts] -w <workdir> [limits] [GPUs] [options] <image>
  <argv>``; limits: docker ``--ulimit core=0`` unless the spec allows core dumps,
  podman ``--ulimit host`` (the client's limits, RLIMIT_CORE included). The host's
  network, because ps-lite advertises addresses others must reach; ``--init``,
  because Python as PID 1 ignores SIGTERM; the name ``mxbatch-<job-id>-<role>-<rank>``
  (``container_name``), so the container can be removed by name whatever happened to
  the client; the exception hook's directory (``<run dir>/pyhook``, on PYTHONPATH) at
  the same path, read-only, and alone: the run directory is 0700, and an image's own
  user (not the submitting uid) could not read the hook through it; Python skips an
  unreadable PYTHONPATH entry without a word, and an uncaught exception then hung the
  job in MXNet's exit barrier (measured with a non-root image).
- apptainer (or singularity): ``apptainer exec --cleanenv --env-file <file> --bind
  <workdir> --bind <run dir>:<run dir>:ro [binds] --pwd <workdir> [--nv] [options]
  <image> <argv>``; no daemon, so the role's processes are the client's own children.

The role's environment goes through a file (mode 0600, ``RunLayout.container_env_file``),
never through argv: what ``role_environment`` gives, except that the inherited part
leaves out what describes the host rather than the job (``HOST_ONLY``: PATH, HOME,
LD_LIBRARY_PATH...; the image has its own). Only the three rendezvous variables, known
when the role starts, are passed by name from the client's environment (``-e NAME``;
``APPTAINERENV_NAME`` for apptainer), so the command line is the same at run time as
``mxbatch render`` shows it. The file is removed once the container runs (the runtime
has read it) and when the task ends.

GPUs follow ``container.gpus``: ``all``; ``none``; ``auto`` (default): the role's
``gpus`` resource, the devices in ``CUDA_VISIBLE_DEVICES`` when the batch system set it
(docker ``--gpus "device=..."``, podman CDI ``--device nvidia.com/gpu=...``; the
container sees them renumbered from 0, so the host's ``CUDA_VISIBLE_DEVICES`` is not
passed in), else the first N (``--gpus N``); apptainer ``--nv`` (all devices visible,
``CUDA_VISIBLE_DEVICES`` kept).

Killing a ``docker run``/``podman run`` client leaves its container running, so the
container is removed by name (``rm -f``; podman ``rm -f -t 0``) whenever the client did
not end by itself: killed by a signal, SIGKILL after the grace period, the runtime's
own failure (exit codes 125-127), or the supervisor ending early. ``RoleContainer`` does
this without blocking the agent's loop (a child process it polls), and learns the
container's main process (``State.Pid`` from ``inspect``) so that stall detection
measures the processes in the container rather than the idle client.
"""

import enum
import os
import re
import shlex
import signal
import subprocess
import time
from dataclasses import dataclass, field
from typing import Any, Callable, Dict, List, Mapping, NamedTuple, Optional, Sequence, Tuple

from . import osbytes
from .environ import visible_devices
from .files import atomic_write
from .layout import RunLayout
from .wire import CUDA_VISIBLE_DEVICES, JOB_ID, RENDEZVOUS_VARIABLES


class ContainerRuntime(str, enum.Enum):
    """What runs a role's container."""

    DOCKER = "docker"
    PODMAN = "podman"
    APPTAINER = "apptainer"


class GpuMode(str, enum.Enum):
    """``container.gpus``: which GPUs a role's container gets."""

    AUTO = "auto"  # the role's ``gpus`` resource (none when 0)
    NONE = "none"
    ALL = "all"


#: the variables a role gets when it starts, passed by name from the client's environment

#: inherited variables that describe the host, not the job: the image has its own
HOST_ONLY = ("PATH", "HOME", "HOSTNAME", "PWD", "OLDPWD", "SHLVL", "_", "SHELL", "MAIL",
             "TMPDIR", "TMP", "TEMP", "LD_LIBRARY_PATH", "LD_PRELOAD", "PYTHONHOME",
             "DOCKER_HOST", "CONTAINER_HOST", "CONTAINERS_CONF", "CONTAINERS_STORAGE_CONF")
#: apptainer's prefix for variables it passes into the container despite --cleanenv
APPTAINER_ENV_PREFIX = "APPTAINERENV_"
#: the exit codes docker and podman give when they themselves failed, when the command
#: cannot be started, when it is not found: the container may be left (podman leaves
#: it "Created" when runc fails, --rm notwithstanding)
RUNTIME_FAILED = (125, 126, 127)
#: options that would break supervision: a detached, renamed, tty or other-network run
_RUN_CONFLICTS = ("-d", "--detach", "--name", "--network", "--net", "-t", "--tty", "-w",
                  "--workdir")
CONFLICTING_OPTIONS = {
    ContainerRuntime.DOCKER: _RUN_CONFLICTS,
    ContainerRuntime.PODMAN: _RUN_CONFLICTS,
    ContainerRuntime.APPTAINER: ("--pwd",),
}
_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*\Z")
#: how long removing a container may take (``rm -f``: well under a second here)
REMOVE_TIMEOUT_S = 30.0
#: waiting for the container's main process: first look after, then at most every
INSPECT_FIRST_S = 1.0
INSPECT_CAP_S = 5.0
INSPECT_TIMEOUT_S = 20.0


@dataclass(frozen=True)
class ContainerPlan:
    """``container:`` as the runtime needs it (part of ``plan.json``)."""

    runtime: ContainerRuntime
    image: str
    mounts: List[str] = field(default_factory=list)
    options: List[str] = field(default_factory=list)
    gpus: GpuMode = GpuMode.AUTO

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> "ContainerPlan":
        return cls(runtime=ContainerRuntime(data["runtime"]), image=data["image"],
                   mounts=list(data.get("mounts", ())), options=list(data.get("options", ())),
                   gpus=GpuMode(data.get("gpus", GpuMode.AUTO.value)))


def container_name(job_id: str, role: str, rank: int) -> str:
    """``mxbatch-<job-id>-<role>-<rank>``, with anything docker refuses in a name as ``-``."""
    return re.sub(r"[^A-Za-z0-9_.-]", "-", "mxbatch-%s-%s-%d" % (job_id, role, rank))


def binary_candidates(runtime: ContainerRuntime) -> Tuple[str, ...]:
    """The commands that run ``runtime``, preferred first."""
    if runtime is ContainerRuntime.APPTAINER:
        return ("apptainer", "singularity")
    return (runtime.value,)


def find_binary(runtime: ContainerRuntime, path: Optional[str] = None) -> Optional[str]:
    """The first of ``binary_candidates`` on ``path`` (default $PATH), or None."""
    import shutil  # here: with bz2 and lzma, 3 ms a job without a container need not pay

    for name in binary_candidates(runtime):
        found = shutil.which(name, path=path)
        if found:
            return found
    return None


def gpu_options(runtime: ContainerRuntime, mode: GpuMode, gpus: int,
                devices: Optional[Sequence[str]] = None) -> List[str]:
    """The runtime's GPU options for a role that asked for ``gpus`` (``devices``: the ids
    the batch system gave it, see ``visible_devices``)."""
    if mode is GpuMode.NONE or (mode is GpuMode.AUTO and gpus <= 0):
        return []
    if runtime is ContainerRuntime.APPTAINER:
        return ["--nv"]
    if mode is GpuMode.ALL:
        return (["--gpus", "all"] if runtime is ContainerRuntime.DOCKER
                else ["--device", "nvidia.com/gpu=all"])
    if runtime is ContainerRuntime.DOCKER:
        # docker reads the value as CSV: a list of devices needs the double quotes
        return ["--gpus", '"device=%s"' % ",".join(devices) if devices else str(gpus)]
    ids = list(devices) if devices else [str(i) for i in range(gpus)]
    return [arg for i in ids for arg in ("--device", "nvidia.com/gpu=%s" % i)]


def _mount_parts(mount: str) -> Tuple[str, str, Optional[str]]:
    parts = mount.split(":")
    return parts[0], parts[1], parts[2] if len(parts) > 2 else None


def run_argv(container: ContainerPlan, job_id: str, workdir: str, layout: RunLayout,
             role: str, rank: int, argv: Sequence[str], gpus: int = 0,
             core_dumps: bool = False, binary: Optional[str] = None,
             devices: Optional[Sequence[str]] = None,
             by_hand: Optional[Sequence[str]] = None) -> List[str]:
    """The command that runs ``argv`` of task ``role[rank]`` in its container
    (see the module docstring). ``binary``: the runtime's command (default its name).
    ``by_hand``: the manual launch (``render --format shell``), with no run directory:
    no env file and no hook mount; these names pass from the client's environment
    instead (``-e NAME``; apptainer passes the client's environment as it is)."""
    env_file = layout.container_env_file(role, rank)
    run_dir = layout.root
    gpu = gpu_options(container.runtime, container.gpus, gpus, devices)
    if container.runtime is ContainerRuntime.APPTAINER:
        command = [binary or "apptainer", "exec", "--cleanenv", "--env-file", env_file,
                   "--bind", workdir, "--bind", "%s:%s:ro" % (run_dir, run_dir)]
        if by_hand is not None:
            command = [binary or "apptainer", "exec", "--bind", workdir]
        for mount in container.mounts:
            command += ["--bind", mount]
        return command + ["--pwd", workdir] + gpu + list(container.options) + \
            [container.image] + list(argv)
    command = [binary or container.runtime.value, "run", "--rm", "--init", "--network", "host",
               "--name", container_name(job_id, role, rank)]
    if by_hand is not None:
        for name in by_hand:
            command += ["-e", name]
        command += ["-v", "%s:%s" % (workdir, workdir)]
    else:
        command += ["--env-file", env_file]
        for name in RENDEZVOUS_VARIABLES:
            command += ["-e", name]
        hook_dir = layout.pyhook_dir
        command += ["-v", "%s:%s" % (workdir, workdir),
                    "-v", "%s:%s:ro" % (hook_dir, hook_dir)]
    for mount in container.mounts:
        command += ["-v", mount]
    command += ["-w", workdir]
    if container.runtime is ContainerRuntime.PODMAN:
        # the client's limits, as a bare role gets them (RLIMIT_CORE 0 unless core_dumps);
        # any other --ulimit replaces podman's configured defaults, and then its
        # nofile=1048576 fails without CAP_SYS_RESOURCE
        command += ["--ulimit", "host"]
    elif not core_dumps:
        command += ["--ulimit", "core=0"]
    return command + gpu + list(container.options) + [container.image] + list(argv)


def client_environment(container: ContainerPlan, environ: Mapping[str, str],
                       rendezvous_env: Mapping[str, str], job_id: str) -> Dict[str, str]:
    """The environment of the runtime's client: this process's (DOCKER_HOST and the
    like), the job id (so ``mxbatch cancel`` finds the client), and the rendezvous
    variables the command line passes on by name."""
    env = dict(environ)
    env[JOB_ID] = job_id
    prefix = APPTAINER_ENV_PREFIX if container.runtime is ContainerRuntime.APPTAINER else ""
    for name, value in rendezvous_env.items():
        env[prefix + name] = value
    return env


def container_inherited(environ: Mapping[str, str], container: ContainerPlan,
                        gpu_devices_given: bool) -> Dict[str, str]:
    """The inherited environment a role gets in its container: ``environ`` less
    ``HOST_ONLY``, less ``CUDA_VISIBLE_DEVICES`` when docker/podman got the devices
    themselves (the container numbers them from 0)."""
    dropped = set(HOST_ONLY)
    if gpu_devices_given and container.runtime is not ContainerRuntime.APPTAINER:
        dropped.add(CUDA_VISIBLE_DEVICES)
    return {k: v for k, v in environ.items() if k not in dropped}


def env_file_text(runtime: ContainerRuntime, env: Mapping[str, str]) -> Tuple[str, List[str]]:
    """The environment file of ``env`` for ``runtime``, and the names left out.

    docker/podman read ``NAME=value`` lines literally (no quoting, one line each), so a
    value with a newline cannot pass (exported bash functions, mostly); apptainer's file
    is shell syntax (values quoted). Names that are no identifiers are left out too."""
    lines, skipped = [], []
    for name in sorted(env):
        value = env[name]
        if not _NAME.match(name) or (runtime is not ContainerRuntime.APPTAINER
                                     and ("\n" in value or "\r" in value)):
            skipped.append(name)
            continue
        if runtime is ContainerRuntime.APPTAINER:
            lines.append("%s=%s" % (name, shlex.quote(value)))
        else:
            lines.append("%s=%s" % (name, value))
    return "".join(line + "\n" for line in lines), skipped


def write_private(path: str, text: str) -> None:
    """Write ``text`` to ``path`` with mode 0600 (through a temporary file and rename)."""
    os.makedirs(os.path.dirname(path), mode=0o700, exist_ok=True)
    atomic_write(path, osbytes.encode(text), 0o600)  # the values' bytes as the OS gave them


def remove_argv(runtime: ContainerRuntime, names: Sequence[str],
                binary: Optional[str] = None) -> List[str]:
    """The command that removes the named containers at once, running or not (none for
    apptainer, whose containers are the client's processes)."""
    if runtime is ContainerRuntime.APPTAINER or not names:
        return []
    stop_now = ["-t", "0"] if runtime is ContainerRuntime.PODMAN else []
    return [binary or runtime.value, "rm", "-f"] + stop_now + list(names)


def inspect_pid_argv(runtime: ContainerRuntime, name: str,
                     binary: Optional[str] = None) -> List[str]:
    """The command that prints the host pid of the container's main process (0: not
    running)."""
    return [binary or runtime.value, "inspect", "--format", "{{.State.Pid}}", name]


def _child(argv: Sequence[str], env: Mapping[str, str]) -> Optional[subprocess.Popen]:
    try:
        return subprocess.Popen(list(argv), stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                                stderr=subprocess.STDOUT, env=dict(env), close_fds=True,
                                start_new_session=True)
    except OSError:
        return None


def _reap(proc: subprocess.Popen, timeout: float) -> Optional[int]:
    """Wait up to ``timeout`` for ``proc``; SIGKILL it past that. Its exit code or None."""
    try:
        return proc.wait(timeout=max(0.0, timeout))
    except subprocess.TimeoutExpired:
        try:
            os.killpg(proc.pid, signal.SIGKILL)
        except OSError:
            pass
        proc.wait()
        return None
    finally:
        if proc.stdout is not None:
            proc.stdout.close()


class Moment(enum.Enum):
    """When the supervisor asks whether a role's container must be removed by name."""

    RESTART = "restart"  # the role starts again, and the container's name is needed
    ESCALATED = "escalated"  # SIGKILL of the client after the grace period
    AGENT_ENDING = "agent ending"  # the supervisor kills what is left and exits
    FINISHED = "finished"  # the client has ended


class ContainerStart(NamedTuple):
    """How a role's container starts: the client's argv and environment, the names the
    env file could not carry (``env_file_text``), and the variables and arguments that
    were no UTF-8 (given with U+FFFD for each such byte)."""

    argv: List[str]
    env: Dict[str, str]
    skipped: List[str]
    not_utf8: List[str]


class RoleContainer:
    """The container of one task while it runs: start, main process, removal.

    Never blocks for long: ``poll`` and ``remove`` start the runtime's commands as
    child processes and look at them on later calls; only ``wait_removed`` waits
    (bounded by ``REMOVE_TIMEOUT_S``)."""

    def __init__(self, container: ContainerPlan, job_id: str, workdir: str, layout: RunLayout,
                 role: str, rank: int) -> None:
        self.plan = container
        self.job_id = job_id
        self.workdir = workdir
        self.layout = layout
        self.role = role
        self.rank = rank
        self.name = container_name(job_id, role, rank)
        self.env_file = layout.container_env_file(role, rank)
        self.binary: Optional[str] = None
        self.client_env: Dict[str, str] = {}
        #: the host pid of the container's main process (its init), once known
        self.pid: Optional[int] = None
        self._inspect: Optional[subprocess.Popen] = None
        self._inspect_started = 0.0
        self._next_inspect = 0.0
        self._inspect_wait = INSPECT_FIRST_S
        self._remove: Optional[subprocess.Popen] = None
        self._remove_started = 0.0

    @property
    def daemon(self) -> bool:
        """Whether a daemon runs the container (then the client is not the container)."""
        return self.plan.runtime is not ContainerRuntime.APPTAINER

    def prepare(self, environ: Mapping[str, str],
                role_env_of: Callable[[Mapping[str, str]], Dict[str, str]],
                rendezvous_env: Mapping[str, str], argv: Sequence[str], gpus: int,
                core_dumps: bool, mono: float) -> "ContainerStart":
        """Write the environment file and return how to start the client
        (``ContainerStart``). ``role_env_of(inherited)``: the role's environment built
        on an inherited one (``role_environment`` without the rendezvous variables).
        Values and arguments that are no UTF-8 get U+FFFD for each such byte (the
        runtimes take UTF-8 only). Raises OSError if the runtime is not installed here."""
        self.binary = find_binary(self.plan.runtime, environ.get("PATH"))
        if self.binary is None:
            raise OSError("%s is not installed on this host (not on PATH)"
                          % " or ".join(binary_candidates(self.plan.runtime)))
        devices = visible_devices(environ)
        gpu_given = bool(gpu_options(self.plan.runtime, self.plan.gpus, gpus, devices))
        env = role_env_of(container_inherited(environ, self.plan, gpu_given))
        not_utf8 = sorted(name for name, value in env.items() if osbytes.utf8(value) != value)
        not_utf8 += ["argument %d" % i for i, arg in enumerate(argv) if osbytes.utf8(arg) != arg]
        env = {name: osbytes.utf8(value) for name, value in env.items()}
        text, skipped = env_file_text(self.plan.runtime, env)
        write_private(self.env_file, text)
        command = run_argv(self.plan, self.job_id, self.workdir, self.layout, self.role,
                           self.rank, [osbytes.utf8(arg) for arg in argv], gpus=gpus,
                           core_dumps=core_dumps, binary=self.binary, devices=devices)
        self.client_env = client_environment(self.plan, environ, rendezvous_env, self.job_id)
        self.pid = None
        self._next_inspect = mono + INSPECT_FIRST_S
        self._inspect_wait = INSPECT_FIRST_S
        return ContainerStart(command, self.client_env, skipped, not_utf8)

    # ------------------------------------------------------------------ main process
    def poll(self, mono: float) -> None:
        """While the client runs: learn the container's main pid (``inspect``, in the
        background, backing off); once known the runtime has read the environment file,
        which is then removed."""
        if self.pid is not None or not self.daemon or self.binary is None:
            return
        if self._inspect is not None:
            code = self._inspect.poll()
            if code is None:
                if mono - self._inspect_started > INSPECT_TIMEOUT_S:
                    _reap(self._inspect, 0)
                    self._inspect = None
                return
            out = self._inspect.stdout.read() if self._inspect.stdout else b""
            _reap(self._inspect, 0)
            self._inspect = None
            text = out.decode(errors="replace").strip()
            if code == 0 and text.isdigit() and int(text) > 0:
                self.pid = int(text)
                self.forget_env_file()
                return
            self._inspect_wait = min(self._inspect_wait * 2, INSPECT_CAP_S)
            self._next_inspect = mono + self._inspect_wait
        elif mono >= self._next_inspect:
            self._inspect = _child(inspect_pid_argv(self.plan.runtime, self.name, self.binary),
                                   self.client_env)
            self._inspect_started = mono
            if self._inspect is None:
                self._next_inspect = mono + INSPECT_CAP_S

    def poll_due(self) -> Optional[float]:
        """When (monotonic) ``poll`` has something to do next: the next ``inspect``, or
        the end of the running one's time; None once the pid is known or never looked
        for. (The ``inspect`` child's exit wakes the agent by itself: SIGCHLD.)"""
        if self.pid is not None or not self.daemon or self.binary is None:
            return None
        if self._inspect is not None:
            return self._inspect_started + INSPECT_TIMEOUT_S
        return self._next_inspect

    def forget_env_file(self) -> None:
        try:
            os.unlink(self.env_file)
        except OSError:
            pass

    # ------------------------------------------------------------------ removal
    def removal_reason(self, moment: Moment, client_code: Optional[int], killed: bool,
                       stopping: bool) -> Optional[str]:
        """The one removal policy: why the container must be removed by name at
        ``moment`` (for the task log; "" = remove without a word), or None to leave it to
        the runtime's ``--rm``. ``client_code``: the client's exit code (None: running);
        ``killed``: the client was SIGKILLed; ``stopping``: the supervisor stopped it."""
        if moment is Moment.ESCALATED:
            return "removing container %s" % self.name
        if moment is Moment.AGENT_ENDING and client_code is None:
            return ""
        if self.needs_removal(client_code, killed):
            return ("" if killed or moment is not Moment.FINISHED
                    else "removing container %s (its client did not end by itself)" % self.name)
        if moment is Moment.FINISHED and stopping:
            # stopped by us: the client ended on SIGTERM, but its --rm is the runtime's
            # own clean-up after the container's exit, which podman runs in a process of
            # its own that may come seconds late or not at all on a loaded host
            return ""
        return None

    def needs_removal(self, client_code: Optional[int], killed: bool) -> bool:
        """Whether the container may outlive its client: the client was killed (a
        signal, SIGKILL after the grace period) or the runtime failed to run it."""
        if not self.daemon or self.binary is None:
            return False
        return killed or client_code is None or client_code < 0 or \
            client_code in RUNTIME_FAILED

    def remove(self) -> None:
        """Start removing the container (``rm -f``), unless already under way."""
        if self._remove is not None or not self.daemon or self.binary is None:
            return
        self.pid = None
        self._remove = _child(remove_argv(self.plan.runtime, [self.name], self.binary),
                              self.client_env)
        self._remove_started = time.monotonic()

    def wait_removed(self) -> None:
        """Wait (bounded) for a removal that was started, and end any ``inspect``."""
        if self._inspect is not None:
            _reap(self._inspect, 0)
            self._inspect = None
        if self._remove is not None:
            _reap(self._remove, REMOVE_TIMEOUT_S - (time.monotonic() - self._remove_started))
            self._remove = None
        self.forget_env_file()
