"""JSON Merge Patch (RFC 7396): what PATCH /api/v1/agents/{name} applies to a definition."""

from __future__ import annotations

from typing import Any

MERGE_PATCH = "application/merge-patch+json"


def merge_patch(target: Any, patch: Any) -> Any:
    """RFC 7396 section 2: an object patch merges member by member, recursively, and `null`
    removes a member; anything else (an array, a string, ...) replaces the target whole."""
    if not isinstance(patch, dict):
        return patch
    result = dict(target) if isinstance(target, dict) else {}
    for key, value in patch.items():
        if value is None:
            result.pop(key, None)
        else:
            result[key] = merge_patch(result.get(key), value)
    return result
