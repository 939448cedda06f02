"""Helpers of the mesh sync tests and bench: signed chains, full-mesh configs, bulk journals."""

from __future__ import annotations

import base64

from nacl.signing import SigningKey

from eventstore.envelope import Event, digest_of, encode_event, sign, utc_now
from harness.mesh import SYNC_TUNING as SYNC_TUNING
from harness.mesh import peer_token as peer_token
from harness.mesh import peer_toml as peer_toml
from harness.mesh import prefill as prefill
from harness.mesh import write_mesh as write_mesh


def signed_chain(
    key: SigningKey,
    origin: str,
    stream: str,
    count: int,
    *,
    start: int = 1,
    prev: str = "",
    data: dict | None = None,
) -> list[dict]:
    """`count` envelopes (as pushed) of a valid chain signed by `key`, without any store."""
    out = []
    for seq in range(start, start + count):
        event = Event(
            type="finding",
            ts=utc_now(),
            origin=origin,
            prev=prev,
            data=data or {"severity": "info", "title": f"{stream} #{seq}", "detail": ""},
        )
        payload = encode_event(event)
        digest = digest_of(payload)
        signature = sign(key, stream, seq, digest)
        out.append(
            {
                "seq": seq,
                "agent": stream,
                "payload": base64.b64encode(payload).decode(),
                "signature": "ed25519:" + base64.b64encode(signature).decode(),
            }
        )
        prev = "sha256:" + digest.hex()
    return out
