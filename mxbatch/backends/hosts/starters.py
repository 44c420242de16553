"""Starters: how the agent of one host is started and supervised from the controller.

Whatever the starter, the agent is ``runtime.remote``'s: a process on the host whose
stdin and stdout are a channel to the controller (``sshcontrol``), which sends it the
runtime zipapp, the plan and the environment, relays its rendezvous calls and takes its
tasks' output. A starter only decides the command that gets a process with that stdin
and stdout onto the host (``HostPlan.argv``):

- ``ssh``: ``ssh [options] HOST REMOTE``, the remote command through the login shell;
- ``srun``: a job step of the Slurm allocation this process runs in, one task on one
  node: ``srun --jobid=JOB --overlap --nodes=1 --ntasks=1 --nodelist=NODE
  --job-name=mxbatch-<job>`` (``--overlap``: the steps share the allocation's CPUs, and
  the user's own steps may run beside them), ``--unbuffered`` (the channel's lines go
  through at once), ``/bin/sh -c REMOTE``. A step ends with its srun: Slurm kills it
  when srun dies, and the agent stops its roles when its channel ends;
- ``qrsh``: ``qrsh -inherit HOST REMOTE`` inside an SGE parallel-environment job (tight
  integration: SGE starts, accounts for and, on ``qdel``, kills the agent and its roles;
  the PE needs ``control_slaves TRUE``). Like ssh, qrsh joins its arguments with blanks
  and the host's shell runs them (measured on SGE 8.1.9: ``qrsh -inherit H /bin/sh -c
  'a; b'`` runs ``/bin/sh -c a; b``), so REMOTE is one argument, quoted for that shell.
  Its stdio is no reliable byte stream (SGE's builtin interactive job support drops
  stdin data under pressure), so its agent **connects back** (``connects_back``): only
  a short token goes over qrsh's stdin, the channel over a TCP connection to the
  controller (``runtime.remote``).

``REMOTE`` is the same everywhere: ``exec env MXBATCH_JOB_ID=<job> PYTHON -c BOOTSTRAP``.
"""

from __future__ import annotations

import enum
from typing import List, Optional

from ...quoting import quote
from ...runtime import wire
from ...runtime.remote import BOOTSTRAP, VERSION_EXIT


class StarterKind(str, enum.Enum):
    """How a host's agent is started."""

    SSH = "ssh"
    SRUN = "srun"
    QRSH = "qrsh"

    @property
    def connects_back(self) -> bool:
        """The agent's channel is a TCP connection to the controller, not the starter's
        stdin and stdout (see the module docstring)."""
        return self is StarterKind.QRSH

    @property
    def session(self) -> str:
        """How messages name the agent's connection."""
        return {StarterKind.SSH: "ssh connection", StarterKind.SRUN: "srun step",
                StarterKind.QRSH: "qrsh -inherit session"}[self]


def remote_command(job_id: str, python: str) -> str:
    """The shell command that runs a host's agent (its stdin and stdout the channel)."""
    return f"exec env {wire.JOB_ID}={quote(job_id)} {quote(python)} -c {quote(BOOTSTRAP)}"


def step_name(job_id: str) -> str:
    """The name of every Slurm step of a job (``squeue -s`` shows it; the sweep finds
    the steps by it)."""
    return f"mxbatch-{job_id}"


def srun_argv(srun: str, allocation: str, node: str, job_id: str,
              extra: List[str]) -> List[str]:
    """The step that runs the agent of ``node`` in ``allocation`` (up to the remote
    command, which ``/bin/sh -c`` runs)."""
    return [srun, f"--jobid={allocation}", "--overlap", "--nodes=1", "--ntasks=1",
            f"--nodelist={node}", f"--job-name={step_name(job_id)}", "--unbuffered",
            "--quiet", "--kill-on-bad-exit=0", *extra, "--", "/bin/sh", "-c"]


def qrsh_argv(qrsh: str, host: str) -> List[str]:
    """The task of the SGE parallel job that runs the agent of ``host`` (up to the
    remote command, which the host's shell runs)."""
    return [qrsh, "-inherit", host]


def describe_start_failure(kind: StarterKind, code: Optional[int], stderr: str,
                           python: str) -> str:
    """What went wrong starting the agent of a host through srun or qrsh (ssh has its
    own: ``sshcontrol.describe_failure``), from the exit status and the starter's words."""
    lines = [line.strip() for line in stderr.splitlines() if line.strip()]
    said = lines[-1] if lines else "no message"
    if code == VERSION_EXIT:
        return said
    if code == 127 or ("not found" in stderr.lower() and python in stderr):
        return (f"{python} was not found on this host (the mxbatch agent needs Python 3.8 or "
                f"newer there) [{said}]")
    if code is None:
        return f"no answer [{said}]"
    return f"{kind.value} could not start the mxbatch agent (exit {code}) [{said}]"
