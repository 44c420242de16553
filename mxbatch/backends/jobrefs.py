"""A job as a user names it on the command line: its whole id, a unique prefix of it,
or ``last``.

- A whole id (``spec.plan.JOB_ID``: the job's name and 8 hex digits) is taken as it is,
  whether or not a record has it (``cancel`` stops the processes of a job whose record
  is lost).
- ``last`` (``LAST``) is the newest job of ``$MXBATCH_HOME/jobs`` (by submission time;
  a record that cannot be read, by the time its file was written). A job named
  ``last`` is reached through a longer prefix: ``last-``.
- Anything else is a prefix of the recorded ids: one match is that job; several are
  ``AmbiguousJob`` (exit 2) naming the candidates, newest first; none is
  ``JobNotFound`` (exit 4). Text that could start no job id is ``BadInput`` (exit 2).

The text never reaches a path: it is only compared with the ids of the records there
(``records.scan``), and the id it resolves to is checked again where it does.
"""

from __future__ import annotations

import dataclasses
import re
import time
from typing import List, Sequence

from ..errors import BadInput, JobNotFound
from ..spec.paths import jobs_dir
from ..spec.plan import JOB_ID
from . import records

#: the word that names the newest job
LAST = "last"
#: how many candidates an ambiguous prefix lists at most
MAX_CANDIDATES = 10
#: text that may start a job id (``JOB_ID``: a name, ``-``, 8 hex digits)
_PREFIX = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]{0,71}")
#: what every error says about the forms a job may be named by
FORMS = ("a job id (NAME-XXXXXXXX, as submit printed it), a unique prefix of one, or "
         f"{LAST!r} (the newest job); `mxbatch list` shows them")


@dataclasses.dataclass(frozen=True)
class Known:
    """A job id in the records' folder and when it was submitted (for an unreadable
    record: when its file was written)."""

    job_id: str
    at: float

    def describe(self) -> str:
        try:
            when = time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(self.at))
        except (OverflowError, OSError, ValueError):  # a record's time out of range
            when = "submitted at an unknown time"
        return f"{self.job_id} ({when})"


class AmbiguousJob(BadInput):
    """A prefix that several jobs' ids start with (exit 2); ``candidates``: their ids,
    newest first."""

    def __init__(self, prefix: str, candidates: Sequence[Known]) -> None:
        self.candidates = [c.job_id for c in candidates]
        shown = "\n".join(f"  {c.describe()}" for c in candidates[:MAX_CANDIDATES])
        more = len(candidates) - MAX_CANDIDATES
        super().__init__(f"{prefix!r} is the start of {len(candidates)} job ids (newest "
                         f"first):\n{shown}" + (f"\n  and {more} more" if more > 0 else "")
                         + "\ntype more of the id")


def known_jobs() -> List[Known]:
    """Every job of the records' folder, newest first (unreadable records included)."""
    readable, unreadable = records.scan()
    known = [Known(r.job_id, r.submitted_at) for r in readable]
    known += [Known(u.job_id, u.modified_at) for u in unreadable]
    known = [k for k in known if JOB_ID.fullmatch(k.job_id)]
    known.sort(key=lambda k: k.at, reverse=True)
    return known


def resolve(text: str) -> str:
    """The job id ``text`` names (see the module docstring)."""
    if JOB_ID.fullmatch(text):
        return text
    if text == LAST:
        known = known_jobs()
        if not known:
            raise JobNotFound(f"{LAST!r}: there is no job in {jobs_dir()} (nothing was "
                              "submitted with this MXBATCH_HOME, or `mxbatch clean` removed "
                              "every job)")
        return known[0].job_id
    if not _PREFIX.fullmatch(text):
        raise BadInput(f"{text!r} is not a job id, nor the start of one: a job is named "
                       f"by {FORMS}")
    matches = [k for k in known_jobs() if k.job_id.startswith(text)]
    if len(matches) == 1:
        return matches[0].job_id
    if matches:
        raise AmbiguousJob(text, matches)
    raise JobNotFound(f"no job id starts with {text!r} in {jobs_dir()} (a job is named by "
                      f"{FORMS})")
