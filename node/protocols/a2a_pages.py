"""ListTasks a page at a time, bounded in bytes as REST's lists are (node/web/pages.py): a
task's large parts are left out of the list (GetTask has them whole), and the page stops at
about `[node] page_max_kb`. Bounded in count only, 100 read-token calls of 60 KB tasks that
never read their answers pinned 1.4 GB (issue 45).

A part left out becomes a text part saying so, with `metadata.elided` = its size in bytes, so
any A2A client can show it; the task's `metadata.elided` names where parts were left out.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

import msgspec

from node.services.tasks import ELIDE_BYTES
from node.web.pages import byte_page

_encode = msgspec.json.Encoder().encode


def tasks_page(tasks: Iterable[dict[str, Any]], max_bytes: int) -> tuple[list[msgspec.Raw], bool]:
    """The tasks (A2A JSON), large parts left out, until about `max_bytes` (at least one);
    each as raw JSON (encoded once); whether more were left for the next page."""
    encoded, more = byte_page((elided(task) for task in tasks), max_bytes)
    return [msgspec.Raw(task) for task in encoded], more


def elided(task: dict[str, Any]) -> dict[str, Any]:
    """`task` (a fresh dict: its nested values may be the read model's, so they are copied
    where they change, never changed) with every part over ELIDE_BYTES (of the status
    message, the artifacts, the history) left out."""
    where = []
    status = task.get("status")
    if isinstance(status, dict) and isinstance(status.get("message"), dict):
        message = _without_large_parts(status["message"])
        if message is not None:
            task["status"] = {**status, "message": message}
            where.append("status")
    for field in ("artifacts", "history"):
        holders = task.get(field)
        if not isinstance(holders, list):
            continue
        changed = [_without_large_parts(holder) for holder in holders]
        if any(c is not None for c in changed):
            task[field] = [c if c is not None else h for c, h in zip(changed, holders, strict=True)]
            where.append(field)
    if where:
        task["metadata"] = {**task.get("metadata", {}), "elided": where}
    return task


def _without_large_parts(holder: Any) -> dict[str, Any] | None:
    """A copy of `holder` (a message or an artifact) with its large parts left out, or None
    when it has none."""
    parts = holder.get("parts") if isinstance(holder, dict) else None
    if not isinstance(parts, list):
        return None
    sizes = [len(_encode(part)) for part in parts]
    if all(size <= ELIDE_BYTES for size in sizes):
        return None
    kept = [
        part
        if size <= ELIDE_BYTES
        else {
            "text": f"(left out of the list: {size} bytes; GetTask returns the task whole)",
            "metadata": {"elided": size},
        }
        for part, size in zip(parts, sizes, strict=True)
    ]
    return {**holder, "parts": kept}
