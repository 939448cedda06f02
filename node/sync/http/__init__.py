"""The HTTP transport of the mesh: push every journal homed here to each peer (the receiving
side is node/api/sync.py, through the shared receive rules, node/sync/rules/)."""
