"""The agent authoring kit: `agent-node agent new|build|test|publish`, outside the repo.

An agent project is a folder with an `agent.toml` (name, version, language), the WIT world
the node hosts (`wit/agent.wit`, shipped inside this package so it works from a pip install),
the agent's source (`app.py` or `app.js`) and a test. docs/agents.md walks through it
(`agent-node docs agents` prints it from an install).
"""

# each language an agent is written in, and its source file (node/authoring/project.py); here,
# so that `agent-node agent new --lang` is offered without loading projections (msgspec)
LANGUAGES = {"python": "app.py", "js": "app.js"}
