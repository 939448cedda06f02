"""Node adverts: which placed agents each node is ready to host, in a key-value bucket whose
keys expire.

Every node puts `{node, hosts, free_slots, at}` under the hex of its name in
`MESH_<mesh>_NODES` every `advert_interval_secs`; the bucket forgets a key three intervals after
its last put, so `live()` sees only nodes that advertised lately (their server's clock). An
advert is the node's claim: the generated NATS permissions let a node write only its own key,
and what is read is checked and bounded (a record that names another node, is too large or
holds bad names is skipped whole).

`hosts` names the placed agents this node would take over or accept in a move now: its
operator consents (node/placement/consent.py), it serves their grant domains, and their
component is fetched and compiled here (node/placement/prepare.py). That is all placement needs
to know, so an advert says nothing more of the node (not its secret domains, not its actions).
`free_slots`: `[mesh] agent_slots` less the placed agents it runs. `draining`: the node is
draining or drained (`node drain`, SIGTERM): it hosts nothing more (its `hosts` is empty) and
a move to it is refused, saying so; put at once when the drain begins, not an interval later.
`prepared`: `agent=sha256:...` of each definition ready here, the placed one of each agent it
hosts and the one an upgrade prepares (`agent.preparing`), so the upgrading home knows a
standby is (node/placement/standby.py) and a drain prefers a node on the version it runs;
`preparing`: the same names (or an agent's) for what it is fetching or compiling now, so the
home waits for those nodes and not for ones that never will be.

What a node can serve (`served_domains`): the secret domains of its `[secrets.<domain>]` tables
that hold a value, or for which an `AGENT_SECRET_<DOMAIN>_...` environment variable is set (an
empty table declares a domain served from the environment).
"""

from __future__ import annotations

import asyncio
import logging
import os
import time
from collections.abc import Callable, Iterable, Mapping
from typing import Annotated

import msgspec
from nats.js import JetStreamContext
from nats.js.kv import KeyValue

from node.config.model import AGENT_NAME_RE, ENV_SECRET_PART, Config, MeshSection
from node.placement.buckets import BucketRules, last_value, open_kv
from node.sync.nats.subjects import Bucket, bucket_name, kv_stream, name_of, token

log = logging.getLogger("agent-node.placement")
MAX_ADVERT_BYTES = 64 * 1024
MAX_NAMES = 1000  # domains, capabilities
MAX_NAME_CHARS = 1000  # as the event catalogue's names
MAX_SLOTS = 100_000
MAX_NODES_READ = 10_000
ADVERT_LIVES = 3  # intervals
Names = Annotated[
    list[Annotated[str, msgspec.Meta(min_length=1, max_length=MAX_NAME_CHARS)]],
    msgspec.Meta(max_length=MAX_NAMES),
]


class Advert(msgspec.Struct):  # fields added later are ignored by this version
    node: str
    hosts: Names = []
    free_slots: Annotated[int, msgspec.Meta(ge=0, le=MAX_SLOTS)] = 0
    at: float = 0.0  # the node's wall clock: for people, never for a decision
    draining: bool = False  # draining or drained: it takes no placed agent until it restarts
    # "agent=sha256:..." of the definitions ready here (each hosted agent's placed one, and
    # an upgrade's, `agent.preparing`): the home's upgrade waits for one node of the set to
    # say so, and a drain hands an agent to such a node first
    prepared: Names = []
    # the same names (an agent, or agent=sha256:...) for what it is fetching or compiling now
    preparing: Names = []


_decoder = msgspec.json.Decoder(Advert)


def served_domains(config: Config, environ: Mapping[str, str] | None = None) -> tuple[str, ...]:
    """The secret domains this node can serve (see the module's doc)."""
    env = os.environ if environ is None else environ
    domains = []
    for domain, values in config.secrets.items():
        from_env = ENV_SECRET_PART.fullmatch(domain) is not None and any(
            name.startswith(f"AGENT_SECRET_{domain.upper()}_") for name in env
        )
        if (values or from_env) and len(domain) <= MAX_NAME_CHARS:
            domains.append(domain)
    return tuple(sorted(domains))


def checked(key: str, data: bytes) -> Advert | None:
    """The advert under `key`, or None when it is not one to believe (see the module doc)."""
    if len(data) > MAX_ADVERT_BYTES:
        return None
    try:
        advert = _decoder.decode(data)
        named = name_of(key)
    except (msgspec.DecodeError, msgspec.ValidationError, ValueError, RecursionError):
        return None
    if advert.node != named or not AGENT_NAME_RE.fullmatch(named):
        return None
    return advert


class NodeAdverts:
    """This node's advert (`run()` puts it every interval) and the mesh's live ones."""

    def __init__(
        self,
        node: str,
        mesh: MeshSection,
        hosts: Callable[[], list[str]],
        hosting: Callable[[], int],
        draining: Callable[[], bool] = lambda: False,
        prepared: Callable[[], list[str]] = list,
        preparing: Callable[[], list[str]] = list,
    ) -> None:
        self.node = node
        self._mesh = mesh
        self._bucket = bucket_name(mesh.name, Bucket.NODES)
        self._hosts = hosts  # the placed agents this node is ready to host now
        self._hosting = hosting  # placed agents this node runs now
        self._draining = draining
        self._prepared = prepared
        self._preparing = preparing
        self._js: JetStreamContext | None = None
        self._kv: KeyValue | None = None
        self.ttl = mesh.advert_interval_secs * ADVERT_LIVES
        self.call_timeout = min(5.0, max(0.5, mesh.advert_interval_secs))

    async def attach(self, js: JetStreamContext) -> None:
        """Use this JetStream context (again after a reconnect); creates the bucket when
        missing with a TTL of three intervals; BucketError when the one found keeps adverts
        less than two of this node's intervals (its advert would flicker) or over a minute."""
        interval = self._mesh.advert_interval_secs
        self._kv, self.ttl = await open_kv(
            js,
            self._bucket,
            # another node's interval may differ; a bucket that keeps adverts for an hour
            # would show dead nodes as live
            BucketRules(interval * ADVERT_LIVES, (interval * 2, max(60.0, interval * 10))),
            replicas=self._mesh.stream_replicas,
            max_value_bytes=MAX_ADVERT_BYTES,
            timeout=max(self.call_timeout, 5.0),
        )
        self._js = js

    def detach(self) -> None:
        self._kv = self._js = None

    def advert(self) -> Advert:
        free = max(0, min(MAX_SLOTS, self._mesh.agent_slots - self._hosting()))
        if self._draining():
            return Advert(self.node, [], free, time.time(), draining=True)
        hosts = [name for name in self._hosts() if len(name) <= MAX_NAME_CHARS][:MAX_NAMES]
        prepared = [key for key in self._prepared() if len(key) <= MAX_NAME_CHARS][:MAX_NAMES]
        pending = [key for key in self._preparing() if len(key) <= MAX_NAME_CHARS][:MAX_NAMES]
        return Advert(self.node, hosts, free, time.time(), prepared=prepared, preparing=pending)

    async def put(self) -> int:
        """Put this node's advert now; its revision."""
        if self._kv is None:
            raise ConnectionError("not connected to NATS")
        async with asyncio.timeout(self.call_timeout):
            return await self._kv.put(token(self.node), msgspec.json.encode(self.advert()))

    async def withdraw(self) -> None:
        """Delete this node's advert (a node that stops hosting, or shuts down)."""
        if self._kv is not None:
            async with asyncio.timeout(self.call_timeout):
                await self._kv.delete(token(self.node))

    async def run(self) -> None:
        """Put the advert every interval until cancelled; a failed put is retried next time."""
        last_error = ""
        while True:
            try:
                await self.put()
                last_error = ""
            except Exception as exc:  # the loop goes on whatever one put met
                text = f"{type(exc).__name__}: {exc}"
                if text != last_error:
                    log.warning("placement: putting this node's advert failed: %s", text)
                last_error = text
            await asyncio.sleep(self._mesh.advert_interval_secs)

    async def live(self, nodes: Iterable[str] | None = None) -> dict[str, Advert]:
        """The fresh, valid adverts: of `nodes` (a placement set), or of every node that has
        one (at most MAX_NODES_READ). Raises TimeoutError / nats errors when NATS does not
        answer in time (no advert is not the same as not knowing)."""
        js = self._js
        if js is None:
            raise ConnectionError("not connected to NATS")
        if nodes is None:
            prefix = f"$KV.{self._bucket}."
            async with asyncio.timeout(self.call_timeout):
                info = await js.stream_info(kv_stream(self._bucket), subjects_filter=">")
            subjects = list(info.state.subjects or {})[:MAX_NODES_READ]
            keys = [s.removeprefix(prefix) for s in subjects if s.startswith(prefix)]
        else:
            keys = [token(n) for n in nodes if AGENT_NAME_RE.fullmatch(n)]
        found: dict[str, Advert] = {}
        for key in keys:
            msg = await last_value(js, self._bucket, key, self.call_timeout)
            advert = checked(key, msg.data or b"") if msg is not None else None
            if advert is not None:
                found[advert.node] = advert
        return found
