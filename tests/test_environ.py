"""The GPUs in a role's environment (runtime/environ.py, and how a host's agent uses it in
runtime/remote.py): a step's CUDA_VISIBLE_DEVICES dealt to the roles of its node, each
its own share; CUDA_VISIBLE_DEVICES kept when the environment is not inherited."""

from __future__ import annotations

import pytest

from mxbatch.runtime import wire
from mxbatch.runtime.environ import device_shares, role_environment, visible_devices
from mxbatch.runtime.planfile import TaskInfo
from mxbatch.runtime.remote import gpu_shares
from mxbatch.runtime.roles import Role


def _task(index: int, role: Role, gpus: int) -> TaskInfo:
    return TaskInfo(index=index, role=role, rank=0, argv=["true"], env={}, gpus=gpus)


def test_each_task_gets_the_next_devices_it_asks_for_and_the_others_none():
    assert device_shares(["0", "1"], [0, 1, 0, 1]) == ["", "0", "", "1"]
    assert device_shares(["3", "5", "6"], [2, 1]) == ["3,5", "6"]
    assert device_shares(["0", "1"], [1]) == ["0"]  # devices left over stay unused
    assert device_shares([], [0, 0]) == ["", ""]
    with pytest.raises(ValueError, match=r"its tasks ask for 3 GPUs but "
                                         r"CUDA_VISIBLE_DEVICES=0,1 holds 2"):
        device_shares(["0", "1"], [1, 2])
    with pytest.raises(ValueError, match=r'ask for 1 GPU but CUDA_VISIBLE_DEVICES="" holds 0'):
        device_shares([], [1])


def test_visible_devices():
    assert visible_devices({wire.CUDA_VISIBLE_DEVICES: "0, 2"}) == ["0", "2"]
    assert visible_devices({wire.CUDA_VISIBLE_DEVICES: ""}) is None
    assert visible_devices({wire.CUDA_VISIBLE_DEVICES: "NoDevFiles"}) is None
    assert visible_devices({}) is None


def test_an_agent_started_to_share_its_gpus_gives_each_task_its_own():
    """A step's agent (GPU_SHARES in its own environment) deals the step's devices by task
    index; without GPU_SHARES it leaves the environment alone; with too few it says why
    (the controller then starts nothing)."""
    tasks = [_task(0, Role.SCHEDULER, 0), _task(2, Role.WORKER, 1), _task(4, Role.WORKER, 1)]
    step = {wire.GPU_SHARES: "1", wire.CUDA_VISIBLE_DEVICES: "0,1"}
    assert gpu_shares(step, tasks) == ({0: "", 2: "0", 4: "1"}, None)
    assert gpu_shares({wire.CUDA_VISIBLE_DEVICES: "0,1"}, tasks) == (None, None)
    devices, why = gpu_shares(dict(step, **{wire.CUDA_VISIBLE_DEVICES: "0"}), tasks)
    assert devices is None
    assert why == ("this host's agent cannot give its roles their GPUs: its tasks ask for 2 "
                   "GPUs but CUDA_VISIBLE_DEVICES=0 holds 1")


def test_cuda_visible_devices_is_kept_when_the_environment_is_not_inherited():
    inherited = {"PATH": "/bin", "SECRET": "x", wire.CUDA_VISIBLE_DEVICES: "1"}
    env = role_environment(inherited, False, {}, {}, None)
    assert env[wire.CUDA_VISIBLE_DEVICES] == "1" and "SECRET" not in env
    # an empty share (a role without GPUs) passes as empty: no device, not all of them
    env = role_environment(dict(inherited, **{wire.CUDA_VISIBLE_DEVICES: ""}), True, {}, {},
                           None)
    assert env[wire.CUDA_VISIBLE_DEVICES] == ""
