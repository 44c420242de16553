"""SGE's accounting of a task that left its queue without starting (``qacct -j JOB -t
TASK``), as ``status`` quotes it: parsing only; the real cell is in test_sge_cluster.py."""

from __future__ import annotations

from mxbatch.backends.batch.sge import accounting_failure
from mxbatch.backends.status import NEVER_STARTED, never_started_note

RECORD = """==============================================================
qname        all.q
hostname     mxbh1
jobnumber    1938
taskid       347
failed       {failed}
exit_status  {status}
"""


def test_the_execd_failing_to_start_a_task():
    text = RECORD.format(failed="1   : assumedly before job", status="0")
    assert accounting_failure(text) == "failed 1: assumedly before job"


def test_a_failure_code_without_words():
    assert accounting_failure(RECORD.format(failed="37", status="0")) == "failed 37"


def test_a_supervisor_that_died_before_its_first_record():
    assert accounting_failure(RECORD.format(failed="0", status="2")) == \
        "exit status 2 before its supervisor wrote a record"


def test_the_last_record_of_a_rescheduled_task_counts():
    text = RECORD.format(failed="1   : assumedly before job", status="0") + \
        RECORD.format(failed="0", status="0")
    assert accounting_failure(text) == ""


def test_nothing_useful_says_nothing():
    assert accounting_failure(RECORD.format(failed="0", status="0")) == ""
    assert accounting_failure("error: job id 1938 not found\n") == ""
    assert accounting_failure("") == ""


def test_the_note_quotes_the_scheduler_or_says_where_to_look():
    assert never_started_note("SGE says failed 1: x") == f"{NEVER_STARTED}: SGE says failed 1: x"
    assert never_started_note() == (f"{NEVER_STARTED} (can its node see the run directory? "
                                    "`mxbatch doctor` checks)")
