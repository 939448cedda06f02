"""The agent authoring kit: `agent-node agent new|build|test|publish`, outside the repo.

An agent project is a folder with an `agent.toml` (name, version, language), the WIT world
the node hosts (`wit/agent.wit`, shipped inside this package so it works from a pip install),
the agent's source (`app.py` or `app.js`) and a test. docs/agents.md walks through it
(`agent-node docs agents` prints it from an install).
"""
