"""Components made ready before they are needed: a node that may host a placed agent fetches
and compiles its component as soon as it learns of the placement (and of each upgrade), so a
takeover or a move finds it compiled: failover does not wait for a compile (seconds to tens of
seconds for a Python-built component).

One preparation runs at a time (a compile takes a core); a failed one (the component missing
from the mesh's store, refused by this node's compile check or limits, a registry that holds
other bytes under its version) is tried again after a backoff that doubles up to
MAX_BACKOFF_SECS, and a node never claims an agent whose component is not ready here
(node/placement/manager.py): a broken component cannot make it take over again and again.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import random
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from node.runtime.compiler import CompileError
from node.services.registry import RegistryError, RegistryService
from projections import catalogue as c

if TYPE_CHECKING:
    from node.placement.components import ComponentStore
    from node.runtime.engine import AgentEngine
    from projections.placements import Placed

log = logging.getLogger("agent-node.placement")
FIRST_BACKOFF_SECS = 1.0
MAX_BACKOFF_SECS = 300.0


# A component is ready here by its bytes *and* its reference: the same bytes published under
# another version (an upgrade that only renames) still have to be adopted into this registry.
_Key = tuple[str, str]


def _key(definition: c.AgentDefinition) -> _Key:
    return definition.component, definition.sha256


@dataclass
class _State:
    ready: bool = False
    failures: int = 0
    next_try: float = 0.0
    error: str = ""


class Preparer:
    def __init__(self, registry: RegistryService, engine: Callable[[], AgentEngine | None]) -> None:
        self._registry = registry
        self._engine = engine
        self._states: dict[_Key, _State] = {}
        self._queue: dict[_Key, c.AgentDefinition] = {}
        self._wake = asyncio.Event()

    def ready(self, definition: c.AgentDefinition) -> bool:
        state = self._states.get(_key(definition))
        return state is not None and state.ready

    def pending(self, definition: c.AgentDefinition) -> bool:
        """Being fetched or compiled here, not failed yet: it will be ready soon."""
        state = self._states.get(_key(definition))
        return state is not None and not state.ready and not state.error

    def error(self, definition: c.AgentDefinition) -> str:
        state = self._states.get(_key(definition))
        return state.error if state is not None else ""

    def loaded(self, definition: c.AgentDefinition) -> None:
        """The component runs here (it is in the registry and compiled): ready, for a move
        back or a takeover, without a look."""
        self._states[_key(definition)] = _State(ready=True)
        self._queue.pop(_key(definition), None)

    def want(self, definition: c.AgentDefinition) -> None:
        """Make this definition's component ready here (in the background)."""
        key = _key(definition)
        state = self._states.setdefault(key, _State())
        if not state.ready and key not in self._queue:
            self._queue[key] = definition
            self._wake.set()

    def forget(self, keep: set[str]) -> None:
        """Drop what is known of components no placed agent here names any more."""
        for key in [k for k in self._states if k[1] not in keep]:
            del self._states[key]
            self._queue.pop(key, None)

    async def run(self, components: ComponentStore) -> None:
        """Prepare what is wanted, one at a time, until cancelled."""
        while True:
            now = time.monotonic()
            due = [
                definition
                for key, definition in self._queue.items()
                if self._states.setdefault(key, _State()).next_try <= now
            ]
            if not due:
                self._wake.clear()
                waits = [self._states[key].next_try - now for key in self._queue]
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(self._wake.wait(), min(waits, default=60.0))
                continue
            definition = due[0]
            await self._prepare(components, definition)
            state = self._states.get(_key(definition))
            if state is None or state.ready:  # ready, or forgotten meanwhile
                self._queue.pop(_key(definition), None)

    async def _prepare(self, components: ComponentStore, definition: c.AgentDefinition) -> None:
        state = self._states[_key(definition)]
        started = time.monotonic()
        try:
            path = await self._fetched(components, definition)
            engine = self._engine()
            if engine is None:
                raise CompileError("the agent runtime is not running", "crashed")
            compiled = await asyncio.to_thread(engine.prepare, path)
        except Exception as exc:  # each kind below is one a component can cause
            error = _describe(exc)
            state.failures += 1
            backoff = min(MAX_BACKOFF_SECS, FIRST_BACKOFF_SECS * 2 ** (state.failures - 1))
            state.next_try = time.monotonic() + backoff * random.uniform(0.8, 1.2)
            if error != state.error:
                log.warning(
                    "placement: component %s (%s) is not ready here: %s; trying again in %.0f s",
                    definition.component,
                    definition.sha256,
                    error,
                    backoff,
                )
            state.error = error
            return
        state.ready, state.failures, state.error = True, 0, ""
        if compiled:
            log.info(
                "placement: component %s compiled ahead of a takeover in %.1f s",
                definition.component,
                time.monotonic() - started,
            )

    async def _fetched(self, components: ComponentStore, definition: c.AgentDefinition) -> Path:
        """The component's path in this node's registry, fetched from the mesh (by sha256,
        verified) when this registry does not hold it."""
        try:
            return self._registry.resolve(definition.component)
        except LookupError:
            pass
        sha = definition.sha256.removeprefix("sha256:")
        tmp = self._registry.tmp / f"fetch-{sha}"
        try:
            fetched = await components.fetch(sha, tmp)
            return await self._registry.adopt(
                definition.component, definition.sha256, fetched, definition.description
            )
        finally:
            tmp.unlink(missing_ok=True)


def _describe(exc: BaseException) -> str:
    if isinstance(exc, RegistryError | CompileError):
        return str(exc)
    return f"{type(exc).__name__}: {exc}" if str(exc) else type(exc).__name__


def wanted_components(placed_here: list[Placed]) -> set[str]:
    """The sha256 of every component a placed agent here may run: its definition, the one
    before (a standby on it until the new one is ready here) and the one an upgrade prepares.
    What a preparation learnt of any other is dropped; forgetting the one before made a
    replica compiling an upgrade's new bytes refuse the takeover on the old ones (issue 52)."""
    wanted: set[str] = set()
    for placed in placed_here:
        for definition in (placed.definition, placed.previous, placed.preparing):
            if definition is not None:
                wanted.add(definition.sha256)
    return wanted
