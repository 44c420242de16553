"""The environment a role process gets.

Inherited from the process that started the task (the submitter's environment,
passed on by the backend like ``sbatch --export=ALL``) unless the spec turns
inheritance off, then the task's own variables from the plan, then the
rendezvous results. Stray variables that would confuse ps-lite (``PORT``,
inherited ``DMLC_*``) never pass.
"""

import os
from typing import Dict, Mapping, Optional

from .wire import OWN_PREFIXES, PS_NODE_PORT

# Kept even when inheritance is off: what any process needs, and what the
# batch system tells its tasks.
_ALWAYS_KEPT = ("PATH", "HOME", "USER", "LOGNAME", "SHELL", "LANG", "LC_ALL", "TMPDIR", "TZ",
                "TERM", "JOB_ID", "CONTAINER_ID")
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
