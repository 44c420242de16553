"""The three ps-lite roles: the one place their names are spelled.

Task order follows the enum: the scheduler is task 0, then the servers, then the
workers. ``Role`` is a ``str`` enum, so it compares equal to its value and goes
into JSON as a plain string.
"""

import enum


class Role(str, enum.Enum):
    SCHEDULER = "scheduler"
    SERVER = "server"
    WORKER = "worker"

    def __str__(self) -> str:
        return self.value
