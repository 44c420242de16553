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
  when srun dies, and the agent stops its roles when its channel ends. In a job whose
  roles ask for GPUs every step asks for the GPUs of its node's tasks, ``--gpus=K``
  (the step has one node, so that is the node's; ``--gres=none`` for none: a step that
  asks for nothing gets all of the node's), with srun's GPU request variables
  (``SLURM_GPU_REQUESTS``: what ``salloc --gpus=N`` puts in the environment) removed by
  ``env -u``, since srun would add them to the step's request. Measured on Slurm 22.05:
  ``--gres=gpu:1`` under ``SLURM_GPUS=3`` is "Invalid generic resource (gres)
  specification"; without the variables, ``--gpus=K`` works in allocations made with
  ``--gres=gpu:N``, ``--gpus-per-node=N`` and ``--gpus=N``, while ``--gres=gpu:2`` (and
  ``--gpus-per-node=2``) is refused in a ``--gpus=3`` one even on a node that holds 2.
  Slurm sets the step's ``CUDA_VISIBLE_DEVICES``; the agent, started with
  ``GPU_SHARES``, gives each role its share of them. ``--overlap`` steps share GRES as
  they share CPUs (two steps that each ask for one GPU of a node both get device 0), so
  one step a node is what keeps the roles' devices apart;
- ``qrsh``: ``qrsh -inherit HOST REMOTE`` inside an SGE parallel-environment job (tight
  integration: SGE starts, accounts for and, on ``qdel``, kills the agent and its roles;
  the PE needs ``control_slaves TRUE``). Like ssh, qrsh joins its arguments with blanks
  and the host's shell runs them (measured on SGE 8.1.9: ``qrsh -inherit H /bin/sh -c
  'a; b'`` runs ``/bin/sh -c a; b``), so REMOTE is one argument, quoted for that shell.
  Its stdio is no reliable byte stream (SGE's builtin interactive job support drops
  stdin data under pressure), so its agent **connects back** (``connects_back``): only
  a short token goes over qrsh's stdin, the channel over a TCP connection to the
  controller (``runtime.remote``).

``REMOTE`` is the same everywhere: ``exec env MXBATCH_JOB_ID=<job> PYTHON -S -c BOOTSTRAP``
(with ``MXBATCH_GPU_SHARES=1`` for an agent that shares its step's GPUs out).
"""

from __future__ import annotations

import enum
from typing import List, Optional

from ...quoting import quote
from ...runtime import wire
from ...runtime.bootstrap import BOOTSTRAP, VERSION_EXIT
from .. import bundle


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


#: srun's input variables that ask for GPUs: the allocation's request, which srun would
#: add to every step's (see the module docstring)
SLURM_GPU_REQUESTS = ("SLURM_GPUS", "SLURM_GPUS_PER_NODE", "SLURM_GPUS_PER_SOCKET",
                      "SLURM_GPUS_PER_TASK", "SLURM_CPUS_PER_GPU", "SLURM_MEM_PER_GPU",
                      "SLURM_NTASKS_PER_GPU", "SLURM_GRES")


def remote_command(job_id: str, python: str, gpu_shares: bool = False) -> str:
    """The shell command that runs a host's agent (its stdin and stdout the channel);
    ``gpu_shares``: the agent gives each role its share of the host's GPUs."""
    shares = f" {wire.GPU_SHARES}=1" if gpu_shares else ""
    return (f"exec env {wire.JOB_ID}={quote(job_id)}{shares} {quote(python)} "
            f"{bundle.NO_SITE} -c {quote(BOOTSTRAP)}")


def step_name(job_id: str) -> str:
    """The name of every Slurm step of a job (``squeue -s`` shows it; the sweep finds
    the steps by it)."""
    return f"mxbatch-{job_id}"


def srun_argv(srun: str, allocation: str, node: str, job_id: str,
              extra: List[str], gpus: Optional[int] = None) -> List[str]:
    """The step that runs the agent of ``node`` in ``allocation`` (up to the remote
    command, which ``/bin/sh -c`` runs). ``gpus``: the GPUs the step asks for, in a job
    whose roles ask for some (None: a job that asks for none; its steps as ever)."""
    if gpus is None:
        before, gres = [], []
    else:
        before = ["env", *(arg for name in SLURM_GPU_REQUESTS for arg in ("-u", name))]
        gres = [f"--gpus={gpus}" if gpus > 0 else "--gres=none"]
    return [*before, srun, f"--jobid={allocation}", "--overlap", "--nodes=1", "--ntasks=1",
            f"--nodelist={node}", f"--job-name={step_name(job_id)}", *gres, "--unbuffered",
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
