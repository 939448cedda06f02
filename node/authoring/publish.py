"""`agent publish`: upload a built component to a node's registry through its public API
(`POST /api/v1/registry/packages`, multipart, scope `publish`), saying after a second what it
waits for: the upload, then the node's compile check of the component."""

from __future__ import annotations

from pathlib import Path
from typing import Any, BinaryIO

from node.cli.node_api import Node
from node.cli.progress import while_waiting
from node.display.humanize import size

REGISTRY_PATH = "/api/v1/registry/packages"


class _Counted:
    """The component's file as the upload reads it, counting the bytes handed to the socket."""

    def __init__(self, file: BinaryIO) -> None:
        self.file = file
        self.name = file.name
        self.sent = 0

    def read(self, count: int = -1) -> bytes:
        chunk = self.file.read(count)
        self.sent += len(chunk)
        return chunk

    def seek(self, offset: int, whence: int = 0) -> int:
        position = self.file.seek(offset, whence)
        self.sent = position  # a retried upload starts over
        return position

    def tell(self) -> int:
        return self.file.tell()

    def fileno(self) -> int:
        return self.file.fileno()


def publish(
    node: Node, package_id: str, version: str, description: str, component: Path
) -> dict[str, Any]:
    """The node's answer: {id, version, checksum, published_at}. Raises ClientError."""
    total = component.stat().st_size
    with component.open("rb") as wasm:
        counted = _Counted(wasm)

        def step(seconds: float) -> str:
            if counted.sent < total:
                return f"uploading {size(counted.sent)} of {size(total)} ({seconds:.0f} s)"
            return (
                f"uploaded {size(total)}; waiting for the node to check that it compiles "
                f"(once per component: seconds to a minute) ({seconds:.0f} s)"
            )

        result: dict[str, Any] = while_waiting(
            lambda: node.call(
                "POST",
                REGISTRY_PATH,
                data={"id": package_id, "version": version, "description": description},
                files={"wasm": (component.name, counted, "application/wasm")},
            ),
            step,
        )
    return result


def reference(package_id: str, version: str) -> str:
    """What runtime.toml's `component` (or a deploy) names the published package by."""
    return f"registry:{package_id}@{version}"
