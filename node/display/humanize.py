"""Durations and sizes for people (`3 min 20 s`, `1.4 MiB`): the CLI's tables print these,
its `--json` the raw numbers."""

from __future__ import annotations

import re

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


# Characters a terminal or a browser does not show as themselves: C0 and C1 controls and DEL
# (Cc; ESC starts the sequences that clear a screen or retitle a window, CR overwrites a row),
# format characters (Cf: bidi overrides such as U+202E, zero-width spaces and joiners, the
# soft hyphen, tag characters), lone surrogates (Cs, which cannot even be encoded) and the line
# and paragraph separators (Zl, Zp). Written out for Unicode 14 (Python 3.11's unicodedata;
# tests/node/test_visible.py checks the list against it), because computing it at import would
# cost every CLI command a scan of every code point.
_C0_BUT_NEWLINE = r"\x00-\x09\x0b-\x1f"
_OTHERS = (
    r"\x7f-\x9f\xad\u0600-\u0605\u061c\u06dd\u070f\u0890\u0891\u08e2\u180e"
    r"\u200b-\u200f\u2028-\u202e\u2060-\u2064\u2066-\u206f\ud800-\udfff\ufeff\ufff9-\ufffb"
    r"\U000110bd\U000110cd\U00013430-\U00013438\U0001bca0-\U0001bca3\U0001d173-\U0001d17a"
    r"\U000e0001\U000e0020-\U000e007f"
)
# the inside of a regex character class, as regex escapes (ASCII text)
INVISIBLE_CLASS = rf"\n{_C0_BUT_NEWLINE}{_OTHERS}"
_INVISIBLE = re.compile(f"[{INVISIBLE_CLASS}]")
_INVISIBLE_BUT_NEWLINE = re.compile(f"[{_C0_BUT_NEWLINE}{_OTHERS}]")
_SHORT_ESCAPES = {"\n": "\\n", "\r": "\\r", "\t": "\\t"}


def _escape(match: re.Match[str]) -> str:
    char = match.group()
    if char in _SHORT_ESCAPES:
        return _SHORT_ESCAPES[char]
    code = ord(char)
    if code < 0x100:
        return f"\\x{code:02x}"
    return f"\\u{code:04x}" if code < 0x10000 else f"\\U{code:08x}"


def visible(text: str) -> str:
    """`text` with every invisible character written as its escape (`\\x1b`, `\\u202e`,
    `\\n`): one line that shows what is there. Text from agents, peers and other clients
    passes through this before a terminal sees it; `--json` output does not (it is exact)."""
    return _INVISIBLE.sub(_escape, text) if _INVISIBLE.search(text) else text


def visible_lines(text: str) -> str:
    """`visible`, keeping the line breaks of text the CLI composed of several lines (whose
    values went through `visible` already, so none of their own line breaks is left)."""
    return _INVISIBLE_BUT_NEWLINE.sub(_escape, text)


def first_invisible(text: str) -> str | None:
    """The first invisible character of `text` (for an error that names it), or None."""
    found = _INVISIBLE.search(text)
    return found.group() if found else None
