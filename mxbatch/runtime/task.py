"""Which task of the job this process is, from what the launcher put in the environment.

- ``MXBATCH_TASK``: the task index, set by launchers that start each task alone
  (local backend, YARN); or ``--task-from VAR``: the index is in ``$VAR`` (a Slurm
  heterogeneous job's ``SLURM_PROCID`` counts tasks across components in task order;
  ``--task-from OMPI_COMM_WORLD_RANK,PMI_RANK``: the first of them that is set);
- ``--task-groups G`` with ``--task-from VAR``: several tasks, the group ``$VAR``
  picks of ``G`` (``format_groups``: one ``mpirun`` rank per host, each the agent of
  the tasks dealt to its host);
- a role group (``--role worker``) with ``--task-from VAR``: an array task whose rank is
  ``$VAR`` less ``array_base`` (0 if not given): the job script names its scheduler's
  variable (OAR: ``--task-from OAR_ARRAY_INDEX --array-base 1``), so a batch system
  needs nothing here;
- otherwise a role group (``--role worker``) plus the array index the batch
  system gives: ``SGE_TASK_ID`` (1-based), ``SLURM_ARRAY_TASK_ID`` (0-based),
  ``OMPI_COMM_WORLD_RANK`` / ``PMI_RANK`` (0-based); ``array_base`` overrides the
  base (DRMAA bulk jobs on Slurm number from 1).
"""

from typing import List, Mapping, Optional, Sequence

from .planfile import RunPlan, TaskInfo
from .roles import Role
from .wire import TASK

_ARRAY_VARIABLES = (("SGE_TASK_ID", 1), ("SLURM_ARRAY_TASK_ID", 0),
                    ("OMPI_COMM_WORLD_RANK", 0), ("PMI_RANK", 0))


#: ``--task-groups``: what separates the groups, and the task indexes of a group
GROUP_SEPARATOR, INDEX_SEPARATOR = "/", ","


class TaskIdentityError(RuntimeError):
    pass


def format_groups(groups: Sequence[Sequence[int]]) -> str:
    """``--task-groups``' value: each group's task indexes, in group order (``0,4/1/2``)."""
    return GROUP_SEPARATOR.join(INDEX_SEPARATOR.join(str(i) for i in group) for group in groups)


def _index_from(environ: Mapping[str, str], index_variable: str) -> int:
    """The index in the first of ``index_variable``'s variables (``A,B``) that is set."""
    names = [name for name in index_variable.split(",") if name]
    variable = next((name for name in names if name in environ), names[0])
    if not environ.get(variable, "").isdigit():
        raise TaskIdentityError("$%s is not a task index: %r"
                                % (" or $".join(names), environ.get(variable)))
    return int(environ[variable])


def tasks_at(plan: RunPlan, indexes: str) -> List[TaskInfo]:
    """The tasks at ``indexes`` (``I,J,...``) of ``plan``; TaskIdentityError when they
    are no task indexes of it."""
    try:
        found = [int(i) for i in indexes.split(INDEX_SEPARATOR)]
    except ValueError:
        raise TaskIdentityError("not task indexes: %r" % indexes) from None
    if any(not 0 <= i < len(plan.tasks) for i in found):
        raise TaskIdentityError("task index out of range 0-%d: %s"
                                % (len(plan.tasks) - 1, indexes))
    return [plan.tasks[i] for i in found]


def resolve_group(plan: RunPlan, environ: Mapping[str, str], groups: str,
                  index_variable: str) -> List[TaskInfo]:
    """The tasks of the group of ``groups`` (``format_groups``) that ``$index_variable``
    picks (counted from 0)."""
    index = _index_from(environ, index_variable)
    parts = groups.split(GROUP_SEPARATOR)
    if not 0 <= index < len(parts):
        raise TaskIdentityError("group %d out of range 0-%d of --task-groups"
                                % (index, len(parts) - 1))
    try:
        return tasks_at(plan, parts[index])
    except TaskIdentityError as exc:
        raise TaskIdentityError("--task-groups: %s" % exc) from None


def resolve(plan: RunPlan, environ: Mapping[str, str], index: Optional[int] = None,
            role: Optional[str] = None, index_variable: Optional[str] = None,
            array_base: Optional[int] = None) -> TaskInfo:
    """The ``TaskInfo`` this process runs (see the module docstring for the sources)."""
    if index is None and role is not None and index_variable:
        rank = _index_from(environ, index_variable) - (array_base or 0)
        try:
            return plan.task_for(Role(role), rank)
        except KeyError as exc:
            raise TaskIdentityError("$%s: %s" % (index_variable, exc)) from None
    if index is None and index_variable:
        # "A,B": the first of these variables that is set (mpirun: Open MPI's or hydra's)
        index = _index_from(environ, index_variable)
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
