"""A point-in-time view of one agent, as GET /api/v1/status reports it."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

import msgspec

State = Literal["running", "idle", "stopped", "error"]


class MemoryProfile(msgspec.Struct):
    heap_bytes: int
    fuel_remaining: int | None  # None when fuel_per_tick is unlimited


class StatusView(msgspec.Struct):
    """The spec's agent status object."""

    name: str
    status: State
    uptime_ms: int
    last_activity_ms_ago: int
    restart_count: int
    memory_profile: MemoryProfile


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

    def to_api(self) -> StatusView:
        return StatusView(
            self.name,
            self.status,
            self.uptime_ms,
            self.last_activity_ms_ago,
            self.restart_count,
            MemoryProfile(self.heap_bytes, self.fuel_remaining),
        )
