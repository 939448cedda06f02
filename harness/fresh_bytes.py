"""The same component as new bytes: a custom section appended, so no node has compiled it
yet (an upgrade whose replicas are cold on it). tests/failover and bench/ share it."""

from __future__ import annotations

from pathlib import Path


def _leb128(n: int) -> bytes:
    out = bytearray()
    while True:
        byte, n = n & 0x7F, n >> 7
        out.append(byte | (0x80 if n else 0))
        if not n:
            return bytes(out)


def fresh_bytes(wasm: Path, tag: str, folder: Path) -> Path:
    """`wasm` with a custom section naming `tag` appended: bytes no node has compiled."""
    name, payload = b"agent-node-test", tag.encode()
    body = _leb128(len(name)) + name + payload
    path = folder / f"{wasm.stem}-{tag}.wasm"
    path.write_bytes(wasm.read_bytes() + b"\x00" + _leb128(len(body)) + body)
    return path
