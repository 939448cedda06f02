"""SIGHUP: re-read the config and its `*_file`s, apply new tokens and secrets without a restart.

What changes at once: API tokens (`[[auth.tokens]]`, including peers' incoming sync tokens, and
their approver `groups`), the tokens presented to peers (`[[peers]] token`), `[secrets.*]` values
(an agent's next `get-secret` sees the new value), the policy set (`[policy]`: its files, request
fields and time zone, from the next request on), plus the log redactor's list; the open streams
(SSE, A2A, AG-UI) of a token no longer configured, or that lost the scope its route needs, end at
once.
Everything else needs a restart; a reload that finds other changes says which sections in the
log and in the event. A config that does not load is refused as a whole and the running one
stays; TLS files that do not load are not: the rest applies, and the log says (ERROR) that the
certificate was not reloaded.

Each applied reload is journaled as `node.reloaded` in the node-level `$node` journal (never
replicated) with names only: which tokens, peer tokens and secret keys are now configured,
never a value or a token's hash; and the hash of the policy set now in force.
"""

from __future__ import annotations

import asyncio
import logging
import ssl
from pathlib import Path
from typing import Any

import msgspec
from aiohttp import web

from node.config.load import load_config
from node.config.model import AgentConfig, Config, ConfigError
from node.context import CONTEXT
from node.ops.logsetup import Redactor, secrets_of
from node.policy.policyset import PolicyError
from node.services.approvals import APPROVALS
from node.services.deployments import DEPLOYMENTS
from node.streams.slots import STREAM_SLOTS
from node.sync.service import SYNC
from node.web.auth import TOKENS
from node.web.tls import SERVER_TLS, reload_certificate
from projections import catalogue as c

log = logging.getLogger("agent-node")
NODE_STREAM = "$node"
_RESTART_SECTIONS = ("node", "agents", "inference", "sync", "actions", "mcp", "tracing")


class Reloader:
    def __init__(self, app: web.Application, config_path: Path, redactor: Redactor | None) -> None:
        self._app = app
        self._path = config_path
        self._redactor = redactor
        self._running: asyncio.Task[bool] | None = None

    def trigger(self) -> None:
        """The signal handler: one reload at a time; a SIGHUP during one waits for it."""
        previous = self._running

        async def after_previous() -> bool:
            if previous is not None:
                await asyncio.gather(previous, return_exceptions=True)
            return await self.reload()

        self._running = asyncio.get_running_loop().create_task(after_previous())

    async def reload(self) -> bool:
        try:
            # the TLS files are loaded below, on their own: broken ones do not hold back tokens
            new = await asyncio.to_thread(load_config, self._path, load_tls=False)
        except ConfigError as exc:
            log.error("SIGHUP: config not reloaded, the running one stays: %s", exc)
            return False
        ctx = self._app[CONTEXT]
        old = ctx.config
        deployments = self._app.get(DEPLOYMENTS)
        declared = deployments.declared if deployments is not None else old.agents
        restart_needed = _sections_needing_restart(old, new, declared)
        self._app[TOKENS].reload(new.auth)
        slots = self._app.get(STREAM_SLOTS)
        if slots is not None:  # the streams of tokens now gone (or narrowed) end
            slots.revoke_invalid(self._app[TOKENS])
        old.auth = new.auth
        old.secrets = new.secrets  # the runtime reads secrets through this config object
        policy_set = self._apply_policy(new)
        if policy_set is not None:
            old.policy = new.policy
        peer_tokens = self._apply_peer_tokens(old, new)
        if self._redactor is not None:
            self._redactor.update(secrets_of(old))
        await self._reload_certificate(old)
        reloaded = c.NodeReloaded(
            tokens=sorted(t.name for t in new.auth.tokens),
            peer_tokens=peer_tokens,
            secrets=sorted(f"{d}.{k}" for d, values in new.secrets.items() for k in values),
            restart_needed=restart_needed,
            policy_set=policy_set,
        )
        await ctx.store.append(NODE_STREAM, *c.event_of(reloaded))
        log.info(
            "SIGHUP: reloaded %d token(s), %d peer token(s), %d secret(s)",
            len(reloaded.tokens),
            len(peer_tokens),
            len(reloaded.secrets),
        )
        if restart_needed:
            log.warning("SIGHUP: changes to %s need a restart to apply", ", ".join(restart_needed))
        return True

    def _apply_policy(self, new: Config) -> str | None:
        """The new policy set in force for the gate's next request; its hash (None: kept)."""
        gate = self._app.get(APPROVALS)
        if gate is None:
            return None
        try:
            return gate.policy.reload(new)
        except PolicyError as exc:  # a file changed again since the config was checked
            log.error("SIGHUP: policy set not reloaded, the running one stays: %s", exc)
            return None

    async def _reload_certificate(self, running: Config) -> None:
        """The running listener's certificate and key, read again (node/web/tls.py)."""
        listener = self._app.get(SERVER_TLS)
        if listener is None:
            return
        try:
            await asyncio.to_thread(reload_certificate, listener, running)
        except (OSError, ssl.SSLError) as exc:
            log.error(
                "SIGHUP: TLS certificate NOT reloaded (tokens and secrets were): the files do "
                "not load, the running certificate stays: %s",
                exc,
            )
            return
        log.info("SIGHUP: TLS certificate reloaded")

    def _apply_peer_tokens(self, old: Config, new: Config) -> list[str]:
        """New tokens for the peers the node already replicates to (new peers need a restart)."""
        tokens = {p.name: p.token for p in new.peers if p.token}
        replicators = self._app[SYNC].replicators
        applied = []
        for peer in old.peers:
            token = tokens.get(peer.name)
            if token is None:
                continue
            peer.token = token
            for replicator in replicators:
                if replicator.peer.name == peer.name:
                    replicator.use_token(token)
            applied.append(peer.name)
        return sorted(applied)


def _sections_needing_restart(
    old: Config, new: Config, declared_agents: list[AgentConfig]
) -> list[str]:
    """Sections whose change needs a restart; the agents as runtime.toml declared them at
    start (`old.agents` also holds those deployed through the API)."""
    before = {name: getattr(old, name) for name in _RESTART_SECTIONS}
    before["agents"] = declared_agents
    changed = [
        name
        for name in _RESTART_SECTIONS
        if msgspec.to_builtins(before[name]) != msgspec.to_builtins(getattr(new, name))
    ]
    if _peers_without_tokens(old) != _peers_without_tokens(new):
        changed.append("peers")
    return changed


def _peers_without_tokens(config: Config) -> list[dict[str, Any]]:
    return [
        {k: v for k, v in msgspec.to_builtins(p).items() if k not in ("token", "token_file")}
        for p in config.peers
    ]
