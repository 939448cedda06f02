"""What a lifecycle change is doing now, and the probation that watches a rollout.

A change (deploy, upgrade, rollback, stop, start, remove) says which step it is at, so a client
waiting on it can tell an operator what it waits for (`agents upgrade` prints it after a
second): checking the component, draining the old instance (and which run it finishes), waiting
for the new instance's first tick.

After an upgrade or an operator's rollback whose first tick succeeded, the new instance is on
probation: watched for `probation_ticks` good runs or `probation_secs` seconds, whichever comes
first. More than `probation_max_faults` faults (each one a restart) in that window roll the
agent back by itself (`agent.rolled_back`, `automatic`, with the reason); an operator's own
change to the agent ends the watch. An automatic rollback is not itself watched, so a chain of
them never unwinds the whole history. Both live in memory: a restarted node shows neither.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Literal

import msgspec

from node.config.model import NodeSection
from node.runtime.worker import DRAINING, AgentWorker

log = logging.getLogger(__name__)
WATCH_INTERVAL_SECS = 0.1  # how often a probation reads its worker's counters

RolloutState = Literal["probation", "rolling_back", "passed", "rolled_back", "failed", "ended"]


class ChangeView(msgspec.Struct, kw_only=True):
    """A lifecycle change in progress on the agent: what, which step, for how long."""

    action: str
    step: str
    seconds: float


class RolloutView(msgspec.Struct, kw_only=True, omit_defaults=True):
    """The latest rollout's probation: in progress, passed, or rolled back (and why)."""

    revision: int
    state: RolloutState
    good_runs: int
    ticks_needed: int
    faults: int
    max_faults: int
    seconds: float
    window_secs: float
    reason: str | None = None
    rolled_back_to: int | None = None


@dataclass
class Change:
    action: str
    step: str
    worker: AgentWorker | None = None  # the instance being drained, for what it still runs
    started: float = field(default_factory=time.monotonic)

    def view(self) -> ChangeView:
        step = self.step
        worker = self.worker
        if worker is not None and worker.status().phase == DRAINING:
            busy = worker.busy_with()
            step = f"draining the old instance: {busy}" if busy else "ending the old instance"
        return ChangeView(
            action=self.action, step=step, seconds=round(time.monotonic() - self.started, 1)
        )


# (agent, revision that failed, reason) → the revision rolled back to, or None when none
RollBack = Callable[[str, int, str], Awaitable[int | None]]


@dataclass
class Rollout:
    """One probation: the worker of `revision` watched against the settings."""

    agent: str
    revision: int
    worker: AgentWorker
    settings: NodeSection
    state: RolloutState = "probation"
    reason: str | None = None
    rolled_back_to: int | None = None
    started: float = field(default_factory=time.monotonic)
    ended: float | None = None
    good_runs: int = 0
    faults: int = 0
    task: asyncio.Task[None] | None = None

    def view(self) -> RolloutView:
        end = self.ended if self.ended is not None else time.monotonic()
        return RolloutView(
            revision=self.revision,
            state=self.state,
            good_runs=self.good_runs,
            ticks_needed=self.settings.probation_ticks,
            faults=self.faults,
            max_faults=self.settings.probation_max_faults,
            seconds=round(end - self.started, 1),
            window_secs=self.settings.probation_secs,
            reason=self.reason,
            rolled_back_to=self.rolled_back_to,
        )

    def finish(self, state: RolloutState, reason: str | None = None) -> None:
        if self.state in ("probation", "rolling_back"):
            self.state, self.reason, self.ended = state, reason, time.monotonic()

    def read(self) -> str | None:
        """Update the counters; why the rollout failed (faults over the limit), else None."""
        status = self.worker.status()
        self.good_runs, self.faults = status.good_runs, status.faults
        if self.faults > self.settings.probation_max_faults:
            last = f"; last error: {status.last_error}" if status.last_error else ""
            return (
                f"{self.faults} fault(s) in its first {time.monotonic() - self.started:.1f} s "
                f"of probation (at most {self.settings.probation_max_faults} allowed){last}"
            )
        return None

    @property
    def passed(self) -> bool:
        return (
            self.good_runs >= self.settings.probation_ticks
            or time.monotonic() - self.started >= self.settings.probation_secs
        )


class Rollouts:
    """The changes in progress and the latest rollout of each agent (in memory)."""

    def __init__(self, settings: NodeSection) -> None:
        """`settings`: [node]'s probation_ticks, probation_secs and probation_max_faults."""
        self.settings = settings
        self.changes: dict[str, Change] = {}
        self.latest: dict[str, Rollout] = {}

    def begin(self, agent: str, action: str, step: str) -> Change:
        """A change of `agent` starts: a watch in progress ends (the operator decides now)."""
        self.end_watch(agent, f"ended by an operator's {action}")
        change = self.changes[agent] = Change(action, step)
        return change

    def done(self, agent: str) -> None:
        self.changes.pop(agent, None)

    def step(self, agent: str, step: str) -> None:
        """The change in progress on `agent` goes on to `step` (what GET shows it waits for)."""
        change = self.changes.get(agent)
        if change is not None:
            change.step = step

    def end_watch(self, agent: str, reason: str) -> None:
        rollout = self.latest.get(agent)
        if rollout is not None and rollout.state == "probation":
            rollout.finish("ended", reason)
            if rollout.task is not None and rollout.task is not asyncio.current_task():
                rollout.task.cancel()

    def forget(self, agent: str) -> None:
        self.end_watch(agent, "the agent was removed")
        self.latest.pop(agent, None)

    def rolling_back(self, agent: str, revision: int) -> bool:
        """Whether `revision` of `agent` is the rollout being rolled back now (not ended by an
        operator's change meanwhile)."""
        rollout = self.latest.get(agent)
        return (
            rollout is not None
            and rollout.revision == revision
            and (rollout.state == "rolling_back")
        )

    def watch(self, agent: str, revision: int, worker: AgentWorker, roll_back: RollBack) -> None:
        """Put `revision`'s instance on probation (the first tick already succeeded)."""
        self.end_watch(agent, "a newer rollout started")
        rollout = self.latest[agent] = Rollout(agent, revision, worker, self.settings)
        rollout.task = asyncio.get_running_loop().create_task(self._watch(rollout, roll_back))

    async def _watch(self, rollout: Rollout, roll_back: RollBack) -> None:
        try:
            while rollout.state == "probation":
                why = rollout.read()
                if why is not None:
                    await self._roll_back(rollout, why, roll_back)
                    return
                if rollout.passed:
                    rollout.finish("passed")
                    log.info("agent %s: revision %d passed its probation", *_who(rollout))
                    return
                await asyncio.sleep(WATCH_INTERVAL_SECS)
        except asyncio.CancelledError:
            rollout.finish("ended", "the watch was stopped")
            raise

    async def _roll_back(self, rollout: Rollout, why: str, roll_back: RollBack) -> None:
        log.warning("agent %s: revision %d failed its probation: %s", *_who(rollout), why)
        rollout.state, rollout.reason = "rolling_back", why
        try:
            target = await roll_back(rollout.agent, rollout.revision, why)
        except Exception as exc:
            log.exception("agent %s: the automatic rollback failed", rollout.agent)
            rollout.finish("failed", f"{why}; the automatic rollback failed: {exc}")
            return
        if target is None:
            rollout.finish("failed", f"{why}; no earlier deployment to roll back to")
        else:
            rollout.rolled_back_to = target
            rollout.finish("rolled_back", why)


def _who(rollout: Rollout) -> tuple[str, int]:
    return rollout.agent, rollout.revision
