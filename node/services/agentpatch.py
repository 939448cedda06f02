"""PATCH /api/v1/agents/{name}: the deployed definition as a PUT body, merge-patched (RFC 7396).

PUT replaces the whole definition (a key left out takes its default); PATCH starts from what
runs, so a patch names only what changes, and `null` puts a key back to its default.
"""

from __future__ import annotations

from typing import Any, Literal

import msgspec

from node.services.definitions import DeployRequest
from node.services.mergepatch import merge_patch
from node.web.http import Problem
from projections import catalogue as c


class AgentPatch(msgspec.Struct, kw_only=True, forbid_unknown_fields=True):
    """A merge patch of a deployment (the PUT body's keys, each optional; `null` removes one,
    so that its default applies). Inside `capabilities` and `approval`, `null` removes that
    entry."""

    component: str | None = None
    description: str | None = None
    tick_interval_ms: int | None = None
    fuel_per_tick: int | None = None
    memory_limit_mb: int | None = None
    tick_timeout_ms: int | None = None
    mcp: bool | None = None
    capabilities: dict[str, bool | None] | None = None
    approval: dict[str, bool | int | Literal["policy"] | None] | None = None
    grant_domains: list[str] | None = None
    allow_hosts: list[str] | None = None
    inference_models: list[str] | None = None
    inference_default: str | None = None
    # the nodes that may host it, replaced whole; `null` or absent: the set it has (docs/api.md)
    placement: list[str] | None = None


def request_of(definition: c.AgentDefinition) -> dict[str, Any]:
    """The PUT body that deploys `definition` as it is (the target a patch applies to)."""
    return {
        "component": definition.component,
        "description": definition.description,
        **msgspec.structs.asdict(definition.limits),
        "mcp": definition.mcp,
        "capabilities": dict(definition.capabilities),
        "approval": dict(definition.approval),
        "grant_domains": list(definition.grant_domains),
        "allow_hosts": list(definition.allow_hosts),
        "inference_models": list(definition.inference_models),
        "inference_default": definition.inference_default,
    }


def patched(definition: c.AgentDefinition, patch: dict[str, Any]) -> DeployRequest:
    """The PUT body that `patch` makes of `definition`; 400 when the result is not one."""
    merged = merge_patch(request_of(definition), patch)
    try:
        return msgspec.convert(merged, DeployRequest)
    except msgspec.ValidationError as exc:
        detail = str(exc).replace("`$.", "`")
        raise Problem(400, f"invalid definition after the patch: {detail}") from None
