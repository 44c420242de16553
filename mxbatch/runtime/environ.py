"""The environment a role process gets.

Inherited from the process that started the task (the submitter's environment,
passed on by the backend like ``sbatch --export=ALL``) unless the spec turns
inheritance off, then the task's own variables from the plan, then the
rendezvous results. Stray variables that would confuse ps-lite (``PORT``,
inherited ``DMLC_*``) never pass.

GPUs: a role sees the ``CUDA_VISIBLE_DEVICES`` it inherits (what the batch system gave
its task), even with inheritance off. An agent that supervises several tasks of a host
whose devices it must share out (an srun step inside an allocation, ``GPU_SHARES``)
gives each role its own part instead (``device_shares``): a role that asks for k GPUs
the next k of the list, in task order; a role that asks for none an empty
``CUDA_VISIBLE_DEVICES`` (no device: the scheduler and servers stay off the workers'
GPUs, which an unset variable would not do).
"""

import os
from typing import Dict, List, Mapping, Optional, Sequence

from .wire import CUDA_VISIBLE_DEVICES, OWN_PREFIXES, PS_NODE_PORT

# Kept even when inheritance is off: what any process needs, and what the
# batch system tells its tasks.
_ALWAYS_KEPT = ("PATH", "HOME", "USER", "LOGNAME", "SHELL", "LANG", "LC_ALL", "TMPDIR", "TZ",
                "TERM", "JOB_ID", "CONTAINER_ID", CUDA_VISIBLE_DEVICES)
_ALWAYS_KEPT_PREFIXES = ("SGE_", "SLURM_", "PBS_", "LC_", "SKEIN_", "HADOOP_", "YARN_")
_DROPPED = (PS_NODE_PORT,)
_DROPPED_PREFIXES = OWN_PREFIXES


def role_environment(inherited: Mapping[str, str], inherit: bool, task_env: Mapping[str, str],
                     rendezvous_env: Mapping[str, str], hook_dir: Optional[str],
                     submit_path: Optional[str] = None) -> Dict[str, str]:
    """The complete environment of a role process (see the module docstring).

    ``submit_path``: the submitter's PATH, which wins over the inherited one when
    inheriting (a batch system may have replaced it).
    """
    env = {}
    for name, value in inherited.items():
        if name in _DROPPED or name.startswith(_DROPPED_PREFIXES):
            continue
        if inherit or name in _ALWAYS_KEPT or name.startswith(_ALWAYS_KEPT_PREFIXES):
            env[name] = value
    if inherit and submit_path:
        env["PATH"] = submit_path
    env.update(task_env)
    env.update(rendezvous_env)
    if hook_dir:
        previous = env.get("PYTHONPATH")
        env["PYTHONPATH"] = hook_dir + (os.pathsep + previous if previous else "")
    return env


def visible_devices(environ: Mapping[str, str]) -> Optional[List[str]]:
    """The GPUs a batch system gave this process (``CUDA_VISIBLE_DEVICES``), if it did."""
    value = environ.get(CUDA_VISIBLE_DEVICES, "").strip()
    if not value or value == "NoDevFiles":
        return None
    return [d.strip() for d in value.split(",") if d.strip()]


def device_shares(devices: Sequence[str], wants: Sequence[int]) -> List[str]:
    """Each task's ``CUDA_VISIBLE_DEVICES`` when tasks that ask for ``wants`` GPUs (in
    task order) share ``devices``: the next ``k`` devices for a task that asks for k,
    ``""`` for one that asks for none. ValueError when the tasks ask for more."""
    asked = sum(max(0, k) for k in wants)
    if asked > len(devices):
        raise ValueError("its tasks ask for %d GPU%s but %s=%s holds %d"
                         % (asked, "" if asked == 1 else "s", CUDA_VISIBLE_DEVICES,
                            ",".join(devices) or '""', len(devices)))
    shares, taken = [], 0
    for want in wants:
        k = max(0, want)
        shares.append(",".join(devices[taken:taken + k]))
        taken += k
    return shares
