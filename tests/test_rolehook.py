"""Reading the role hook's reports from a role's output, and the environment check."""

from mxbatch.runtime import notes
from mxbatch.runtime.rolehook import HookReader, RoleEnvironment, mismatch_reason, parse_line
from mxbatch.runtime.wire import HookEvent

STARTED = ('mxbatch hook worker[1]: started {"mxnet": "1.9.1", "mxnet_path": "/v/mxnet", '
           '"pid": 7, "python": "3.11.7", "python_path": "/v/bin/python3"}')


def test_reports_are_read_across_chunks_and_after_a_partial_line():
    reader = HookReader()
    assert reader.feed(b"epoch 1 loss 0.5\n" + STARTED[:30].encode()) == []
    reports = reader.feed(STARTED[30:].encode() + b"\nno newline yet: ")
    assert [(r.event, r.pid) for r in reports] == [(HookEvent.STARTED, 7)]
    assert reports[0].environment == RoleEnvironment("3.11.7", "/v/bin/python3", "1.9.1",
                                                     "/v/mxnet")
    finished = reader.feed(b'mxbatch hook worker[1]: finished {"pid": 7}\n')
    assert [(r.event, r.pid, r.environment) for r in finished] == [(HookEvent.FINISHED, 7,
                                                                      None)]


def test_connecting_is_a_report_without_an_environment():
    reports = HookReader().feed(b'x\nmxbatch hook scheduler[0]: connecting {"pid": 9}\n')
    assert [(r.event, r.pid, r.environment) for r in reports] == [
        (HookEvent.CONNECTING, 9, None)]


def test_lines_that_only_look_like_reports_are_none():
    for line in (b"mxbatch hook worker[1]: started not json",
                 b"mxbatch hook worker[1]: stopped {\"pid\": 1}",
                 b"mxbatch hook worker[1]: finished {\"no\": 1}",
                 b"print('mxbatch hook')"):
        assert parse_line(line) is None, line
    assert parse_line(b"prefix glued: " + STARTED.encode()) is not None


def test_hook_lines_are_notes_not_the_roles_own_output():
    assert notes.is_note(STARTED) and notes.is_note("worker[1] | " + STARTED)
    assert notes.hook_line("worker[1]", "finished", '{"pid": 7}') == \
        'mxbatch hook worker[1]: finished {"pid": 7}\n'


def test_mismatch_compares_mxnet_and_python_minor_of_roles_that_find_mxnet():
    base = RoleEnvironment("3.11.7", "/a/python3", "1.9.1", "/a/mxnet")
    assert not base.mismatch(RoleEnvironment("3.11.2", "/b/python3", "1.9.1", "/b/mxnet"))
    assert base.mismatch(RoleEnvironment("3.11.7", "/a/python3", "1.8.0", "/c/mxnet"))
    assert base.mismatch(RoleEnvironment("3.10.4", "/b/python3", "1.9.1", "/b/mxnet"))
    assert not base.mismatch(RoleEnvironment("3.8.1", "/b/python3"))  # no MXNet: no check
    reason = mismatch_reason("server[0]", RoleEnvironment("3.11.7", "/a/python3", "1.8.0",
                                                          "/c/mxnet"), "scheduler[0]", base)
    assert reason == ("environment mismatch: server[0] runs Python 3.11.7 (/a/python3), MXNet "
                      "1.8.0 (/c/mxnet), but scheduler[0] runs Python 3.11.7 (/a/python3), "
                      "MXNet 1.9.1 (/a/mxnet); every role must run the same MXNet version on "
                      "the same Python")
    assert RoleEnvironment.parse({"python": 3}) is None and RoleEnvironment.parse(None) is None
