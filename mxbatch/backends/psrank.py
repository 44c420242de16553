"""MXNet's rank of each worker (``kv.rank``), from where the workers listen.

ps-lite's scheduler ranks the nodes itself once all have registered: it sorts them with
``(a.hostname.compare(b.hostname) | (a.port < b.port)) > 0`` (``van.cc``), that is by
host, as a string, from the greatest, then by port from the lowest, and numbers the
workers in that order. The host is the address a worker advertises
(``DMLC_NODE_HOST``), the port the one it binds (``PORT``, which each member's
supervisor chooses: ``net.member_port``). On one host, ports grow with mxbatch's rank,
so ``kv.rank`` equals ``MXBATCH_RANK``; across hosts the order of their addresses
decides, which ``kv_ranks`` tells once every worker has started.
"""

from __future__ import annotations

import functools
from typing import Dict, List, Optional, Sequence, Tuple

Member = Tuple[str, str, int]  # label, host, port


def _ps_lite_order(a: Member, b: Member) -> int:
    """ps-lite's comparator as ``cmp``: host descending, then port ascending."""
    if a[1] != b[1]:
        return -1 if a[1] > b[1] else 1
    return (a[2] > b[2]) - (a[2] < b[2])


def parse_address(address: str) -> Optional[Tuple[str, int]]:
    host, sep, port = address.rpartition(":")
    return (host, int(port)) if sep and host and port.isdigit() else None


def kv_ranks(workers: Sequence[Tuple[str, str]]) -> Dict[str, int]:
    """``label -> kv.rank`` from ``(label, "ip:port")`` of every worker of the job; empty
    while some worker's address is unknown."""
    members: List[Member] = []
    for label, address in workers:
        parsed = parse_address(address)
        if parsed is None:
            return {}
        members.append((label, parsed[0], parsed[1]))
    ordered = sorted(members, key=functools.cmp_to_key(_ps_lite_order))
    return {member[0]: rank for rank, member in enumerate(ordered)}
