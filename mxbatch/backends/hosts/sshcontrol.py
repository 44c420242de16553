"""The ssh backend's controller: one ssh session per host, each running that host's
agent, with the job's state here on the submit host.

Per host (``HostLink``): ``ssh HOST exec env MXBATCH_JOB_ID=<job> python3 -S -c
BOOTSTRAP`` (``runtime.remote``), in a session of its own (Ctrl-C reaches only the
controller, which then cancels the job cleanly) and dying with the controller
(PR_SET_PDEATHSIG: a killed controller drops every connection, and each agent then
stops its roles). Over the session's stdin go the runtime zipapp, the plan and the
submitter's environment (never a command line: ``ps`` on a host shows no secret);
over its stdout come the rendezvous calls, which the controller serves from the run
directory here (``channelrdv.serve_call`` on a ``FileRendezvous``), and the tasks'
output, appended to ``logs/<role>-<rank>.log`` here, so ``mxbatch logs``, ``status``
and ``--wait`` work as for a local job. ssh's own stderr (and the agent's) goes to
``logs/ssh-<host>.log``.

``prepare`` connects to every host at once, and each host starts its roles as soon
as it is ready, whatever the others' state: at its agent's hello or, with
``sync_dst_dir``, once the rsync of the working directory to it (started at that
hello) has finished. A host that fails (an error that names the host: unreachable,
unknown host key, refused key, no python3, python3 too old, missing working directory,
rsync) still fails the submission, with every failing host named: no other host starts
its roles from then on, and those that had started stop them (the job's abort record,
read by their agents within the abort poll); ``prepare`` waits until their sessions
have ended before it raises, so nothing is left running anywhere.

When a host's agent publishes the scheduler's record (its address, then that it
listens), the controller tells every other host's agent at once (``PUBLISHED``), whose
waiting members then look for it without waiting for the end of their backoff.

Each attempt of the job has a controller of its own: new sessions, the tasks placed
(``place_hosts``) on the hosts of the hostfile less those excluded after a node
failure (a session lost: ``node_failure`` naming the host; a relaunch whose host does
not answer: the same), with the attempt's records and logs.
"""

from __future__ import annotations

import dataclasses
import os
import secrets
import select
import signal
import socket
import subprocess
import tempfile
import time
from pathlib import Path
from typing import Any, Dict, List, Optional, Sequence, Tuple

from ...errors import MxbatchError
from ...runtime import osbytes, wire
from ...runtime.attempts import AttemptEnd
from ...runtime.bootstrap import TOKEN_BYTES, VERSION_EXIT, zipapp_header
from ...runtime.channel import Channel, ChannelClosed, Message, decode_bytes
from ...runtime.channelrdv import PUSHED, serve_call
from ...runtime.files import unlink_quietly
from ...runtime.jobloop import AttemptContext
from ...runtime.logfile import TaskLog
from ...runtime.net import interface_ip, source_ip_towards
from ...runtime.planfile import RunPlan
from ...runtime.rendezvous import TaskKey
from ...runtime.roles import Role
from ...runtime.spawn import start_dying_with_parent
from ...runtime.states import AbortKind, AbortRecord, EndReason
from ...runtime.wire import TYPE_KEY, MessageType
from ...spec.typed import from_data
from . import hostfile
from .agentpython import DEFAULT_AGENT_PYTHON
from .controller import BY, STOP_MARGIN_S, Controller, unavailable
from .starters import StarterKind, describe_start_failure

#: how long an agent may take after the ssh connection is up to say hello (starting
#: Python on a loaded host), on top of the connect timeout
HELLO_MARGIN_S = 30.0
#: how much of ssh's stderr a link keeps for its error messages
STDERR_TAIL = 16384
#: how long a connecting-back agent may take to send its token once connected
TOKEN_TIMEOUT_S = 5.0
#: how long a session whose channel broke before its agent's hello may take to exit, so
#: that the starter's own exit status and words (not the broken pipe) say what went wrong
BROKEN_EXIT_S = 5.0


@dataclasses.dataclass(frozen=True)
class HostPlan:
    """One host's part of the job: its tasks and the commands that reach it. ``ssh`` is
    the starter's command (``starters``: ssh, an srun step, qrsh -inherit) before the
    ``remote`` command, its last argument."""

    host: str
    tasks: Tuple[int, ...]
    ssh: Tuple[str, ...]
    remote: str
    rsync: Tuple[str, ...] = ()
    #: the hostfile's slots=N of the host (None: any number of tasks)
    slots: Optional[int] = None
    starter: StarterKind = StarterKind.SSH
    #: the ControlPath of the session's master connection, which the rsync shares ("":
    #: none); removed before the session starts (a master killed before) and after it
    control_path: str = ""


@dataclasses.dataclass(frozen=True)
class SshSetup:
    """The controller's configuration (``controller.json`` in the run directory):
    ``hosts`` with the first attempt's tasks, ``spare`` the hostfile's other hosts (no
    task in the first attempt: a relaunch may use them)."""

    hosts: Tuple[HostPlan, ...]
    python: str = DEFAULT_AGENT_PYTHON
    connect_timeout_s: float = 10.0
    sync_dst_dir: Optional[str] = None
    spare: Tuple[HostPlan, ...] = ()

    @property
    def every_host(self) -> Tuple[HostPlan, ...]:
        """Every host of the hostfile, in its order."""
        return self.hosts + self.spare


def place_hosts(setup: SshSetup, excluded: Sequence[str], tasks: int) -> List[HostPlan]:
    """The hosts of an attempt that leaves ``excluded`` out, each with its tasks
    (round-robin from the first, ``slots`` honoured, as ``hostfile.place``); ValueError
    when the others cannot hold every task."""
    if not excluded:
        return list(setup.hosts)
    pool = [h for h in setup.every_host if h.host not in excluded]
    if not pool:
        raise ValueError("no host is left")
    placement = hostfile.place(pool, tasks)
    placed = [dataclasses.replace(h, tasks=tuple(t for t, i in enumerate(placement) if i == n))
              for n, h in enumerate(pool)]
    return [h for h in placed if h.tasks]


def describe_failure(code: Optional[int], stderr: str, python: str) -> str:
    """What went wrong on a host, from ssh's exit status and its own words."""
    lines = [line.strip() for line in stderr.splitlines() if line.strip()]
    said = lines[-1] if lines else "no message"
    text = stderr.lower()
    if code == VERSION_EXIT:
        return said
    if code == 127 or ("not found" in text and python in stderr):
        return (f"{python} was not found on this host (the mxbatch agent needs Python 3.8 or "
                f"newer there; set backends.ssh.python to its path) [{said}]")
    if code == 255:
        if "host key verification failed" in text:
            return ("its host key is not in known_hosts, and ssh runs with BatchMode=yes "
                    "(no prompt): check the key and add it (ssh-keyscan, or one "
                    f"interactive ssh) [{said}]")
        if "identification has changed" in text:
            return f"its host key has CHANGED since it was recorded in known_hosts [{said}]"
        if "permission denied" in text:
            return ("ssh refused the login: no accepted key (check the user, IdentityFile, "
                    f"ssh-agent; BatchMode=yes: no password prompt) [{said}]")
        if "connection refused" in text:
            return f"unreachable: nothing accepts ssh connections there [{said}]"
        if "no route to host" in text or "network is unreachable" in text:
            return f"unreachable: no route to this host [{said}]"
        if "timed out" in text:
            return f"unreachable: the connection timed out [{said}]"
        if "could not resolve" in text:
            return f"unknown host name [{said}]"
        return f"ssh failed (exit 255) [{said}]"
    if code is None:
        return f"no answer [{said}]"
    return f"the mxbatch agent ended with exit status {code} before it was ready [{said}]"


class Sync:
    """The rsync of the working directory to one host (``HostPlan.rsync``), started when
    its agent has made the destination (its hello); its output goes to a file of its own
    (read for the error), so that nothing waits on a pipe."""

    def __init__(self, plan: HostPlan, env: Dict[str, str], destination: str,
                 timeout_s: float) -> None:
        self.plan = plan
        self.destination = destination
        self.timeout_s = timeout_s
        self.deadline = time.monotonic() + timeout_s
        self.out = tempfile.TemporaryFile()
        self.proc = start_dying_with_parent(list(plan.rsync), stdin=subprocess.DEVNULL,
                                            stdout=self.out, stderr=subprocess.STDOUT,
                                            env=env, start_new_session=True, close_fds=True)

    def poll(self) -> Optional[str]:
        """None while it runs; then "" (done) or what went wrong."""
        code = self.proc.poll()
        if code is None and time.monotonic() < self.deadline:
            return None
        if code is None:
            self.cancel()
            return f"rsync to {self.destination} did not finish within {self.timeout_s:g}s"
        self.out.seek(0)
        text = self.out.read(STDERR_TAIL).decode(errors="replace")
        self.out.close()
        if code == 0:
            return ""
        return (f"rsync to {self.destination} failed (exit {code}): "
                + describe_failure(code, text, "rsync"))

    def cancel(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
        self.proc.wait()
        self.out.close()


class HostLink:
    """One host's session (ssh, an srun step, qrsh -inherit) and the channel to its
    agent: the session's stdin and stdout, or, when the starter ``connects_back``
    (``back``: the controller's listening address), a TCP connection the agent opens to
    the controller with the token this link wrote to its stdin (``channel`` is None until
    ``attach``)."""

    def __init__(self, plan: HostPlan, env: Dict[str, str], log_path: str,
                 back: Optional[Tuple[str, int]] = None) -> None:
        self.plan = plan
        self.host = plan.host
        remote = plan.remote if back is None else f"{plan.remote} {back[0]} {back[1]}"
        self.proc = start_dying_with_parent(
            [*plan.ssh, remote], stdin=subprocess.PIPE,
            stdout=subprocess.PIPE if back is None else subprocess.DEVNULL,
            stderr=subprocess.PIPE, env=env, start_new_session=True, close_fds=True)
        assert self.proc.stdin and self.proc.stderr
        self.sock: Optional[socket.socket] = None
        self.channel: Optional[Channel] = None
        self.token: Optional[bytes] = None
        if back is None:
            assert self.proc.stdout
            self.channel = Channel(self.proc.stdout.fileno(), self.proc.stdin.fileno())
        else:
            self.token = secrets.token_hex(TOKEN_BYTES // 2).encode()
            try:
                self.proc.stdin.write(self.token)
                self.proc.stdin.flush()
            except OSError:
                pass  # the starter has already gone: its exit says why
        self.err_fd = self.proc.stderr.fileno()
        os.set_blocking(self.err_fd, False)
        self.stderr = bytearray()
        self.stderr_eof = False
        self.log = os.open(log_path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
        self.hello: Optional[Message] = None
        self.problem: Optional[str] = None
        #: the channel broke before the agent said hello (EPIPE: the starter is on its way
        #: out) and when: the problem is the starter's exit, or this after BROKEN_EXIT_S
        self.broken: Optional[Tuple[str, float]] = None
        self.bye: Optional[int] = None
        #: the rsync of the working directory to this host, while it runs; done
        self.sync: Optional[Sync] = None
        self.synced = False
        #: START was sent: the agent runs its tasks
        self.running = False
        self.ended = False
        self.exit_code: Optional[int] = None

    @property
    def waiting(self) -> bool:
        """Connected or connecting, neither ready nor failed."""
        return self.hello is None and self.problem is None and not self.ended

    def read_stderr(self) -> None:
        while True:
            try:
                data = os.read(self.err_fd, 65536)
            except BlockingIOError:
                return
            except OSError:
                data = b""
            if not data:
                self.stderr_eof = True
                return
            self.stderr += data
            del self.stderr[:-STDERR_TAIL]
            os.write(self.log, data)

    def stderr_text(self) -> str:
        return self.stderr.decode(errors="replace")

    def attach(self, sock: socket.socket) -> None:
        """The agent connected back: ``sock`` is its channel."""
        sock.setblocking(False)
        self.sock = sock
        self.channel = Channel(sock.fileno(), sock.fileno())

    def kill(self) -> None:
        try:
            self.proc.send_signal(signal.SIGKILL)
        except ProcessLookupError:
            pass

    def close(self) -> None:
        for stream in (self.proc.stdin, self.proc.stdout, self.proc.stderr, self.sock):
            try:
                if stream is not None:
                    stream.close()
            except OSError:
                pass
        try:
            os.close(self.log)
        except OSError:
            pass


class SshController(Controller):
    """See the module docstring."""

    def __init__(self, plan: RunPlan, setup: SshSetup,
                 environ: Optional[Dict[str, str]] = None,
                 attempt: Optional[AttemptContext] = None) -> None:
        super().__init__(plan, attempt)
        self.setup = setup
        self.environ = dict(os.environ if environ is None else environ)
        self.hosts = place_hosts(setup, self.attempt.excluded, len(plan.tasks))
        self.links: List[HostLink] = []
        self._logs: Dict[TaskKey, TaskLog] = {}
        self._pyz = b""
        #: where agents that connect back reach this controller (while preparing)
        self._listener: Optional[socket.socket] = None
        #: a host failed while others ran their roles: the abort that stops them is written
        self._aborted = False

    @classmethod
    def from_config(cls, plan: RunPlan, config: Dict[str, Any],
                    attempt: Optional[AttemptContext] = None) -> "SshController":
        return cls(plan, from_data(SshSetup, config, strict=False), attempt=attempt)

    # ------------------------------------------------------------------ preparing
    def _setup_message(self, host: HostPlan) -> Message:
        sync = self.setup.sync_dst_dir
        remote_plan = self.plan if sync is None else dataclasses.replace(self.plan,
                                                                          workdir=sync)
        return {TYPE_KEY: MessageType.SETUP, "plan": remote_plan.to_json(), "env": self.environ,
                "tasks": list(host.tasks), "host": host.host,
                "check_workdir": sync is None, "make_dirs": [sync] if sync else [],
                "attempt": self.attempt.index, "restart_reason": self.attempt.reason_name}

    def prepare(self) -> None:
        """Reach every host and let each start its roles as soon as it is ready (its
        agent's hello, then its rsync when ``sync_dst_dir`` is set); a host that fails
        stops everything: see ``_stop_started``."""
        self._pyz = Path(self.layout.runtime).read_bytes()
        env = {**self.environ, wire.JOB_ID: self.plan.job_id}
        os.makedirs(self.layout.logs_dir, mode=0o700, exist_ok=True)
        back = self._listen()
        for host in self.hosts:
            if host.control_path:  # a master killed before left its socket
                unlink_quietly(host.control_path)
            link = HostLink(host, env, self.layout.ssh_log(host.host),
                            back if host.starter.connects_back else None)
            self.links.append(link)
            if link.channel is not None:
                self._send_setup(link)
        patience = self.setup.connect_timeout_s + HELLO_MARGIN_S
        deadline = time.monotonic() + patience
        try:
            while True:
                if time.monotonic() >= deadline:
                    self._no_answer(patience)
                if not any(link.waiting or link.sync for link in self.links):
                    break
                self._pump(0.1)
                self._give_up_broken()
                self._advance()
                if self._failed():  # the started hosts stop while the others answer
                    self._abort_started()
        finally:
            if self._listener is not None:
                self._listener.close()
                self._listener = None
        problems = [(link.host, link.problem) for link in self.links if link.problem]
        if problems:
            stopped = self._stop_started()
            raise unavailable(problems, "the job cannot run on these hosts", stopped=stopped)

    def _no_answer(self, patience: float) -> None:
        for link in self.links:
            if link.waiting:
                said = link.stderr_text().strip() or f"{link.plan.starter.value} said nothing"
                link.problem = f"no answer within {patience:g}s [{said}]"

    def _failed(self) -> bool:
        """A host cannot run its tasks: the job will not run, nothing more starts."""
        return any(link.problem for link in self.links)

    def _advance(self) -> None:
        """Each host that is ready starts its roles at once: after its agent's hello, or,
        with ``sync_dst_dir``, once its rsync (started at the hello) has finished. None
        starts once a host has failed; running rsyncs are then stopped."""
        failed = self._failed()
        for link in self.links:
            if link.sync is not None:
                if failed:
                    link.sync.cancel()
                    link.sync = None
                    continue
                done = link.sync.poll()
                if done is None:
                    continue
                link.sync = None
                if done:
                    link.problem = done
                    failed = True
                    continue
                link.synced = True
            if link.running or link.hello is None or link.problem or failed:
                continue
            if link.ended:  # between its hello and now
                starter = link.plan.starter
                link.problem = (f"its {starter.session} ended before the job started "
                                f"({starter.value} exited with {link.exit_code})")
                failed = True
            elif self.setup.sync_dst_dir is not None and not link.synced:
                link.sync = Sync(link.plan, {**self.environ, wire.JOB_ID: self.plan.job_id},
                                 self.setup.sync_dst_dir,
                                 max(60.0, self.plan.startup_timeout_s))
            else:
                self._start(link)

    def _start(self, link: HostLink) -> None:
        link.running = True
        try:
            link.channel.send({TYPE_KEY: MessageType.START})
        except ChannelClosed:
            pass  # seen as an ended link by the next step

    def _abort_started(self) -> None:
        """Once: the job's abort naming the hosts that failed so far, if any host has
        started its roles (their agents read it and stop them)."""
        if self._aborted or not any(link.running for link in self.links):
            return
        self._aborted = True
        problems = [(link.host, link.problem) for link in self.links if link.problem]
        failed = [host for host, _ in problems]
        said = "; ".join(f"{host}: {problem}" for host, problem in problems)
        self.rdv.write_abort(AbortRecord(
            kind=AbortKind.FAILED, by=BY, end=EndReason.NODE_FAILURE, hosts=failed,
            reason=f"the job cannot run on {', '.join(failed)} ({said})"))

    def _stop_started(self) -> List[str]:
        """Some host cannot run its tasks: the hosts that started their roles already
        stop them (the abort record, which their agents read within the abort poll),
        and this waits until their sessions have ended (the grace period plus
        ``STOP_MARGIN_S``, then they are cut off). The hosts that had started."""
        started = [link for link in self.links if link.running]
        if not started:
            return []
        self._abort_started()
        deadline = time.monotonic() + self.plan.grace_s + STOP_MARGIN_S
        while any(not link.ended for link in started) and time.monotonic() < deadline:
            self._pump(0.1)
        for link in started:
            if not link.ended:
                link.kill()
                link.proc.wait()
                link.ended = True
        return [link.host for link in started]

    def _send_setup(self, link: HostLink) -> None:
        """The runtime and the setup message to ``link``'s agent."""
        assert link.channel is not None
        try:
            link.channel.send_raw(zipapp_header(len(self._pyz)) + self._pyz)
            link.channel.send(self._setup_message(link.plan))
        except ChannelClosed as exc:
            link.broken = (str(exc), time.monotonic())

    def _listen(self) -> Optional[Tuple[str, int]]:
        """A listening socket for the agents that connect back, on this host's address
        towards the first of their hosts (``network.interface``'s when the plan names one);
        None when no host's starter connects back."""
        hosts = [h.host for h in self.hosts if h.starter.connects_back]
        if not hosts:
            return None
        try:
            address = (interface_ip(self.plan.interface) if self.plan.interface
                       else source_ip_towards(socket.gethostbyname(hosts[0])))
        except OSError as exc:
            raise unavailable([(hosts[0], f"no address here that reaches it: {exc}")],
                              "the job cannot run on these hosts") from None
        listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        listener.bind((address, 0))
        listener.listen(len(hosts) + 8)
        listener.setblocking(False)
        self._listener = listener
        return address, listener.getsockname()[1]

    def _accept(self) -> None:
        """Agents that connected back: each sends its link's token first; a connection
        without a known token is closed."""
        assert self._listener is not None
        while True:
            try:
                sock, _ = self._listener.accept()
            except (BlockingIOError, InterruptedError):
                return
            token = _read_token(sock)
            link = next((x for x in self.links
                         if token is not None and x.channel is None and x.token == token), None)
            if link is None:
                sock.close()
                continue
            link.attach(sock)
            self._send_setup(link)

    def start(self) -> None:
        """Every host started its roles when it was ready (``prepare``)."""
        self._advance()

    def abandon(self) -> None:
        """Close every session (end of file: an agent that has not started quits) and
        make sure the ssh processes are gone."""
        for link in self.links:
            if link.channel is None:
                continue
            try:
                link.channel.send({TYPE_KEY: MessageType.QUIT})
                link.channel.flush()
            except ChannelClosed:
                pass
        deadline = time.monotonic() + 5
        for link in self.links:
            if link.proc.stdin is not None:
                try:
                    link.proc.stdin.close()
                except OSError:
                    pass
            try:
                link.proc.wait(max(0.1, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                link.kill()
                link.proc.wait()
            link.close()
            if link.plan.control_path:
                unlink_quietly(link.plan.control_path)

    # ------------------------------------------------------------------ running
    def step(self, timeout: float) -> bool:
        self._pump(timeout)
        return any(not link.ended for link in self.links)

    def terminate(self) -> None:
        for link in self.links:
            if not link.ended:
                link.kill()

    def close(self) -> None:
        for link in self.links:
            link.close()
            if link.plan.control_path:
                unlink_quietly(link.plan.control_path)
        for log in self._logs.values():
            log.close()
        self._logs.clear()

    # ------------------------------------------------------------------ the relay
    def _pump(self, timeout: float) -> None:
        """Wait up to ``timeout`` for data from any host, then handle all of it."""
        poller = select.poll()
        watched = 0
        if self._listener is not None:
            poller.register(self._listener.fileno(), select.POLLIN)
            watched += 1
        for link in self.links:
            if link.ended:
                continue
            streams = [(link.err_fd, link.stderr_eof)]
            if link.channel is not None:
                streams.append((link.channel.read_fd, link.channel.eof))
            for fd, closed in streams:
                if not closed:  # (a closed pipe would wake poll at once, every time)
                    poller.register(fd, select.POLLIN)
                    watched += 1
            if link.channel is not None and link.channel.pending:
                poller.register(link.channel.write_fd, select.POLLOUT)
                watched += 1
        if watched:
            poller.poll(timeout * 1000)
        else:  # only exits to wait for (ssh has closed its pipes)
            time.sleep(timeout)
        if self._listener is not None:
            self._accept()
        for link in self.links:
            if not link.ended:
                self._service(link)

    def _service(self, link: HostLink) -> None:
        link.read_stderr()
        try:
            if link.channel is not None:
                for message in link.channel.receive():
                    self._handle(link, message)
                link.channel.flush()
                if link.channel.eof and link.sock is not None and link.hello is None:
                    raise ChannelClosed("the agent closed its connection")
        except ChannelClosed as exc:
            if link.hello is None and not link.running:
                # the starter is on its way out: its status and words say why, not the pipe
                link.broken = link.broken or (str(exc), time.monotonic())
            else:
                link.problem = link.problem or str(exc)
                link.kill()
        if link.proc.poll() is not None:
            self._ended(link)

    def _give_up_broken(self) -> None:
        """A session whose channel broke before its hello and that has not exited within
        BROKEN_EXIT_S: the broken channel is its problem, and it is killed."""
        now = time.monotonic()
        for link in self.links:
            if link.waiting and link.broken is not None and now - link.broken[1] > BROKEN_EXIT_S:
                said = link.stderr_text().strip()
                link.problem = link.broken[0] + (f" [{said}]" if said else "")
                link.kill()

    def _handle(self, link: HostLink, message: Message) -> None:
        kind = message.get(TYPE_KEY)
        if kind == MessageType.CALL:
            method = str(message.get("m"))
            try:
                value = serve_call(self.rdv, method, message.get("a"),
                                   adapt_task=self._local_log)
            except (ValueError, TypeError, KeyError) as exc:
                os.write(link.log, osbytes.encode(
                    f"mxbatch controller: bad call {message!r}: {exc}\n"))
                value = None
            if "id" in message:
                link.channel.send({TYPE_KEY: MessageType.RET, "id": message["id"], "v": value})
            if method in PUSHED:
                self._push(link, {TYPE_KEY: MessageType.PUBLISHED})
        elif kind == MessageType.LOG:
            self._append_log(Role(message["role"]), int(message["rank"]),
                             decode_bytes(message["d"]))
        elif kind == MessageType.HELLO:
            link.hello = message
        elif kind == MessageType.ERROR:
            link.problem = str(message.get("message"))
        elif kind == MessageType.BYE:
            link.bye = int(message.get("code", 1))

    def _push(self, source: HostLink, message: Message) -> None:
        """``message`` to the agent of every other host that runs its tasks."""
        for link in self.links:
            if link is not source and link.running and not link.ended \
                    and link.channel is not None:
                try:
                    link.channel.send(message)
                except ChannelClosed:
                    pass  # that link's own step sees it

    def _local_log(self, record: Any) -> Any:
        """Task and abort records name the log file here, not the host's."""
        if getattr(record, "role", None) is not None and getattr(record, "rank", None) is not None:
            record.log = self.layout.task_log(Role(record.role).value, record.rank)
        return record

    def degrade(self) -> None:
        super().degrade()
        for log in self._logs.values():
            log.best_effort = True

    def _append_log(self, role: Role, rank: int, data: bytes) -> None:
        key = (role, rank)
        log = self._logs.get(key)
        if log is None:
            log = self._logs[key] = TaskLog(self.layout.task_log(role.value, rank),
                                            self.layout.task_log_times(role.value, rank))
            log.best_effort = self.storage_error is not None
        log.write(data)

    def _ended(self, link: HostLink) -> None:
        """The ssh process of ``link`` has exited: take what it left, then judge."""
        link.read_stderr()
        try:
            if link.channel is not None:
                for message in link.channel.receive():
                    self._handle(link, message)
        except ChannelClosed:
            pass
        link.ended = True
        link.exit_code = link.proc.returncode
        if not link.running:
            if link.problem is None and link.hello is None:
                describe = (describe_failure if link.plan.starter is StarterKind.SSH
                            else lambda *a: describe_start_failure(link.plan.starter, *a))
                link.problem = describe(link.exit_code, link.stderr_text(), self.setup.python)
            return
        tasks = [self.plan.tasks[i] for i in link.plan.tasks]
        if link.bye is None:
            lines = [x for x in link.stderr_text().splitlines() if x.strip()]
            starter = link.plan.starter
            detail = f"{starter.value} exited with {link.exit_code}" + (
                f": {lines[-1].strip()}" if lines else "")
            reason = (f"host {link.host}: the {starter.session} to its agent was lost "
                      f"({detail})")
            self.lose_tasks(tasks, reason, EndReason.NODE_FAILURE, (link.host,))
        else:
            reason = (f"host {link.host}: its agent ended (exit {link.bye}) without the "
                      f"final records of its tasks")
            self.lose_tasks(tasks, reason)

    # ------------------------------------------------------------------ attempts
    def prepare_failed(self, error: MxbatchError) -> AttemptEnd:
        """A relaunch whose hosts did not all answer: a node failure of those hosts."""
        failed = tuple(link.host for link in self.links if link.problem)
        detail = error.message.replace("\n", " ")
        if failed:
            return AttemptEnd(EndReason.NODE_FAILURE, detail=detail, hosts=failed)
        return AttemptEnd(EndReason.FAILURE, detail=detail)

    def attempt_end(self, end: AttemptEnd) -> AttemptEnd:
        """Hosts named by their own host name (a lost task's record) as the hostfile
        names them (what ``place_hosts`` leaves out)."""
        names = {str((link.hello or {}).get("hostname")): link.host for link in self.links}
        hosts = tuple(names.get(h, h) for h in end.hosts)
        return dataclasses.replace(end, hosts=hosts) if hosts != end.hosts else end


def _read_token(sock: socket.socket) -> Optional[bytes]:
    """The first TOKEN_BYTES of a connection (None when they do not come in time)."""
    sock.settimeout(TOKEN_TIMEOUT_S)
    data = b""
    try:
        while len(data) < TOKEN_BYTES:
            chunk = sock.recv(TOKEN_BYTES - len(data))
            if not chunk:
                return None
            data += chunk
    except OSError:
        return None
    return data
