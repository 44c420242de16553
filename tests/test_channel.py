"""The rendezvous over a channel (an ssh session's stdin/stdout): the agent's side
(``ChannelRendezvous``) against the submit host's relay (``serve_call`` on a
``FileRendezvous``), over real pipes; what the agent sees when the channel breaks; and
the submit host's push that the scheduler's record changed."""

from __future__ import annotations

import os
import threading
import time

import pytest

from mxbatch.runtime.channel import Channel, ChannelClosed, decode_bytes
from mxbatch.runtime.channelrdv import PUSHED, ChannelRendezvous, serve_call
from mxbatch.runtime.rendezvous import FileRendezvous
from mxbatch.runtime.roles import Role
from mxbatch.runtime.states import (
    AbortKind,
    AbortRecord,
    DigestRecord,
    SchedulerRecord,
    TaskRecord,
    TaskState,
)
from mxbatch.runtime.wire import TYPE_KEY, MessageType

from .polling import poll


def channel_pair():
    """Two channels joined by pipes: (agent's, submit host's)."""
    up_r, up_w = os.pipe()
    down_r, down_w = os.pipe()
    return Channel(down_r, up_w), Channel(up_r, down_w)


class Relay(threading.Thread):
    """The submit host's side: serves calls on ``rdv`` and keeps the logs it gets."""

    def __init__(self, channel: Channel, rdv: FileRendezvous) -> None:
        super().__init__(daemon=True)
        self.channel, self.rdv = channel, rdv
        self.logs: dict = {}
        self.bye = None
        self.stop = False

    def run(self) -> None:
        while not self.stop:
            try:
                message = self.channel.wait_message(time.monotonic() + 0.1)
            except ChannelClosed:
                if self.channel.eof:
                    return
                continue
            if message["t"] == "call":
                value = serve_call(self.rdv, message["m"], message.get("a"))
                if message["m"] in PUSHED:  # (the controller tells the other agents)
                    self.channel.send({TYPE_KEY: MessageType.PUBLISHED})
                if "id" in message:
                    self.channel.send({"t": "ret", "id": message["id"], "v": value})
                    self.channel.flush_until(time.monotonic() + 5)
            elif message["t"] == "log":
                key = (message["role"], message["rank"])
                self.logs[key] = self.logs.get(key, b"") + decode_bytes(message["d"])
            elif message["t"] == "bye":
                self.bye = message["code"]


@pytest.fixture
def linked(tmp_path):
    agent_end, host_end = channel_pair()
    rdv = FileRendezvous(str(tmp_path))
    os.makedirs(rdv.layout.tasks_dir)
    relay = Relay(host_end, rdv)
    relay.start()
    yield ChannelRendezvous(agent_end, reply_timeout_s=5, where="the agent on h1"), relay, rdv
    relay.stop = True
    relay.join(5)


def test_every_call_reaches_the_submit_hosts_files(linked):
    remote, relay, files = linked
    remote.publish_scheduler(SchedulerRecord(job_id="j", ip="10.0.0.1", port=9000))
    assert remote.read_scheduler().address == "10.0.0.1:9000"
    remote.write_task(TaskRecord(role=Role.WORKER, rank=1, state=TaskState.RUNNING,
                                 heartbeat=7))
    # one-way calls keep their order: a later answered call has seen the write
    assert remote.read_tasks([(Role.WORKER, 1), (Role.SERVER, 0)]).keys() == {(Role.WORKER, 1)}
    assert files.read_task(Role.WORKER, 1).heartbeat == 7
    first = AbortRecord(kind=AbortKind.FAILED, reason="worker[1] exited with code 3")
    assert remote.write_abort(first) is True
    assert remote.write_abort(AbortRecord(kind=AbortKind.FAILED, reason="later")) is False
    assert remote.read_abort().reason == "worker[1] exited with code 3"
    remote.publish_digest(DigestRecord(job_id="j", seq=3))
    assert remote.read_digest().seq == 3
    assert remote.append_log(Role.WORKER, 1, b"line 1\n") is True
    remote.close(0)
    poll(lambda: relay.bye, lambda bye: bye is not None, 5, 0.1)
    assert relay.bye == 0 and relay.logs[("worker", 1)] == b"line 1\n"
    assert remote.lost is None


def test_a_closed_channel_reads_as_an_abort_naming_the_host(tmp_path):
    agent_end, host_end = channel_pair()
    remote = ChannelRendezvous(agent_end, reply_timeout_s=5, where="the agent on h2")
    host_end.close()  # the ssh session ended
    abort = remote.read_abort()
    assert abort.kind is AbortKind.FAILED
    assert abort.reason.startswith("the agent on h2 lost its connection to the submit host")
    remote.write_task(TaskRecord(role=Role.SERVER, rank=0, state=TaskState.RUNNING))  # dropped
    assert remote.read_scheduler() is None and remote.write_abort(abort) is False


def test_a_silent_submit_host_is_a_lost_channel_after_the_reply_timeout(tmp_path):
    agent_end, host_end = channel_pair()  # host_end never answers
    remote = ChannelRendezvous(agent_end, reply_timeout_s=0.5, where="the agent on h3")
    started = time.monotonic()
    assert remote.read_digest() is None
    assert 0.5 <= time.monotonic() - started < 3
    assert "no message within the deadline" in remote.read_abort().reason
    host_end.close()


def test_the_scheduler_news_pushed_between_calls_is_read_without_blocking(tmp_path):
    agent_end, host_end = channel_pair()
    remote = ChannelRendezvous(agent_end, reply_timeout_s=5, where="the agent on h4")
    assert remote.scheduler_news() is False  # nothing came: no wait either
    host_end.send({TYPE_KEY: MessageType.PUBLISHED})
    assert remote.scheduler_news() is True
    assert remote.scheduler_news() is False  # once
    host_end.close()
    assert remote.scheduler_news() is False and remote.lost is None
    assert "lost its connection" in remote.read_abort().reason


def test_the_scheduler_news_that_comes_while_a_call_waits_is_kept(linked):
    remote, _, _ = linked
    remote.publish_scheduler(SchedulerRecord(job_id="j", ip="10.0.0.1", port=9000))
    # the relay pushes before it answers the next call: the call skips it, keeps it
    assert remote.read_scheduler().address == "10.0.0.1:9000"
    assert remote.scheduler_news() is True
    assert remote.scheduler_news() is False


def test_the_agent_that_hears_the_news_has_its_members_look_at_once(tmp_path, monkeypatch):
    """An agent whose channel brings ``published`` calls look_for_scheduler_now on every
    task runner in the turn that read it, and only then."""
    from mxbatch.runtime.agent import Agent
    from mxbatch.runtime.taskrunner import TaskRunner

    from .test_rendezvous import small_plan

    plan = small_plan(str(tmp_path), created_at=time.time())
    files = FileRendezvous(str(tmp_path))
    files.prepare(plan)
    os.makedirs(plan.layout.logs_dir, exist_ok=True)
    looked = []
    monkeypatch.setattr(TaskRunner, "look_for_scheduler_now",
                        lambda runner: looked.append(runner.task.label))
    agent_end, host_end = channel_pair()
    host_end.send({TYPE_KEY: MessageType.PUBLISHED})  # before the relay answers anything
    relay = Relay(host_end, files)
    relay.start()
    agent = Agent(plan, [plan.tasks[2], plan.tasks[3]],
                  ChannelRendezvous(agent_end, reply_timeout_s=5, where="the agent on h5"))
    try:
        agent._step()  # its members start waiting for the scheduler, and hear the news
        assert looked == ["worker[0]", "worker[1]"]
        agent._step()
        assert looked == ["worker[0]", "worker[1]"]  # no news, no look
    finally:
        for runner in agent.runners:
            runner.close()
        relay.stop = True
        relay.join(5)


def test_the_agents_loop_wakes_for_the_news_and_stops_watching_a_lost_channel(tmp_path):
    """The loop's wait ends when the news arrives (not at its next turn); a lost channel,
    readable for ever, is no longer watched."""
    from mxbatch.runtime.agent import Agent

    from .test_rendezvous import small_plan

    plan = small_plan(str(tmp_path), created_at=time.time())
    os.makedirs(plan.layout.logs_dir, exist_ok=True)
    agent_end, host_end = channel_pair()
    remote = ChannelRendezvous(agent_end, reply_timeout_s=5, where="the agent on h6")
    agent = Agent(plan, [plan.tasks[2]], remote)
    try:
        agent._watch_news()
        assert agent_end.read_fd in agent._selector.get_map()
        host_end.send({TYPE_KEY: MessageType.PUBLISHED})
        host_end.flush_until(time.monotonic() + 5)
        started = time.monotonic()
        agent._wait(60)  # returns once the news is readable, not after 60 s
        assert time.monotonic() - started < 30
        assert remote.scheduler_news() is True
        host_end.close()
        assert remote.scheduler_news() is False and remote.news_fd() is None
        agent._watch_news()
        assert agent_end.read_fd not in agent._selector.get_map()
    finally:
        for runner in agent.runners:
            runner.close()


def test_members_told_of_every_publication_look_for_the_scheduler_seldom(tmp_path):
    """Members poll the scheduler's record at their usual pace unless they are told of
    each publication: their scheduler's runner is in the same agent, or the channel
    pushes the news. Then their looks are a safety net (a local job of 1,000 held
    members read the record 10,000 times a second)."""
    from mxbatch.runtime.agent import Agent
    from mxbatch.runtime.taskrunner import MEMBER_POLL_CAP_S, TOLD_POLL_CAP_S

    from .test_rendezvous import small_plan

    plan = small_plan(str(tmp_path), created_at=time.time())
    os.makedirs(plan.layout.logs_dir, exist_ok=True)
    files = FileRendezvous(str(tmp_path))
    files.prepare(plan)
    agent_end, host_end = channel_pair()
    agents = {"scheduler elsewhere": Agent(plan, [plan.tasks[2]], files),
              "scheduler here": Agent(plan, [plan.tasks[0], plan.tasks[2]], files),
              "news pushed": Agent(plan, [plan.tasks[2]], ChannelRendezvous(
                  agent_end, reply_timeout_s=5, where="the agent on h7"))}
    try:
        caps = {name: agent.runners[-1]._backoff.cap for name, agent in agents.items()}
        assert caps == {"scheduler elsewhere": MEMBER_POLL_CAP_S,
                        "scheduler here": TOLD_POLL_CAP_S, "news pushed": TOLD_POLL_CAP_S}
    finally:
        for agent in agents.values():
            for runner in agent.runners:
                runner.close()
        host_end.close()
