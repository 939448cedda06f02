"""The NATS JetStream transport of the mesh: one stream, a pull consumer per node, heads in a
key-value bucket, repairs over HTTP (docs/mesh.md)."""
