"""HTTP plumbing every API area shares: the front door, tokens, problem+json, the route
table, JSON-RPC framing, bounded JSON and connection limits."""
