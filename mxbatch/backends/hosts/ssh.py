"""ssh backend: the tasks run on a list of hosts reached with ssh, one agent per host.

Hosts come from a hostfile in launch.py's format (``backends.ssh.hostfile``,
``mxbatch launch -H``) or ``backends.ssh.hosts``; tasks are placed round-robin,
``slots=N`` honoured (``hostfile.place``), the scheduler (task 0) on the first host.
Each host used gets one ssh session (``BatchMode=yes``, a connect timeout, the user's
``ssh_options`` first so that they win, ``-F config`` or ``$MXBATCH_SSH_CONFIG``), in
which the runtime's agent supervises that host's tasks; the job's state stays on the
submit host, relayed over the sessions (``sshcontrol``), so no storage need be shared.
``sync_dst_dir`` copies the working directory to every host with rsync first (like
launch.py's ``--sync-dst-dir``) and runs the roles there.

Attached (``mxbatch launch``, ``submit --wait``) this process is the controller;
detached, a controller process of its own (``controller``) lives as long as the job.
"""

from __future__ import annotations

import dataclasses
import os
import shutil
import subprocess
import time
from pathlib import Path
from typing import Any, Dict, List, Optional, Tuple

from ...errors import BackendUnavailable, SpecError
from ...quoting import quote, shell_words
from ...runtime import wire
from ...runtime.bootstrap import BOOTSTRAP
from ...runtime.jobloop import AttemptContext
from ...runtime.layout import RunLayout
from ...runtime.planfile import RunPlan
from ...runtime.rendezvous import read_json
from ...spec.plan import JobPlan
from ...spec.typed import Seconds, from_data, option, to_data
from ..base import RenderedItem
from ..records import JobRecord
from . import hostfile, placement
from .agentpython import AGENT_PYTHON_HELP, agent_python
from .controller import ControlledBackend, ControlledRequest, Controller, controller_file
from .sshcontrol import HostPlan, SshController, SshSetup, place_hosts
from .starters import remote_command

#: the environment variable that names an ssh configuration file when the spec does not
CONFIG_VARIABLE = "MXBATCH_SSH_CONFIG"

#: the longest ControlPath ssh can listen on: a socket's path has at most 107 bytes, and
#: ssh binds ``<path>.<16 random characters>`` first, then renames it
CONTROL_PATH_MAX = 107 - 17

#: kills every process of a job on a host, and removes its agent's private directory
#: (``remove``'s last resort); argv[1] = job id
SWEEP = r"""
import glob, os, shutil, signal, sys, tempfile
needle = ("@JOB_ID@=" + sys.argv[1]).encode()
for pid in os.listdir("/proc"):
    if pid.isdigit() and int(pid) != os.getpid():
        try:
            with open("/proc/%s/environ" % pid, "rb") as handle:
                if needle in handle.read().split(b"\0"):
                    os.kill(int(pid), signal.SIGKILL)
        except OSError:
            pass
for path in glob.glob(os.path.join(tempfile.gettempdir(), "mxbatch-%s-*" % sys.argv[1])):
    shutil.rmtree(path, ignore_errors=True)
""".strip().replace("@JOB_ID@", wire.JOB_ID)


@dataclasses.dataclass(frozen=True)
class SshOptions:
    """``backends.ssh``."""

    hosts: Tuple[str, ...] = option((), "the hosts, each HOST, HOST:PORT or 'HOST slots=N' "
                                        "(instead of a hostfile)")
    hostfile: Optional[str] = option(None, "a hostfile in launch.py's format: one HOST, "
                                           "HOST:PORT or 'HOST slots=N' a line (relative "
                                           "to the spec file)")
    sync_dst_dir: Optional[str] = option(None, "copy the working directory to this "
                                               "directory on every host (rsync) and run there")
    ssh_options: Tuple[str, ...] = option((), "more ssh arguments (they win over mxbatch's)")
    config: Optional[str] = option(None, "ssh configuration file (ssh -F); default "
                                         f"${CONFIG_VARIABLE} when it is set")
    connect_timeout: Seconds = option(10.0, "ssh's ConnectTimeout; a host's agent has 30 s "
                                            "more to answer")
    python: Optional[str] = option(None, AGENT_PYTHON_HELP)
    ssh: str = option("ssh", "the ssh client")


@dataclasses.dataclass(frozen=True)
class SshRequest(ControlledRequest):
    """Each host's tasks, the command that starts its agent (ssh, or the starter of an
    allocation: ``starters``) and rsync command; where the hosts came from."""

    setup: SshSetup = dataclasses.field(default_factory=lambda: SshSetup(hosts=()))
    #: where the hosts came from (``Placement.source``)
    hosts_from: str = ""

    def native_items(self) -> List[RenderedItem]:
        items = [self.controller_item(), RenderedItem("hosts", f"from {self.hosts_from}")]
        tasks = self.plan.run.tasks
        for host in self.setup.hosts:
            remote = host.remote.replace(quote(BOOTSTRAP), "BOOTSTRAP")
            text = (f"tasks: {', '.join(tasks[i].label for i in host.tasks)}\n"
                    f"{host.starter.value}: {shell_words(host.ssh)} REMOTE_COMMAND\n"
                    f"REMOTE_COMMAND: {remote}\n"
                    f"BOOTSTRAP: mxbatch/runtime/bootstrap.py's ({len(BOOTSTRAP)} characters; "
                    "render --json shows it)\n"
                    "stdin: the runtime zipapp, the plan, the environment")
            if host.rsync:
                text += f"\nrsync (first): {shell_words(host.rsync)}"
            items.append(RenderedItem(f"host {host.host}", text))
        return items


def control_path(layout: RunLayout, index: int) -> str:
    """The ControlPath of the session to the ``index``-th host, in the run directory;
    "" (no master: the rsync logs in by itself) when the path is too long for a socket
    or would be read as ssh's %-tokens."""
    path = layout.ssh_control(index)
    return path if len(path.encode()) <= CONTROL_PATH_MAX and "%" not in path else ""


class SshBackend(ControlledBackend[SshOptions, SshRequest]):
    """See the module docstring."""

    name = "ssh"
    options_class = SshOptions
    abort_poll_s = 0.5  # a call relayed to a local file: cheap

    # ------------------------------------------------------------------ checks
    def workdir_is_here(self) -> bool:
        """Only with ``sync_dst_dir``: the roles then run in a copy of this workdir; else
        in the hosts' own directory of that name."""
        return bool(self.options.sync_dst_dir)

    def _config(self, plan: JobPlan) -> Optional[str]:
        """The ssh configuration file: the option (relative to the spec file), else
        ``$MXBATCH_SSH_CONFIG``, else none (ssh's own)."""
        if self.options.config:
            return str(hostfile.spec_dir(plan) / Path(self.options.config).expanduser())
        from_env = os.environ.get(CONFIG_VARIABLE)
        return str(Path(from_env).expanduser().absolute()) if from_env else None

    def check(self, plan: JobPlan) -> None:
        placement.job_hosts(plan, self.name, self.options.hosts, self.options.hostfile)
        config = self._config(plan)
        if config and not Path(config).is_file():
            where = ("backends", self.name, "config")
            raise (plan.spec.error(where, f"no such ssh configuration file: {config}")
                   if self.options.config else
                   SpecError(f"${CONFIG_VARIABLE} names no file: {config}"))

    def doctor_checks(self) -> list:
        """The tools (``check_environment``), and where the hosts come from."""
        from ...doctor.checks import environment_check

        return [environment_check(self),
                placement.hosts_check(self.name, self.options.hosts, self.options.hostfile)]

    def check_environment(self) -> None:
        for program in [self.options.ssh] + (["rsync"] if self.options.sync_dst_dir else []):
            if shutil.which(program) is None:
                raise BackendUnavailable(f"{program} is not installed here (needed by the "
                                         "ssh backend)")

    # ------------------------------------------------------------------ rendering
    def ssh_base(self, host: hostfile.Host, config: Optional[str],
                 client: Optional[str] = None) -> List[str]:
        """The ssh command for ``host`` up to its destination (no remote command);
        ``client``: another ssh client than ``backends.ssh.ssh`` (the placement's)."""
        options = self.options
        argv = [client or options.ssh, "-T", *options.ssh_options, "-o", "BatchMode=yes",
                "-o", f"ConnectTimeout={max(1, round(options.connect_timeout))}",
                "-o", "ServerAliveInterval=5", "-o", "ServerAliveCountMax=3"]
        if config:
            argv += ["-F", config]
        if host.port is not None:
            argv += ["-p", str(host.port)]
        return argv

    def render(self, plan: JobPlan) -> SshRequest:
        found = placement.job_hosts(plan, self.name, self.options.hosts, self.options.hostfile)
        hosts, dealt = found.hosts, found.deal(len(plan.run.tasks))
        python = agent_python(self.options.python, plan.run)
        remote = remote_command(plan.job_id, python)
        sync = self.options.sync_dst_dir
        config = self._config(plan)
        # inside an OAR job, its oarsh unless backends.ssh.ssh names a client
        client = found.starter if self.options.ssh == "ssh" else None
        plans, spare = [], []
        for index, host in enumerate(hosts):
            tasks = tuple(t for t, h in enumerate(dealt) if h == index)
            base = self.ssh_base(host, config, client)
            session, rsync, control = base, (), ""
            if sync:
                control = control_path(plan.run.layout, index)
                shared = ["-o", f"ControlPath={control}"] if control else []
                # the session is the master (it lives as long as the session), the
                # rsync to the host goes over it: no second login
                if control:
                    session = base + ["-o", "ControlMaster=yes", "-o", "ControlPersist=no",
                                      *shared]
                rsync = ("rsync", "-az", "-e",
                         shell_words(base + (["-o", "ControlMaster=no", *shared]
                                             if control else [])),
                         str(plan.spec.workdir) + "/", f"{host.name}:{sync.rstrip('/')}/")
            # more hosts than tasks: the others are spare (a relaunch may need them)
            (plans if tasks else spare).append(
                HostPlan(host=host.label, tasks=tasks, ssh=tuple(session + ["--", host.name]),
                         remote=remote, rsync=rsync, slots=host.slots, control_path=control))
        setup = SshSetup(hosts=tuple(plans), python=python,
                         connect_timeout_s=float(self.options.connect_timeout),
                         sync_dst_dir=sync, spare=tuple(spare))
        return SshRequest(plan=plan, setup=setup, hosts_from=found.source)

    # ------------------------------------------------------------------ controller
    def controller_config(self, request: SshRequest) -> Dict[str, Any]:
        return to_data(request.setup)

    @classmethod
    def make_controller(cls, plan: RunPlan, config: Dict[str, Any],
                        attempt: Optional[AttemptContext] = None) -> Controller:
        return SshController.from_config(plan, config, attempt)

    @classmethod
    def usable(cls, config: Dict[str, Any], plan: RunPlan,
               excluded: List[str]) -> Optional[str]:
        """The other hosts of the hostfile must hold every task."""
        try:
            place_hosts(from_data(SshSetup, config, strict=False), excluded, len(plan.tasks))
        except ValueError as exc:
            return f"without {', '.join(excluded)}: {exc}"
        return None

    def sweep(self, record: JobRecord, run: RunPlan) -> None:
        """Kill whatever of the job is left on each host (by its MXBATCH_JOB_ID)."""
        config = read_json(controller_file(RunLayout(record.run_dir), self.name))
        if not isinstance(config, dict):
            return
        setup = from_data(SshSetup, config, strict=False)
        command = f"exec {quote(setup.python)} -c {quote(SWEEP)} {quote(record.job_id)}"
        running = [subprocess.Popen([*host.ssh, command], stdin=subprocess.DEVNULL,
                                    stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
                   for host in setup.every_host]
        deadline = time.monotonic() + setup.connect_timeout_s + 10
        for proc in running:
            try:
                proc.wait(max(0.1, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
