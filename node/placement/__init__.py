"""Placement and failover over NATS JetStream (docs/mesh.md, "Placement and failover").

A placed agent (one whose placement set names more than one node) can outlive its node: its
journal is replicated on the mesh stream, and this package holds what the nodes coordinate
through besides it: who is the agent's home now (a lease per agent, leases.py), what each node
can host (adverts.py) and the agents' components by checksum (components.py). Bucket names are
the mesh's (node/sync/nats/subjects.py); every NATS call has a deadline, and everything read
from a bucket is a member's claim, checked and bounded before use.
"""
