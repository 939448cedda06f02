"""A standby at every moment (issue 52): a deploy or an upgrade of a placed agent waits, with
progress, until another node of its set is ready to take it over on the new version.

An upgrade first journals `agent.preparing` {definition} in the agent's journal: the set's
other nodes fetch and compile that component (node/placement/prepare.py) while the home still
runs, and they still stand by on, the old one; each says so in its advert (`prepared`). Only
then does the home switch (`agent.placed`), so a kill -9 or SIGTERM of the home right after
the upgrade answered finds a node ready on the new version. A first deploy waits the same way
for a node whose advert lists the agent. The wait is bounded (`[mesh] standby_wait_secs`) and
can be skipped (`?wait_standby=false`, `--no-wait-standby`); the answer says how many nodes
of the set are ready either way.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING

from projections import catalogue as c

if TYPE_CHECKING:  # no NATS import here: the deployments (node/services) name Standby
    from node.placement.adverts import Advert

POLL_SECS = 0.25


def prepared_key(agent: str, definition: c.AgentDefinition) -> str:
    """How an advert names a prepared definition of `agent`."""
    return f"{agent}={definition.sha256}"


@dataclass(frozen=True)
class Standby:
    """The other nodes of the set (`of`) and those ready to take the agent over (`ready`)."""

    ready: tuple[str, ...]
    of: tuple[str, ...]

    def text(self) -> str:
        if not self.of:
            return ""
        if self.ready:
            return (
                f"ready to take it over: {len(self.ready)} of {len(self.of)} other nodes of "
                f"its set ({', '.join(self.ready)})"
            )
        return (
            f"ready to take it over: none of {', '.join(self.of)} yet (they fetch and compile "
            "its component; `agents show` names them once they are)"
        )


async def wait_for_standby(
    live: Callable[[list[str]], Awaitable[dict[str, Advert]]],
    others: list[str],
    is_ready: Callable[[Advert], bool],
    is_pending: Callable[[Advert], bool],
    within: float,
    grace: float,
    progress: Callable[[Standby], None],
    stop: Callable[[], bool] = lambda: False,
) -> Standby:
    """Poll the adverts of `others` until one `is_ready`, or `within` seconds passed (0: look
    once), or none is live, or, `grace` seconds in (adverts lag an interval), none is
    preparing (`is_pending`): nobody is left to wait for; or `stop()` (this node drains).
    Each look is told to `progress`. Adverts that cannot be read count as none."""
    started = time.monotonic()
    deadline = started + within
    while True:
        adverts: dict[str, Advert] = {}
        with contextlib.suppress(Exception):
            async with asyncio.timeout(2.0):
                adverts = await live(others)
        ready = tuple(n for n in others if (a := adverts.get(n)) is not None and is_ready(a))
        standby = Standby(ready, tuple(others))
        progress(standby)
        now = time.monotonic()
        pending = any(is_pending(a) for a in adverts.values())
        over = now >= deadline or not adverts or (now - started >= grace and not pending)
        if ready or over or stop():
            return standby
        await asyncio.sleep(min(POLL_SECS, max(0.0, deadline - now)))
