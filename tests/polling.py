"""The one polling loop of the tests and the benchmarks that share their helpers
(bench/fault_matrix.py imports tests/faultmatrix.py, which cannot import pytest)."""

from __future__ import annotations

import time
from typing import Callable, TypeVar

T = TypeVar("T")


def poll(probe: Callable[[], T], done: Callable[[T], bool], timeout: float,
         interval: float = 0.2) -> T:
    """Call ``probe`` every ``interval`` seconds until ``done(value)`` or ``timeout``
    seconds passed; the last value either way (the caller decides what a timeout means)."""
    deadline = time.monotonic() + timeout
    value = probe()
    while not done(value) and time.monotonic() < deadline:
        time.sleep(interval)
        value = probe()
    return value
