"""Which tasks a runtime process supervises, from its launcher's environment: one task
(``resolve``) or, for one ``mpirun`` rank a host, the group its rank picks
(``resolve_group``, ``--task-groups``)."""

from __future__ import annotations

import pytest

from mxbatch.runtime.__main__ import main as runtime_main
from mxbatch.runtime.layout import RunLayout
from mxbatch.runtime.task import TaskIdentityError, format_groups, resolve, resolve_group

from .test_rendezvous import small_plan

RANKS = "OMPI_COMM_WORLD_RANK,PMI_RANK"


def test_a_rank_picks_its_group_of_tasks():
    plan = small_plan()
    groups = format_groups([[0, 3], [1], [2]])
    assert groups == "0,3/1/2"
    assert [t.index for t in resolve_group(plan, {"OMPI_COMM_WORLD_RANK": "0"}, groups,
                                           RANKS)] == [0, 3]
    assert [t.index for t in resolve_group(plan, {"PMI_RANK": "2"}, groups, RANKS)] == [2]
    # without groups the rank is the task, as before
    assert resolve(plan, {"PMI_RANK": "3"}, index_variable=RANKS).index == 3


@pytest.mark.parametrize("environ, groups, said", [
    ({"OMPI_COMM_WORLD_RANK": "3"}, "0,3/1/2", "group 3 out of range 0-2"),
    ({}, "0,3/1/2", "$OMPI_COMM_WORLD_RANK or $PMI_RANK is not a task index: None"),
    ({"PMI_RANK": "1"}, "0/1,x", "not task indexes: '1,x'"),
    ({"PMI_RANK": "0"}, "0,4/1", "task index out of range 0-3: 0,4"),
])
def test_a_group_that_is_not_there_is_an_identity_error(environ, groups, said):
    with pytest.raises(TaskIdentityError, match=said.replace("$", r"\$").replace("(", r"\(")):
        resolve_group(small_plan(), environ, groups, RANKS)


def test_the_runtime_refuses_groups_without_the_ranks_variable(tmp_path, capsys):
    """A usage error (exit 2, said on stderr), before anything starts."""
    layout = RunLayout(str(tmp_path))
    with open(layout.plan, "w") as handle:
        handle.write(small_plan(str(tmp_path)).to_json())
    assert runtime_main(["run", str(tmp_path), "--task-groups", "0/1,2,3"]) == 2
    assert "--task-groups needs --task-from" in capsys.readouterr().err
    assert runtime_main(["run", str(tmp_path), "--task-groups", "0/1,2,3",
                         "--task-from", "NO_SUCH_RANK_VARIABLE"]) == 2
    assert "$NO_SUCH_RANK_VARIABLE is not a task index" in capsys.readouterr().err
