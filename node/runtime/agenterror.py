"""The agent's own error, out of what its runtime wrote to stderr before it trapped.

A Python agent that raises prints a traceback, then componentize-py's runtime panics ("thread
... panicked at runtime/src/lib.rs") and the component traps (`unreachable`). The line that
matters to the author (`RuntimeError: crash requested`, where it was raised) is in the middle;
this finds it so that a fault's reason can say it first.
"""

from __future__ import annotations

import re
from collections.abc import Sequence

_PANIC = re.compile(r"^thread '.*' .*panicked at ")
# `ValueError: boom`, `app.PaymentRefused: ...`, `KeyError: 'x'`, `Error: boom` (JavaScript)
_EXCEPTION = re.compile(
    r"^(?:[A-Za-z_][\w.]*\.)?[A-Z]\w*(?:Error|Exception|Exit|Refused)?(?::\s.*)?$"
)
_FRAME = re.compile(r'^\s*File "(?:.*/)?([^/"]+)", line (\d+), in (.+)$')


def own_error(stderr: Sequence[str]) -> str | None:
    """`ExceptionType: message (app.py line 54, in call_tool)` from a stderr tail, or None."""
    lines = list(stderr)
    for i, line in enumerate(lines):
        if _PANIC.match(line):
            lines = lines[:i]
            break
    for i in range(len(lines) - 1, -1, -1):
        line = lines[i]
        if line.startswith((" ", "\t")) or not _EXCEPTION.match(line):
            continue
        if ":" not in line and not line.endswith(("Error", "Exception")):
            continue  # a bare word is no exception line
        frame = next((m for m in map(_FRAME.match, reversed(lines[:i])) if m), None)
        where = f" ({frame[1]} line {frame[2]}, in {frame[3]})" if frame else ""
        return line.strip()[:300] + where
    return None
