"""Keys and helpers shared by the event store's tests (real keys, real signatures)."""

from nacl.signing import SigningKey

from eventstore.store import ForeignEnvelope

KEY = SigningKey(b"\1" * 32)
PEER_KEY = SigningKey(b"\2" * 32)


def foreign(envelopes):
    """Stored envelopes as a peer pushes them."""
    return [ForeignEnvelope(e.stream, e.seq, e.payload, e.signature) for e in envelopes]
