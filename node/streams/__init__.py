"""Server-Sent Event streams: one in-process bus, four endpoints (docs/streams.md)."""
