"""The receive rules every transport shares (an HTTP push, a NATS batch, a repair's page): what
a peer's envelope must be to be stored, who may write a journal, how a move is judged, how a
fork between epochs is resolved. The entry point is `receiver.Receiver`; docs/mesh.md states
the whole trust model."""
