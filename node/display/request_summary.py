"""The one-line summary of an approval request (its `detail`), built from the request's shape.

A request is usually a JSON object, and an agent chooses its keys and their order: cut at a
length, `{"memo": "<1,000 characters>", "amount": 90000}` would show the operator a memo and no
amount. So the summary lists the top-level fields shortest-kind first (numbers, booleans and
null, then short strings, then long strings, arrays and objects), each value elided in the
middle, and says how many fields did not fit. Text that is not a JSON object is elided in the
middle. The CLI shows the request's size and hash beside it; the full request is in `request`.
"""

from __future__ import annotations

import json
import re
from typing import Any

# a finding's title, an approval's one-line summary: here (node/runtime/limits.py re-exports
# it), so the CLI shows approvals without loading the runtime package (wasmtime)
MAX_DETAIL = 1000
KEY_WIDTH = 40  # a key longer than this is elided in the middle
VALUE_WIDTH = 80  # so is a value's JSON text
SHORT_STRING = 40  # strings up to this long come before long values
ELLIPSIS = "…"
_BARE_KEY = re.compile(r"^[A-Za-z_][A-Za-z0-9_.-]*$")


def summary(capability: str, request: str, limit: int = MAX_DETAIL) -> str:
    """`spend: amount=90000, currency="EUR", memo="aaaa…aaaa"`, at most `limit` characters."""
    head = f"{capability}: "
    room = max(limit - len(head), 1)
    try:
        parsed = json.loads(request)
    except (ValueError, RecursionError):  # not JSON, or nested too deep to read
        parsed = None
    if isinstance(parsed, dict) and parsed:
        return head + _fields(parsed, room)
    return head + elide(request, room)


def elide(text: str, width: int) -> str:
    """`text`, or its start and end around an ellipsis when longer than `width`."""
    if len(text) <= width:
        return text
    if width <= 1:
        return ELLIPSIS[:width]
    keep = width - 1
    tail = keep // 2
    return text[: keep - tail] + ELLIPSIS + (text[-tail:] if tail else "")


def _fields(request: dict[str, Any], room: int) -> str:
    """As many `key=value` parts as fit in `room`, shortest kind first, then `… +N more`."""
    order = sorted(enumerate(request.items()), key=lambda item: (_rank(item[1][1]), item[0]))
    parts = [f"{_key(key)}={elide(_json(value), VALUE_WIDTH)}" for _, (key, value) in order]
    shown = ""
    for index, part in enumerate(parts):
        rest = len(parts) - index - 1
        note = f", … +{rest} more" if rest else ""
        joined = f"{shown}, {part}" if shown else part
        if len(joined) + len(note) <= room:
            shown = joined
            continue
        if not shown:  # not even the first fits: elide it rather than show nothing
            return elide(part, room - len(note)) + note
        return f"{shown}, … +{rest + 1} more"  # fits: checked with the part before
    return shown


def _rank(value: Any) -> int:
    if value is None or isinstance(value, bool | int | float):
        return 0
    if isinstance(value, str) and len(value) <= SHORT_STRING:
        return 1
    return 2


def _key(key: str) -> str:
    return elide(key if _BARE_KEY.match(key) else _json(key), KEY_WIDTH)


def _json(value: Any) -> str:
    return json.dumps(value, ensure_ascii=False, separators=(",", ":"))
