"""A point-in-time view of one agent, as GET /api/v1/status reports it."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Literal

State = Literal["running", "idle", "stopped", "error"]


@dataclass(frozen=True)
class AgentStatus:
    name: str
    status: State
    uptime_ms: int
    last_activity_ms_ago: int
    restart_count: int
    heap_bytes: int
    fuel_remaining: int | None  # None when fuel_per_tick is unlimited
    last_error: str | None
    fuel_consumed: int  # total over the agent's life in this process
    runs: int

    def to_api(self) -> dict[str, Any]:
        """The spec's agent status object."""
        return {
            "name": self.name,
            "status": self.status,
            "uptime_ms": self.uptime_ms,
            "last_activity_ms_ago": self.last_activity_ms_ago,
            "restart_count": self.restart_count,
            "memory_profile": {
                "heap_bytes": self.heap_bytes,
                "fuel_remaining": self.fuel_remaining,
            },
        }
