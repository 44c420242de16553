import pytest

from mxbatch.spec.units import format_duration, parse_duration, parse_port_range, parse_size_mib


@pytest.mark.parametrize("text,seconds", [(90, 90), ("90", 90), ("30s", 30), ("10m", 600),
                                          ("1h30m", 5400), ("2d", 172800), ("1:30:00", 5400),
                                          ("05:00", 300), ("1.5h", 5400), ("250ms", 0.25)])
def test_durations(text, seconds):
    assert parse_duration(text) == seconds


@pytest.mark.parametrize("text", ["", "soon", "10 parsecs", "-5", "0", "1h foo", True, "h",
                                  [], ["1h"], {"h": 1}, None])
def test_bad_durations(text):
    with pytest.raises(ValueError):
        parse_duration(text)


def test_format_duration():
    assert format_duration(5400) == "1:30:00"
    assert format_duration(0.5) == "0:00:01"


@pytest.mark.parametrize("text,mib", [(512, 512), ("512M", 512), ("2G", 2048), ("2GB", 2048),
                                      ("1.5GiB", 1536), ("1024K", 1), ("1T", 1048576)])
def test_sizes(text, mib):
    assert parse_size_mib(text) == mib


@pytest.mark.parametrize("text", ["lots", "-1G", "0", "2X", False, [], {"G": 2}, None])
def test_bad_sizes(text):
    with pytest.raises(ValueError):
        parse_size_mib(text)


@pytest.mark.parametrize("text,bounds", [("9000-9999", (9000, 9999)), ([9000, 9001], (9000, 9001)),
                                         (9000, (9000, 9000)), (" 9000 - 9010 ", (9000, 9010))])
def test_port_ranges(text, bounds):
    assert parse_port_range(text) == bounds


@pytest.mark.parametrize("text", ["9999-9000", "80-90", "9000-70000", "a-b", [1], True])
def test_bad_port_ranges(text):
    with pytest.raises(ValueError):
        parse_port_range(text)
