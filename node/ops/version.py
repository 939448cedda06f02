"""The runtime version lives here only: the agent card, agents.md and svc_build_info read it."""

import functools
import os
import subprocess
from pathlib import Path

__version__ = "0.1.0"


@functools.cache
def build_commit() -> str:
    """Commit of the running code: AGENT_NODE_COMMIT, else git, else 'unknown'."""
    if env := os.environ.get("AGENT_NODE_COMMIT"):
        return env
    try:
        out = subprocess.run(
            ["git", "rev-parse", "--short=12", "HEAD"],
            cwd=Path(__file__).resolve().parent,
            capture_output=True,
            text=True,
            timeout=2,
            check=True,
        )
        return out.stdout.strip() or "unknown"
    except (OSError, subprocess.SubprocessError):
        return "unknown"
