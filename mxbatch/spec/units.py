"""Parsing of human-written quantities: durations, memory sizes, port ranges.

Each parser raises ``ValueError`` with a message fit for the user; callers turn
it into a ``SpecError`` that names the file, line and key.
"""

from __future__ import annotations

import math
import re
from typing import Tuple, Union

_DURATION_PART = re.compile(r"(\d+(?:\.\d+)?)\s*(ms|d|h|m|s)", re.IGNORECASE)
_SECONDS = {"d": 86400.0, "h": 3600.0, "m": 60.0, "s": 1.0, "ms": 0.001}
_SIZE = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*([KMGT]?)(?:i?B)?\s*$", re.IGNORECASE)
_MIB = {"": 1.0, "K": 1 / 1024, "M": 1.0, "G": 1024.0, "T": 1024.0 * 1024}


def parse_duration(value: Union[str, int, float]) -> float:
    """Seconds from ``90``, ``"90s"``, ``"10m"``, ``"1h30m"``, ``"2d"`` or ``"1:30:00"``."""
    if isinstance(value, bool) or not isinstance(value, (str, int, float)):
        raise ValueError(f"expected a duration like 30s, 10m or 1h, got {value!r}")
    if isinstance(value, (int, float)):
        seconds = float(value)
    else:
        text = value.strip()
        if re.fullmatch(r"\d+(?:\.\d+)?", text):
            seconds = float(text)
        elif re.fullmatch(r"\d+(:\d{1,2}){1,2}", text):
            seconds = 0.0
            for part in text.split(":"):
                seconds = seconds * 60 + int(part)
        else:
            parts = _DURATION_PART.findall(text)
            if not parts or "".join(n + u for n, u in parts) != re.sub(r"\s+", "", text):
                raise ValueError(
                    f"expected a duration like 30s, 10m, 1h30m or HH:MM:SS, got {value!r}")
            seconds = sum(float(n) * _SECONDS[u.lower()] for n, u in parts)
    if not math.isfinite(seconds) or seconds <= 0:
        raise ValueError(f"a duration must be a positive, finite number of seconds, "
                         f"got {value!r}")
    return seconds


def format_duration(seconds: float) -> str:
    """``HH:MM:SS`` (rounded up to whole seconds), the form SGE and Slurm accept."""
    total = int(-(-seconds // 1))
    return f"{total // 3600:d}:{total % 3600 // 60:02d}:{total % 60:02d}"


def parse_size_mib(value: Union[str, int, float]) -> int:
    """MiB from ``2G``, ``512M``, ``1.5GiB``, ``1024K``; a plain number means MiB."""
    if isinstance(value, bool) or not isinstance(value, (str, int, float)):
        raise ValueError(f"expected a size like 512M or 2G, got {value!r}")
    if isinstance(value, (int, float)):
        mib = float(value)
    else:
        match = _SIZE.match(value)
        if not match:
            raise ValueError(f"expected a size like 512M or 2G, got {value!r}")
        mib = float(match.group(1)) * _MIB[match.group(2).upper()]
    if not math.isfinite(mib) or mib <= 0:
        raise ValueError(f"a size must be positive and finite, got {value!r}")
    return max(1, int(-(-mib // 1)))


def parse_port_range(value: Union[str, int, list, tuple]) -> Tuple[int, int]:
    """``(low, high)`` inclusive from ``"9000-9999"``, ``[9000, 9999]`` or ``9000``."""
    if isinstance(value, bool):
        raise ValueError(f"expected a port range like 9000-9999, got {value!r}")
    if isinstance(value, int):
        low = high = value
    elif isinstance(value, (list, tuple)) and len(value) == 2 and all(
            isinstance(v, int) and not isinstance(v, bool) for v in value):
        low, high = value
    elif isinstance(value, str) and re.fullmatch(r"\s*\d+\s*(-\s*\d+\s*)?", value):
        bounds = [int(v) for v in value.split("-")]
        low, high = bounds[0], bounds[-1]
    else:
        raise ValueError(f"expected a port range like 9000-9999, got {value!r}")
    if not (1024 <= low <= high <= 65535):
        raise ValueError(
            f"port range {low}-{high} must lie within 1024-65535 with low <= high")
    return low, high
