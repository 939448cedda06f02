"""`agent publish`: upload a built component to a node's registry through its public API
(`POST /api/v1/registry/packages`, multipart, scope `publish`)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from node.cli.node_api import Node

REGISTRY_PATH = "/api/v1/registry/packages"


def publish(
    node: Node, package_id: str, version: str, description: str, component: Path
) -> dict[str, Any]:
    """The node's answer: {id, version, checksum, published_at}. Raises ClientError."""
    with component.open("rb") as wasm:
        result: dict[str, Any] = node.call(
            "POST",
            REGISTRY_PATH,
            data={"id": package_id, "version": version, "description": description},
            files={"wasm": (component.name, wasm, "application/wasm")},
        )
    return result


def reference(package_id: str, version: str) -> str:
    """What runtime.toml's `component` (or a deploy) names the published package by."""
    return f"registry:{package_id}@{version}"
