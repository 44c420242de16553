"""``import skein`` without importing setuptools.

skein 0.8 imports ``distutils.version.LooseVersion`` (to compare gRPC's version). In
a virtual environment with setuptools, ``distutils`` is setuptools' copy, and
importing it imports all of setuptools and pkg_resources: 0.2 s of CPU (about 1 s
on a loaded machine), more than half of a ``mxbatch status`` of a running YARN job.
``skein()`` imports skein with a stand-in ``distutils.version`` that has only the
comparison skein needs, then takes the stand-in out of ``sys.modules`` again, so
anything importing ``distutils`` later gets the real one. If ``distutils`` is
already imported, the real one is used as it is.
"""

from __future__ import annotations

import re
import sys
import types
from typing import Any, Tuple, Union


class LooseVersion:
    """The part of ``distutils.version.LooseVersion`` skein uses: ordering of dotted
    version strings (their numbers; other characters are ignored)."""

    def __init__(self, text: str) -> None:
        self.vstring = text
        self.numbers = _numbers(text)

    def __repr__(self) -> str:
        return f"LooseVersion({self.vstring!r})"

    def __eq__(self, other: object) -> bool:
        return self.numbers == _numbers(other)

    def __lt__(self, other: Union[str, "LooseVersion"]) -> bool:
        return self.numbers < _numbers(other)

    def __le__(self, other: Union[str, "LooseVersion"]) -> bool:
        return self.numbers <= _numbers(other)

    def __gt__(self, other: Union[str, "LooseVersion"]) -> bool:
        return self.numbers > _numbers(other)

    def __ge__(self, other: Union[str, "LooseVersion"]) -> bool:
        return self.numbers >= _numbers(other)

    __hash__ = None  # type: ignore[assignment]


def _numbers(version: object) -> Tuple[int, ...]:
    text = version.vstring if isinstance(version, LooseVersion) else str(version)
    return tuple(int(n) for n in re.findall(r"\d+", text))


def skein() -> Any:
    """The ``skein`` module, imported as the module docstring says."""
    if "skein" in sys.modules:
        return sys.modules["skein"]
    if "distutils" in sys.modules:
        import skein as module

        return module
    package = types.ModuleType("distutils")
    package.__path__ = []  # a package: ``distutils.version`` resolves in sys.modules
    version = types.ModuleType("distutils.version")
    version.LooseVersion = LooseVersion  # type: ignore[attr-defined]
    package.version = version  # type: ignore[attr-defined]
    sys.modules["distutils"], sys.modules["distutils.version"] = package, version
    try:
        import skein as module
    finally:
        for name, stand_in in (("distutils", package), ("distutils.version", version)):
            if sys.modules.get(name) is stand_in:
                del sys.modules[name]
    return module
