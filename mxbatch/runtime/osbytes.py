"""Bytes of the operating system in Python text, and back, without a decoding error.

Commands, arguments, environment values, paths and role output are bytes on Linux,
not necessarily UTF-8 (``launch -- echo $'caf\\xe9'``, a Latin-1 variable, a role
printing binary). Python hands argv, the environment and paths over as text decoded
as UTF-8 with ``surrogateescape`` (a byte that is no UTF-8 becomes a lone surrogate
such as ``\\udce9``), and ``subprocess`` turns such text back into the same bytes. So
does everything of mxbatch that writes OS text out again: ``encode`` for the task
logs (supervisor notes quote the command), containers' env files, YARN's environment
file and batch job scripts, which then carry the very bytes the user gave; JSON
(plan, records, the ssh channel) escapes lone surrogates as ``\\udce9`` and reads them
back the same. Container runtimes take UTF-8 only (docker refuses an env file with
other bytes; podman replaces them): a role in a container gets ``utf8`` of such
values and arguments, U+FFFD for each byte, and its log says so. ``relay_streams``
makes a process's stdout and stderr write such text as those bytes instead of raising
``UnicodeEncodeError`` (what a terminal shows of a byte that is no UTF-8 is the
terminal's business, as for ``echo``).

Standard library only, like the whole runtime.
"""

import sys

ENCODING = "utf-8"
#: how undecodable bytes travel inside Python text (as ``os.fsdecode`` makes them)
ERRORS = "surrogateescape"


def encode(text: str) -> bytes:
    """The bytes ``text`` stands for (what the OS gave, for text Python decoded)."""
    return text.encode(ENCODING, ERRORS)


def decode(data: bytes) -> str:
    """``data`` as text that ``encode`` turns back into the same bytes."""
    return data.decode(ENCODING, ERRORS)


def utf8(text: str) -> str:
    """``text`` with every byte that is no UTF-8 replaced by U+FFFD: for what takes
    UTF-8 only (container runtimes, whose configuration is JSON)."""
    return encode(text).decode(ENCODING, "replace")


def relay_streams() -> None:
    """Let this process's stdout and stderr print OS text (undecodable bytes as they
    came) instead of failing on it; call once at a command's start."""
    for stream in (sys.stdout, sys.stderr):
        reconfigure = getattr(stream, "reconfigure", None)
        if reconfigure is not None:
            try:
                reconfigure(errors=ERRORS)
            except (ValueError, OSError):  # closed, or not reconfigurable
                pass
