"""The placement buckets of a mesh (nats_subjects.py's style: a mesh name, then a role)."""

from __future__ import annotations


def leases_bucket(mesh: str) -> str:
    """Key-value bucket of the agents' leases (key: hex of the agent's name)."""
    return f"MESH_{mesh}_LEASES"


def nodes_bucket(mesh: str) -> str:
    """Key-value bucket of the nodes' adverts (key: hex of the node's name)."""
    return f"MESH_{mesh}_NODES"


def components_bucket(mesh: str) -> str:
    """Object store bucket of the agents' components (object name: sha256 hex)."""
    return f"MESH_{mesh}_COMPONENTS"


def kv_stream(bucket: str) -> str:
    return f"KV_{bucket}"


def kv_subject(bucket: str, key: str) -> str:
    return f"$KV.{bucket}.{key}"


def object_stream(bucket: str) -> str:
    return f"OBJ_{bucket}"
