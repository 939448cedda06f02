"""What one mesh message carries: a run of one journal's envelopes as a JSON array
(nats/publisher.py), read by the consumer (nats/consumer.py) and by the repair of a gap from
the stream (nats/repair_queue.py)."""

from __future__ import annotations

import msgspec

_run_decoder = msgspec.json.Decoder(list[msgspec.Raw])


def envelopes_of(data: bytes) -> list[msgspec.Raw]:
    """A message's envelopes: a JSON array of them (nats/publisher.py), or one envelope (the
    single-envelope messages of earlier versions). Bytes that are neither go to the receive
    path as one item, which rejects them as malformed (and reports who published them)."""
    if data[:1] == b"[":
        try:
            return _run_decoder.decode(data)
        except (msgspec.DecodeError, RecursionError):
            pass
    return [msgspec.Raw(data)]
