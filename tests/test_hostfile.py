"""launch.py's hostfile format and the round-robin placement of tasks (no hosts needed)."""

from __future__ import annotations

import pytest

from mxbatch.backends.hosts import hostfile
from mxbatch.backends.hosts.hostfile import Host
from mxbatch.errors import SpecError


def test_every_form_of_line(tmp_path):
    text = ("# the cluster\n\nnode1\nnode2:2222   # ssh port\nnode3 slots=2\n"
            "root@10.0.0.4:22 slots=1\n")
    assert hostfile.parse(text, tmp_path / "hosts") == [
        Host("node1"), Host("node2", port=2222), Host("node3", slots=2),
        Host("root@10.0.0.4", port=22, slots=1)]


@pytest.mark.parametrize("line,problem", [
    ("node1 node2", "unexpected 'node2'"),
    ("node1:ssh", "bad port 'ssh'"),
    ("node1:0", "bad port '0'"),
    ("node1 slots=0", "slots must be a whole number of at least 1"),
    ("node1 slots=two", "slots must be a whole number"),
    ("no/de", "bad host name 'no/de'"),
])
def test_a_malformed_line_is_named_with_its_file_and_number(tmp_path, line, problem):
    path = tmp_path / "hosts"
    with pytest.raises(SpecError) as caught:
        hostfile.parse(f"good1\n# fine\n{line}\n", path)
    assert str(caught.value).startswith(f"{path}:3: ")
    assert problem in str(caught.value)


def test_a_hostfile_without_hosts_is_an_error(tmp_path):
    path = tmp_path / "hosts"
    path.write_text("# only comments\n\n   \n")
    with pytest.raises(SpecError, match="no hosts in the hostfile"):
        hostfile.load(path)
    with pytest.raises(SpecError, match="cannot read the hostfile"):
        hostfile.load(tmp_path / "missing")


def test_round_robin_from_the_first_host():
    hosts = [Host("a"), Host("b"), Host("c"), Host("d")]
    assert hostfile.place(hosts, 5) == [0, 1, 2, 3, 0]
    assert hostfile.place(hosts, 2) == [0, 1]


def test_slots_are_honoured():
    hosts = [Host("a", slots=1), Host("b"), Host("c", slots=2)]
    assert hostfile.place(hosts, 7) == [0, 1, 2, 1, 2, 1, 1]
    with pytest.raises(ValueError, match="7 tasks but the hosts offer 3 slots"):
        hostfile.place([Host("a", slots=1), Host("b", slots=2)], 7)
