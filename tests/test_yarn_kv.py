"""The key-value rendezvous on a stand-in store, and abort records in YARN's diagnostics
(no cluster)."""

from __future__ import annotations

import pytest

from mxbatch.backends.yarn.app import AppReport, abort_from_report
from mxbatch.backends.yarn.kv import abort_from_diagnostics, diagnostics_for
from mxbatch.backends.yarn.states import AppState, ContainerState, FinalStatus
from mxbatch.runtime.kvrendezvous import KeyValueRendezvous, KeyValueStore
from mxbatch.runtime.states import (
    AbortKind,
    AbortRecord,
    DigestRecord,
    SchedulerRecord,
    TaskRecord,
    TaskState,
)

from .yarngolden import WORKER

# ------------------------------------------------------------------ key-value rendezvous


class DictStore(KeyValueStore):
    def __init__(self) -> None:
        self.data = {}
        self.closed = None

    def get(self, key):
        return self.data.get(key)

    def put(self, key, value):
        self.data[key] = value

    def put_new(self, key, value):
        return self.data.setdefault(key, value) is value

    def get_prefix(self, prefix):
        return {k: v for k, v in self.data.items() if k.startswith(prefix)}

    def close(self, exit_status, abort):
        self.closed = (exit_status, abort)


def test_key_value_rendezvous_round_trips_and_first_abort_wins():
    store = DictStore()
    rdv = KeyValueRendezvous(store)
    keys = [(WORKER, 0), (WORKER, 1)]
    assert rdv.read_scheduler() is None and rdv.read_tasks(keys) == {}
    assert rdv.read_abort() is None and rdv.read_digest() is None
    rdv.publish_scheduler(SchedulerRecord(job_id="j", ip="127.0.0.1", port=9000))
    assert rdv.read_scheduler().port == 9000
    rdv.write_task(TaskRecord(role=WORKER, rank=1, state=TaskState.RUNNING, heartbeat=3))
    store.put("task/junk", b"{not json")
    assert rdv.read_tasks(keys)[(WORKER, 1)].heartbeat == 3
    assert rdv.read_task(WORKER, 1).heartbeat == 3 and rdv.read_task(WORKER, 0) is None
    rdv.publish_digest(DigestRecord(job_id="j", seq=4))
    assert rdv.read_digest().seq == 4
    first = AbortRecord(kind=AbortKind.FAILED, reason="worker[1] exited with code 1")
    assert rdv.write_abort(first) is True
    assert rdv.write_abort(AbortRecord(kind=AbortKind.CANCELLED, reason="later")) is False
    assert rdv.read_abort().reason == "worker[1] exited with code 1" and first.at > 0
    rdv.close(1)
    assert store.closed[0] == 1 and b"exited with code 1" in store.closed[1]


def test_abort_travels_in_yarn_diagnostics():
    abort = AbortRecord(kind=AbortKind.FAILED, reason="worker[0] exited with code 1",
                        role=WORKER, rank=0, exit_code=1, at=5.0)
    text = "Shutdown by user: " + diagnostics_for(abort.to_dict()) + "\nmore words"
    assert abort_from_diagnostics(text) == abort.to_dict()
    assert abort_from_diagnostics("Failure in service worker, see logs") is None
    report = AppReport(state=AppState.FINISHED, final_status=FinalStatus.FAILED,
                       diagnostics=text)
    assert abort_from_report(report).exit_code == 1
    plain = abort_from_report(AppReport(AppState.FINISHED, FinalStatus.FAILED,
                                        "Failure in container allocator:\n"
                                        "Invalid resource request!"))
    assert plain.kind is AbortKind.FAILED
    assert plain.reason == "YARN application FAILED: Failure in container allocator:"
    killed = AppReport(AppState.KILLED, FinalStatus.KILLED, "")
    assert abort_from_report(killed).kind is AbortKind.CANCELLED
    assert abort_from_report(AppReport(AppState.FINISHED, FinalStatus.SUCCEEDED)) is None


def test_state_enums_mirror_skeins():
    model = pytest.importorskip("skein.model")
    for ours, theirs in ((AppState, model.ApplicationState), (FinalStatus, model.FinalStatus),
                         (ContainerState, model.ContainerState)):
        assert {m.value for m in ours} == {str(m) for m in theirs}
