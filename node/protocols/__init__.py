"""The agent protocols' own wire formats on top of the node: A2A 1.0 JSON-RPC and AG-UI runs.

Everything here reads the same projections and appends to the same journals as the spec's
/api/v1 endpoints, so a task sent over A2A is the task GET /api/v1/a2a/tasks shows, and an
interrupt answered over AG-UI is an approval decision like any other.
"""
