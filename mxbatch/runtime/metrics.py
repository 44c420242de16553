"""Metrics a role prints, read from its output as it streams (the supervisor's pipe).

Two line formats are read, anywhere in a line:

- MXNet's ``Speedometer`` (``mx.callback.Speedometer``, the Module API's and most gluon
  examples' progress line): ``Epoch[0] Batch [20]	Speed: 1764.83 samples/sec ...``
  gives ``samples_per_sec``;
- an explicit line for any script: ``MXBATCH_METRIC samples_per_sec=123.4 loss=0.52``
  (``wire.METRIC_LINE``, then ``name=number`` pairs; names are letters, digits, ``_``
  and ``.``).

``MetricReader`` keeps the latest value of each metric (at most ``MAX_METRICS``
names) and when it changed; a partial line is kept up to ``MAX_LINE`` bytes (a longer
line is no metric line). Standard library only.
"""

import math
import re
from typing import Dict, Optional

from .wire import METRIC_LINE

SAMPLES_PER_SEC = "samples_per_sec"
MAX_METRICS = 16
MAX_LINE = 4096

_SPEEDOMETER = re.compile(rb"Speed: ([0-9]+(?:\.[0-9]*)?(?:[eE][-+]?[0-9]+)?) samples/sec")
_EXPLICIT = re.compile(re.escape(METRIC_LINE.encode()) + rb"((?:[ \t]+[A-Za-z_][\w.]*=\S+)+)")
_PAIR = re.compile(rb"([A-Za-z_][\w.]*)=(\S+)")


def parse_line(line: bytes) -> Dict[str, float]:
    """The metrics one output line reports (empty for most lines)."""
    found: Dict[str, float] = {}
    speed = _SPEEDOMETER.search(line)
    if speed and math.isfinite(float(speed.group(1))):  # 1e400 is no speed
        found[SAMPLES_PER_SEC] = float(speed.group(1))
    explicit = _EXPLICIT.search(line)
    if explicit:
        for name, value in _PAIR.findall(explicit.group(1)):
            try:
                number = float(value)
            except ValueError:
                continue
            if math.isfinite(number):
                found[name.decode()] = number
    return found


class MetricReader:
    """The latest metrics of one role, from its output chunks."""

    def __init__(self) -> None:
        self.latest: Dict[str, float] = {}
        self.changed_at: Optional[float] = None
        self._partial = b""

    def feed(self, data: bytes, now: float) -> bool:
        """Read ``data`` (any chunk of output); True when a metric changed."""
        if b"\n" not in data:
            self._partial = (self._partial + data)[:MAX_LINE + 1]
            return False
        head, _, rest = data.rpartition(b"\n")
        text = self._partial + head
        self._partial = rest[:MAX_LINE + 1]
        if b"samples/sec" not in text and METRIC_LINE.encode() not in text:
            return False
        changed = False
        for line in text.split(b"\n"):
            if len(line) > MAX_LINE:
                continue
            for name, value in parse_line(line).items():
                if name not in self.latest and len(self.latest) >= MAX_METRICS:
                    continue
                self.latest[name] = value
                changed = True
        if changed:
            self.changed_at = now
        return changed
