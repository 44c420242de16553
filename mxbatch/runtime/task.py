"""Which task of the job this process is, from what the launcher put in the environment.

- ``MXBATCH_TASK``: the task index, set by launchers that start each task alone
  (local backend, YARN); or ``--task-from VAR``: the index is in ``$VAR`` (a Slurm
  heterogeneous job's ``SLURM_PROCID`` counts tasks across components in task order;
  ``--task-from OMPI_COMM_WORLD_RANK,PMI_RANK``: the first of them that is set, for
  one ``mpirun`` of every task);
- otherwise a role group (``--role worker``) plus the array index the batch
  system gives: ``SGE_TASK_ID`` (1-based), ``SLURM_ARRAY_TASK_ID`` (0-based),
  ``OMPI_COMM_WORLD_RANK`` / ``PMI_RANK`` (0-based); ``array_base`` overrides the
  base (DRMAA bulk jobs on Slurm number from 1).
"""

from typing import Mapping, Optional

from .planfile import RunPlan, TaskInfo
from .roles import Role
from .wire import TASK

_ARRAY_VARIABLES = (("SGE_TASK_ID", 1), ("SLURM_ARRAY_TASK_ID", 0),
                    ("OMPI_COMM_WORLD_RANK", 0), ("PMI_RANK", 0))


class TaskIdentityError(RuntimeError):
    pass


def resolve(plan: RunPlan, environ: Mapping[str, str], index: Optional[int] = None,
            role: Optional[str] = None, index_variable: Optional[str] = None,
            array_base: Optional[int] = None) -> TaskInfo:
    """The ``TaskInfo`` this process runs (see the module docstring for the sources)."""
    if index is None and index_variable:
        # "A,B": the first of these variables that is set (mpirun: Open MPI's or hydra's)
        names = [name for name in index_variable.split(",") if name]
        variable = next((name for name in names if name in environ), names[0])
        if not environ.get(variable, "").isdigit():
            raise TaskIdentityError("$%s is not a task index: %r"
                                    % (" or $".join(names), environ.get(variable)))
        index = int(environ[variable])
    if index is None and environ.get(TASK, "").isdigit():
        index = int(environ[TASK])
    if index is not None:
        if not 0 <= index < len(plan.tasks):
            raise TaskIdentityError("task index %d out of range 0-%d"
                                    % (index, len(plan.tasks) - 1))
        return plan.tasks[index]
    if role is None:
        raise TaskIdentityError("no task identity: pass --task N or --role R "
                                "(or set MXBATCH_TASK)")
    for variable, base in _ARRAY_VARIABLES:
        value = environ.get(variable, "")
        if value.isdigit():
            rank = int(value) - (base if array_base is None else array_base)
            try:
                return plan.task_for(Role(role), rank)
            except KeyError as exc:
                raise TaskIdentityError("%s=%s: %s" % (variable, value, exc)) from None
    if len(plan.tasks_of(Role(role))) == 1:
        return plan.tasks_of(Role(role))[0]
    raise TaskIdentityError("role %s has several tasks but no array index is set (%s)"
                            % (role, ", ".join(v for v, _ in _ARRAY_VARIABLES)))
