"""Durations and sizes as the CLI prints them for people (issue 29 item 6)."""

import pytest

from node.display.humanize import duration, size


@pytest.mark.parametrize(
    ("seconds", "text"),
    [
        (None, ""),
        (0, "0 ms"),
        (0.25, "250 ms"),
        (4.24, "4.2 s"),
        (42, "42 s"),
        (60, "1 min"),
        (200, "3 min 20 s"),
        (3600, "1 h"),
        (7500, "2 h 5 min"),
        (86_400 * 3 + 3600 * 4 + 59, "3 d 4 h"),
        (-200, "-3 min 20 s"),
    ],
)
def test_durations(seconds, text):
    assert duration(seconds) == text


@pytest.mark.parametrize(
    ("count", "text"),
    [
        (None, ""),
        (0, "0 B"),
        (1023, "1023 B"),
        (1024, "1.0 KiB"),
        (1_468_006, "1.4 MiB"),
        (120 * 1024 * 1024, "120 MiB"),
        (3 * 1024**3, "3.0 GiB"),
        (2048 * 1024**5, "2048 PiB"),
    ],
)
def test_sizes(count, text):
    assert size(count) == text
