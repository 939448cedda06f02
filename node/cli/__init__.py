"""The `agent-node` command line: running a node, and a client of a running node's API."""
