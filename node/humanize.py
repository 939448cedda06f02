"""Durations and sizes for people (`3 min 20 s`, `1.4 MiB`): the CLI's tables print these,
its `--json` the raw numbers."""

from __future__ import annotations

_UNITS = ("KiB", "MiB", "GiB", "TiB", "PiB")


def duration(seconds: float | None) -> str:
    """Two units at most, the larger first: `250 ms`, `4.2 s`, `3 min 20 s`, `2 h 5 min`,
    `3 d 4 h`; empty for None (a figure the node does not know)."""
    if seconds is None:
        return ""
    if seconds < 0:
        return "-" + duration(-seconds)
    if seconds < 1:
        return f"{round(seconds * 1000)} ms"
    if seconds < 10:
        return f"{seconds:.1f} s"
    whole = round(seconds)
    for big, size, small, rest in (("d", 86_400, "h", 3600), ("h", 3600, "min", 60)):
        if whole >= size:
            count, remainder = divmod(whole, size)
            part = remainder // rest
            return f"{count} {big} {part} {small}" if part else f"{count} {big}"
    if whole >= 60:
        minutes, secs = divmod(whole, 60)
        return f"{minutes} min {secs} s" if secs else f"{minutes} min"
    return f"{whole} s"


def size(count: float | None) -> str:
    """Bytes in binary units with one decimal below 100: `512 B`, `1.4 MiB`, `120 MiB`."""
    if count is None:
        return ""
    if count < 1024:
        return f"{int(count)} B"
    value = float(count)
    for unit in _UNITS:
        value /= 1024
        if value < 1024 or unit == _UNITS[-1]:
            return f"{value:.1f} {unit}" if value < 100 else f"{value:.0f} {unit}"
    raise AssertionError("unreachable")
