"""The size limits an agent lives within (docs/agents.md lists them for agent authors).

Every payload an agent hands the host ends up in one journal event, and an event must stay
well under the sync push limit (`max_body_kb`, 1 MiB by default, with the payload base64'd
and JSON-escaped inside it): an envelope a peer refuses would stall replication of its
journal for good. So each agent-supplied payload is capped at 64 KiB, measured as the UTF-8
bytes of the text the agent passed.
"""

from __future__ import annotations

from node.display.request_summary import MAX_DETAIL as MAX_DETAIL  # a title, a summary

MAX_PAYLOAD_BYTES = 64 * 1024  # approval request, state value, task input/output/progress
MAX_STATE_KEY_BYTES = 256
MAX_EVENT_BYTES = 256 * 1024  # a whole task.created (input and the A2A message that carried it)
MAX_TEXT = 64 * 1024  # log messages and finding details (longer ones are cut, not refused)
# Fuel of one run when `fuel_per_tick` is not set: a trivial Python tick takes ~25k-250k,
# so this is thousands of ticks' worth, yet a loop ends within a few seconds of wasm time.
DEFAULT_FUEL_PER_TICK = 2_000_000_000


def utf8_size(text: str) -> int:
    return len(text.encode("utf-8", "surrogatepass"))


def over_limit(what: str, text: str, limit: int = MAX_PAYLOAD_BYTES) -> str | None:
    """A message naming the limit when `text` is larger than `limit` bytes, else None."""
    size = utf8_size(text)
    if size <= limit:
        return None
    return f"{what} is {size} bytes; the limit is {limit} bytes"
