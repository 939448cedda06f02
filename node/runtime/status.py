"""A point-in-time view of one agent, as GET /api/v1/status reports it."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

import msgspec

State = Literal["running", "idle", "stopped", "error"]


class MemoryProfile(msgspec.Struct):
    heap_bytes: int
    fuel_remaining: int | None  # None when fuel_per_tick is unlimited


class StatusView(msgspec.Struct, omit_defaults=True):
    """The spec's agent status object; an agent without a live instance (stopped, starting,
    in error) adds what it is doing (`phase`) and why (`reason`)."""

    name: str
    status: State
    uptime_ms: int
    last_activity_ms_ago: int
    restart_count: int
    memory_profile: MemoryProfile
    phase: str | None = None  # "waiting to compile", "compiling", "restarting", ...
    reason: str | None = None
    # tasks whose run is parked until people decide (node/runtime/parking.py), oldest first
    parked_tasks: list[str] | None = None


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
    # without a live instance: what the agent is doing (worker.py's phases) and why
    phase: str | None = None
    reason: str | None = None
    faults: int = 0  # faults of this worker (each one a restart after the backoff)
    good_runs: int = 0  # runs of this worker that ended without a fault
    parked_tasks: tuple[str, ...] = ()  # in the order they were parked

    def to_api(self) -> StatusView:
        return StatusView(
            self.name,
            self.status,
            self.uptime_ms,
            self.last_activity_ms_ago,
            self.restart_count,
            MemoryProfile(self.heap_bytes, self.fuel_remaining),
            self.phase,
            self.reason,
            list(self.parked_tasks) or None,
        )
