"""runtime.toml, validated once at start-up: a bad key stops the node with a message naming it."""

from __future__ import annotations

import ipaddress
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Annotated, Any, Literal

import msgspec

from node.config.inference import AgentInference as AgentInference
from node.config.inference import InferenceBudget as InferenceBudget
from node.config.inference import InferenceSection as InferenceSection
from node.config.inference import ModelSection as ModelSection
from node.config.inference import inference_problems
from node.config.names import AGENT_NAME as AGENT_NAME
from node.config.names import AGENT_NAME_RE as AGENT_NAME_RE
from node.config.names import MESH_NAME as MESH_NAME
from node.config.names import SCOPES as SCOPES
from node.config.names import ConfigError as ConfigError
from node.config.tracing import TracingSection as TracingSection
from node.ops.filemodes import exposure
from node.runtime.limits import DEFAULT_FUEL_PER_TICK
from projections.catalogue import MAX_APPROVAL_TIMEOUT_SECS
from projections.packages import is_semver

REGISTRY_REFERENCE = "registry:"  # an agent component from the registry: registry:ID@VERSION

Scope = Literal["read", "operate", "publish", "sync", "admin"]
AgentName = Annotated[str, msgspec.Meta(pattern=AGENT_NAME)]
GroupName = Annotated[str, msgspec.Meta(pattern=AGENT_NAME)]  # an approver group of tokens
PositiveInt = Annotated[int, msgspec.Meta(gt=0)]
NonNegative = Annotated[float, msgspec.Meta(ge=0)]


# Secrets from the environment: AGENT_SECRET_<DOMAIN>_<KEY> is looked up only for domains and
# keys of lower-case letters, digits and `_`, so upper-casing cannot merge two names, and a
# config is refused when one secret domain is another plus `_...` (see _check_secret_domains).
ENV_SECRET_PART = re.compile(r"[a-z0-9_]{1,100}")


def secret_env_name(domain: str, key: str) -> str | None:
    """The environment variable of (domain, key), or None when it has no unambiguous one."""
    if not (ENV_SECRET_PART.fullmatch(domain) and ENV_SECRET_PART.fullmatch(key)):
        return None
    return f"AGENT_SECRET_{domain}_{key}".upper()


class _Section(msgspec.Struct, forbid_unknown_fields=True, kw_only=True):
    pass


class NodeSection(_Section, kw_only=True):
    name: AgentName
    listen: str = "127.0.0.1:8080"
    data_dir: str = "data"
    public_url: str | None = None
    # Operations knobs (docs/configuration.md); the defaults are what the spec fixes.
    sse_keepalive_secs: Annotated[float, msgspec.Meta(gt=0)] = 15.0
    sse_queue_max: PositiveInt = 10_000
    # open streams (SSE, A2A, AG-UI) and journal replays at once, in all and per token: past
    # them a new one is a 429 (node/streams/slots.py)
    sse_streams_max: PositiveInt = 2000
    sse_streams_per_token: PositiveInt = 100
    sse_replays_max: PositiveInt = 16
    sse_replays_per_token: PositiveInt = 4
    shutdown_drain_secs: NonNegative = 1.0
    max_upload_mb: PositiveInt = 64
    # one component compile (in a child process): wall-clock limit and address-space limit
    compile_timeout_secs: Annotated[float, msgspec.Meta(gt=0)] = 600.0
    compile_memory_mb: Annotated[int, msgspec.Meta(ge=256)] = 4096
    max_body_kb: PositiveInt = 1024
    map_size_mb: PositiveInt = 64
    # the in-memory read models' checkpoint (node/ops/checkpoint.py): every so many envelopes or
    # seconds, whichever comes first; a start after kill -9 folds at most about that much
    checkpoint_events: PositiveInt = 20_000
    checkpoint_secs: Annotated[float, msgspec.Meta(gt=0)] = 60.0
    # the asyncio event loop that serves (node/ops/eventloop.py): uvloop where installed
    event_loop: Literal["auto", "uvloop", "asyncio"] = "auto"
    # HTTPS on `listen` (node/web/tls.py): a PEM certificate (chain) and its unencrypted key
    tls_cert_file: str | None = None
    tls_key_file: str | None = None
    # hostile clients (node/web/connections.py): a request's headers within so long of the accept,
    # an idle keep-alive connection closed after so long, a client that stops reading a
    # response dropped after so long, a JSON body within so long (node/web/http.py), and
    # connection caps (0: from the fd limit)
    header_timeout_secs: Annotated[float, msgspec.Meta(gt=0)] = 10.0
    keepalive_timeout_secs: Annotated[float, msgspec.Meta(gt=0)] = 20.0
    write_timeout_secs: Annotated[float, msgspec.Meta(gt=0)] = 30.0
    body_timeout_secs: Annotated[float, msgspec.Meta(gt=0)] = 30.0
    max_connections: Annotated[int, msgspec.Meta(ge=0)] = 0
    max_connections_per_client: PositiveInt = 256
    # a page of logs, findings, envelopes or tasks stops at about this many bytes
    page_max_kb: PositiveInt = 1024
    # pending and running tasks one agent may have; a create past it is a 429
    max_open_tasks_per_agent: PositiveInt = 1000
    # task runs of one agent parked while people decide on their approval (docs/agents.md,
    # "A task waiting for people"); past it a run waits in place; 0: never park
    max_parked_runs_per_agent: Annotated[int, msgspec.Meta(ge=0, le=1000)] = 32
    # a recorded host call's result (docs/agents.md, "When a node dies mid-run") is journaled
    # up to this size; a larger one is not kept (a resumed run gets an error for it)
    call_record_max_kb: Annotated[int, msgspec.Meta(ge=1, le=192)] = 64
    # a rollout's probation (node/services/rollouts.py): after an upgrade or a rollback, the new
    # instance is watched for so many good runs or seconds, whichever comes first; more faults
    # than `probation_max_faults` in that window roll it back by itself
    probation_ticks: PositiveInt = 3
    probation_secs: Annotated[float, msgspec.Meta(gt=0)] = 30.0
    probation_max_faults: Annotated[int, msgspec.Meta(ge=0)] = 0
    # edge (issue 45): the node on a public address (node/web/connections.py, node/web/body.py,
    # node/web/inflight.py): connections kept for the health check and admin tokens, how
    # IPv6 clients are counted, requests and uploads one token may have in flight, an upload's
    # whole time (each of its chunks within body_timeout_secs)
    reserved_connections: Annotated[int, msgspec.Meta(ge=0)] = 16
    ipv6_client_prefix: Annotated[int, msgspec.Meta(ge=1, le=128)] = 64
    requests_per_token: PositiveInt = 64
    uploads_per_token: PositiveInt = 2
    upload_timeout_secs: Annotated[float, msgspec.Meta(gt=0)] = 600.0


class TokenEntry(_Section, kw_only=True):
    name: AgentName
    token: str | None = None
    token_sha256: Annotated[str, msgspec.Meta(pattern=r"^[0-9a-f]{64}$(?!\n)")] | None = None
    token_file: str | None = None  # read at start and on SIGHUP (node/config/secretfiles.py)
    scopes: list[Scope]
    # policy (issue 47): the approver groups a rule may ask for (`@approvers("1 from finance")`)
    groups: Annotated[list[GroupName], msgspec.Meta(max_length=100)] = []


class AuthSection(_Section, kw_only=True):
    tokens: list[TokenEntry] = []


class Peer(_Section, kw_only=True):
    name: AgentName
    url: str
    token: str | None = None  # one of token or token_file (read at start and on SIGHUP)
    token_file: str | None = None
    public_key: str | None = None


class SyncSection(_Section, kw_only=True):
    """Replicator tuning (docs/mesh.md); the defaults suit a LAN mesh."""

    batch_size: PositiveInt = 1000
    batch_max_kb: PositiveInt = 512
    # pushes outstanding per peer, each with its own journals (docs/mesh.md)
    pushes_in_flight: Annotated[int, msgspec.Meta(ge=1, le=16)] = 2
    backoff_initial_secs: Annotated[float, msgspec.Meta(gt=0)] = 0.5
    backoff_max_secs: Annotated[float, msgspec.Meta(gt=0)] = 30.0
    heartbeat_secs: Annotated[float, msgspec.Meta(gt=0)] = 10.0
    request_timeout_secs: Annotated[float, msgspec.Meta(gt=0)] = 30.0
    ack_flush_secs: NonNegative = 0.2


class MeshSection(_Section, kw_only=True):
    """How envelopes travel between nodes (docs/mesh.md): all-to-all HTTP pushes, or one NATS
    JetStream stream per mesh (node/sync/nats_*.py). Peers stay configured either way: their
    keys, and the HTTP pulls that repair gaps."""

    transport: Literal["http", "nats"] = "http"
    name: Annotated[str, msgspec.Meta(pattern=MESH_NAME)] = "default"
    nats_servers: list[str] = []
    nats_user: str | None = None
    nats_password: str | None = None  # or nats_password_file (read like token_file)
    nats_password_file: str | None = None
    nats_creds_file: str | None = None  # a .creds file (JWT + nkey seed)
    nats_nkey_seed_file: str | None = None  # an nkey seed file (SU...)
    stream_replicas: Annotated[int, msgspec.Meta(ge=1, le=5)] = 1
    stream_max_age_secs: NonNegative = 0.0  # 0: keep envelopes until stream_max_bytes
    stream_max_bytes: int = -1  # -1: unlimited
    publish_window: Annotated[int, msgspec.Meta(ge=1, le=10_000)] = 1000
    fetch_batch: Annotated[int, msgspec.Meta(ge=1, le=10_000)] = 1000
    heads_interval_secs: Annotated[float, msgspec.Meta(gt=0)] = 0.5
    # PEM CA certificate(s) that HTTPS peers' certificates must chain to (node/web/tls.py);
    # without it, the system's trust store
    ca_file: str | None = None
    # each HTTP request of a gap repair (docs/mesh.md): a peer that never answers costs this
    repair_timeout_secs: Annotated[float, msgspec.Meta(gt=0, le=300)] = 5.0
    # placement and failover (node/placement/, docs/mesh.md "Placement and failover"): the
    # lease of a placed agent's home, how often this node's advert is put, and how many
    # placed agents it offers to host
    lease_ttl_secs: Annotated[float, msgspec.Meta(ge=1, le=300)] = 10.0
    advert_interval_secs: Annotated[float, msgspec.Meta(ge=0.1, le=60)] = 2.0
    agent_slots: Annotated[int, msgspec.Meta(ge=0, le=100_000)] = 100
    # a deploy or upgrade of a placed agent waits this long for another node of its set to be
    # ready to take it over on the new version (issue 52); 0: it does not wait
    standby_wait_secs: Annotated[float, msgspec.Meta(ge=0, le=3600)] = 120.0


class GrantsSection(_Section, kw_only=True):
    domains: list[str] = []


class HttpSection(_Section, kw_only=True):
    allow_hosts: list[str] = []


RUN_LIMITS = ("tick_interval_ms", "fuel_per_tick", "memory_limit_mb", "tick_timeout_ms")


class AgentConfig(_Section, kw_only=True):
    name: AgentName
    component: str
    description: str = ""
    tick_interval_ms: PositiveInt = 1000
    mcp: bool = False
    fuel_per_tick: PositiveInt = DEFAULT_FUEL_PER_TICK  # every run is bounded
    memory_limit_mb: PositiveInt = 64
    tick_timeout_ms: PositiveInt = 10_000
    capabilities: dict[str, Any] = {}
    # capability → gated, plus the integer `timeout_secs` (checked in `_check_agent`)
    approval: dict[str, Any] = {}
    grants: GrantsSection = msgspec.field(default_factory=GrantsSection)
    http: HttpSection = msgspec.field(default_factory=HttpSection)
    inference: AgentInference = msgspec.field(default_factory=AgentInference)
    # node names that may host it (docs/mesh.md, "Placement and failover"); empty: this node
    placement: list[AgentName] = []

    @property
    def approval_timeout_secs(self) -> int:
        value = self.approval.get("timeout_secs", 300)
        return int(value)

    def is_gated(self, capability: str) -> bool:
        """Every use waits at the gate: for people (`true`), or for the policy set's ruling
        (`"policy"`), which may decide it at once."""
        if capability == "timeout_secs":
            return False
        rule = self.approval.get(capability)
        return rule is True or rule == APPROVE_BY_POLICY

    def decided_by_policy(self, capability: str) -> bool:
        return capability != "timeout_secs" and self.approval.get(capability) == APPROVE_BY_POLICY

    def limits(self) -> dict[str, int]:
        """The limits of each run, by the names the engine's `AgentSpec` and the journal's
        `AgentLimits` give them too."""
        return {name: getattr(self, name) for name in RUN_LIMITS}


class HostingConfig(_Section, kw_only=True):
    """This node's consent to host a placed agent that another node deployed, and what the
    agent may have here (docs/mesh.md, "Consent"): a replicated definition may ask for less,
    never more. Without an entry (or an [[agents]] entry, or an operator's deploy here) this
    node keeps a copy of the agent's journal and never runs it."""

    agent: AgentName
    # the node whose agent this is (the signer of its journal's seq 1, or whom it was handed):
    # another node's agent of that name is not hosted. Required when the entry grants a
    # secret domain, an ungated capability or network hosts (`_check_hosting`)
    owner: AgentName | None = None
    # sha256:<hex> of the components it may run; empty: any that passes this node's checks
    components: list[Annotated[str, msgspec.Meta(pattern=r"^sha256:[0-9a-f]{64}$(?!\n)")]] = []
    capabilities: dict[str, bool] = {}  # what it may use here; false or absent: not-permitted
    # capability → gated here whatever the definition says, plus `timeout_secs`
    approval: dict[str, Any] = {}
    grants: GrantsSection = msgspec.field(default_factory=GrantsSection)
    http: HttpSection = msgspec.field(default_factory=HttpSection)
    # the model aliases it may use here (those both name; none: this node's default model)
    inference: AgentInference = msgspec.field(default_factory=AgentInference)
    mcp: bool = False
    # the most a run may take here (and the shortest interval between ticks)
    fuel_per_tick: PositiveInt = DEFAULT_FUEL_PER_TICK
    memory_limit_mb: PositiveInt = 64
    tick_timeout_ms: PositiveInt = 10_000
    tick_interval_ms: PositiveInt = 100


# --- conformance (issue 46): the MCP transport ---------------------------------------------
ORIGIN = r"^https?://[^/?#\s]+$(?!\n)"  # scheme://host[:port], nothing after it


class McpSection(_Section, kw_only=True):
    """MCP's streamable HTTP transport (docs/protocols/mcp.md): a request whose `Origin` is
    neither the node's public URL's nor listed here is refused (403), against DNS rebinding."""

    allowed_origins: list[Annotated[str, msgspec.Meta(pattern=ORIGIN)]] = []
    # MCP sessions (Mcp-Session-Id, node/protocols/mcp_sessions.py), in memory: per token and
    # in all, and how long an idle one (no stream, no request in flight) is kept
    sessions_per_token: Annotated[int, msgspec.Meta(ge=1, le=10_000)] = 16
    sessions_max: Annotated[int, msgspec.Meta(ge=1, le=1_000_000)] = 1000
    session_idle_secs: Annotated[int, msgspec.Meta(ge=1, le=86_400)] = 900


# --- end conformance ----------------------------------------------------------------------


# ---- policy (issue 47): Cedar policies that decide routine approval requests (node/policy/)
APPROVE_BY_POLICY = "policy"  # `[agents.approval] cap = "policy"`: the policy set decides


class PolicySection(_Section, kw_only=True):
    """The policy set (docs/approvals.md): Cedar files, read at start and on SIGHUP; the
    time zone of `context.time`; and each capability's request fields a policy may read."""

    files: Annotated[list[str], msgspec.Meta(max_length=100)] = []
    timezone: str = "UTC"
    # capability → {field → Cedar type ("Long", "String", "Bool", "decimal", "Set<String>", a
    # trailing "?" when optional) or a table of them (a record)}; checked by node/policy/schema.py
    requests: dict[str, dict[str, Any]] = {}


class ActionSection(_Section, kw_only=True):
    url: str
    timeout_secs: Annotated[float, msgspec.Meta(gt=0)] = 10.0


# ---------------------------------------------------------------- delivery (issues 46 and 47:
# A2A push notifications and approval notifications, from one outbox; node/delivery/,
# docs/notifications.md)
ChannelName = Annotated[str, msgspec.Meta(pattern=AGENT_NAME)]
# `budget`: an inference budget crossed 80 % or 100 % (docs/inference.md, "Budgets")
ChannelEvent = Literal["requested", "escalated", "decided", "expired", "abandoned", "budget"]


class DeliverySection(_Section, kw_only=True):
    """The outbox (node/delivery/): where it may send, how hard it tries, what it holds."""

    # networks besides public addresses that notifications may go to ("10.0.0.0/8",
    # "127.0.0.1/32"): loopback, private, link-local and other special ranges are refused
    allow_networks: list[str] = []
    attempt_timeout_secs: Annotated[float, msgspec.Meta(gt=0, le=300)] = 10.0
    deadline_secs: Annotated[float, msgspec.Meta(gt=0, le=30 * 86_400)] = 86_400.0
    backoff_initial_secs: Annotated[float, msgspec.Meta(gt=0, le=3600)] = 1.0
    backoff_max_secs: Annotated[float, msgspec.Meta(gt=0, le=86_400)] = 300.0
    in_flight: Annotated[int, msgspec.Meta(ge=1, le=1000)] = 32
    per_host: Annotated[int, msgspec.Meta(ge=1, le=100)] = 4
    max_configs_per_task: Annotated[int, msgspec.Meta(ge=1, le=100)] = 10
    max_configs_per_client: Annotated[int, msgspec.Meta(ge=1, le=1_000_000)] = 1000
    max_pending_per_task: Annotated[int, msgspec.Meta(ge=1, le=100_000)] = 100
    max_pending_kb_per_task: Annotated[int, msgspec.Meta(ge=1, le=1_048_576)] = 1024
    max_pending_per_client: Annotated[int, msgspec.Meta(ge=1, le=10_000_000)] = 10_000
    max_pending_kb_per_client: Annotated[int, msgspec.Meta(ge=1, le=16_777_216)] = 16_384
    max_body_kb: Annotated[int, msgspec.Meta(ge=1, le=16_384)] = 256
    retention_secs: Annotated[float, msgspec.Meta(gt=0)] = 86_400.0


class ChannelConfig(_Section, kw_only=True):
    """Where people are told that a request waits for them (docs/notifications.md)."""

    name: ChannelName
    kind: Literal["webhook", "apprise"]
    url: str | None = None  # or url_file (read like token_file): it may hold credentials
    url_file: str | None = None
    secret: str | None = None  # a webhook's signing secret, whsec_<base64> (or secret_file)
    secret_file: str | None = None
    on: list[ChannelEvent] = msgspec.field(default_factory=lambda: ["requested", "budget"])
    agents: list[AgentName] = []  # only these agents' requests (empty: every agent)
    capabilities: list[str] = []  # only these capabilities (empty: every capability)
    # only requests whose approvers name one of these groups (empty: every request)
    groups: Annotated[list[GroupName], msgspec.Meta(max_length=100)] = []


class NotificationsSection(_Section, kw_only=True):
    """Approval notifications: the channels, and when a waiting request is escalated."""

    channels: list[ChannelConfig] = []
    # the console's address in the links of notifications; default <public_url>/console/
    console_url: str | None = None
    # an escalation goes out this long before a request times out (at most half its timeout)
    escalate_before_secs: Annotated[int, msgspec.Meta(gt=0, le=MAX_APPROVAL_TIMEOUT_SECS)] = 60


class Config(_Section, kw_only=True):
    node: NodeSection
    auth: AuthSection = msgspec.field(default_factory=AuthSection)
    peers: list[Peer] = []
    sync: SyncSection = msgspec.field(default_factory=SyncSection)
    mesh: MeshSection = msgspec.field(default_factory=MeshSection)
    inference: InferenceSection = msgspec.field(default_factory=InferenceSection)
    mcp: McpSection = msgspec.field(default_factory=McpSection)  # conformance (issue 46)
    agents: list[AgentConfig] = []
    # placed agents of other nodes this node consents to host (node/placement/consent.py)
    hosting: list[HostingConfig] = []
    actions: dict[str, ActionSection] = {}
    secrets: dict[str, dict[str, Any]] = {}
    delivery: DeliverySection = msgspec.field(default_factory=DeliverySection)  # delivery
    notifications: NotificationsSection = msgspec.field(default_factory=NotificationsSection)

    policy: PolicySection = msgspec.field(default_factory=PolicySection)  # issue 47
    tracing: TracingSection = msgspec.field(default_factory=TracingSection)  # issue 54
    # named groups of agents that share a budget (`@budget("... for group NAME")`, and the
    # inference budgets): group name → agent names (node/policy/budgets.py)
    agent_groups: Annotated[
        dict[GroupName, Annotated[list[AgentName], msgspec.Meta(max_length=1000)]],
        msgspec.Meta(max_length=100),
    ] = {}
    # Where the file was read from; relative paths in it are relative to its folder.
    base_dir: str = "."

    def path(self, relative: str) -> Path:
        return (Path(self.base_dir) / relative).resolve()

    @property
    def data_path(self) -> Path:
        return self.path(self.node.data_dir)

    def agent(self, name: str) -> AgentConfig | None:
        return next((a for a in self.agents if a.name == name), None)

    @property
    def public_url(self) -> str:
        scheme = "https" if self.node.tls_cert_file else "http"
        return (self.node.public_url or f"{scheme}://{self.node.listen}").rstrip("/")


def check_config(config: Config, source: str) -> Iterator[str]:
    """The problems of a converted config that the config alone shows (load.py adds
    those of the files it names: `*_file` secrets, TLS certificates)."""
    names = [a.name for a in config.agents]
    for name in {n for n in names if names.count(n) > 1}:
        yield f"{source}: agents: the name {name!r} is used twice"
    for i, agent in enumerate(config.agents):
        yield from _check_agent(agent, f"{source}: agents[{i}]")
        yield from placement_problems(agent.placement, config, f"{source}: agents[{i}].placement")
        if len(set(agent.placement)) > 1 and not agent.component.startswith(REGISTRY_REFERENCE):
            yield (
                f"{source}: agents[{i}].placement: a placed agent's component comes from the "
                "registry (registry:ID@VERSION), which the other nodes fetch it by"
            )
    yield from _check_hosting(config, source)
    yield from inference_problems(config, source)
    token_names = [t.name for t in config.auth.tokens]
    for i, token in enumerate(config.auth.tokens):
        where = f"{source}: auth.tokens[{i}]"
        given = [token.token, token.token_sha256, token.token_file]
        if sum(value is not None for value in given) != 1 and token.token_file is None:
            yield f"{where}: give exactly one of `token`, `token_sha256` or `token_file`"
        if token.token is not None and len(token.token) < 16:
            yield f"{where}.token: must be at least 16 characters"
        if token_names.count(token.name) > 1:
            yield f"{where}.name: {token.name!r} is used twice"
        if not token.scopes:
            yield f"{where}.scopes: give at least one scope"
    for domain, values in config.secrets.items():
        for key, value in values.items():
            if not isinstance(value, str):
                yield f"{source}: secrets.{domain}.{key}: expected a string"
    peer_names = [p.name for p in config.peers]
    for i, peer in enumerate(config.peers):
        if peer.name == config.node.name or peer_names.count(peer.name) > 1:
            yield f"{source}: peers[{i}].name: {peer.name!r} is not unique"
        if peer.token is None and peer.token_file is None:
            yield f"{source}: peers[{i}]: give `token` or `token_file`"
        if not re.match(r"^https?://", peer.url):
            yield f"{source}: peers[{i}].url: must start with http:// or https://"
    yield from _check_secret_domains(config, source)
    yield from _check_mesh(config, f"{source}: mesh")
    yield from delivery_problems(config, source)
    host, _, port = config.node.listen.rpartition(":")
    if not host or not port.isdigit() or not 0 <= int(port) < 65536:
        yield f"{source}: node.listen: expected HOST:PORT, got {config.node.listen!r}"
    public_url = config.node.public_url
    if public_url is not None and not re.match(r"^https?://[^/]", public_url):
        yield (
            f"{source}: node.public_url: must start with http:// or https:// and a host, "
            f"got {public_url!r}"
        )


def _check_hosting(config: Config, source: str) -> Iterator[str]:
    names = [h.agent for h in config.hosting]
    for i, hosting in enumerate(config.hosting):
        where = f"{source}: hosting[{i}]"
        if names.count(hosting.agent) > 1:
            yield f"{where}.agent: {hosting.agent!r} is named twice"
        if config.agent(hosting.agent) is not None:
            yield (
                f"{where}.agent: {hosting.agent!r} is declared in [[agents]] too, which is "
                "this node's consent already"
            )
        for key, value in hosting.approval.items():
            if key == "timeout_secs":
                if not isinstance(value, int) or isinstance(value, bool) or value < 1:
                    yield f"{where}.approval.timeout_secs: expected a positive integer"
            elif not isinstance(value, bool) and value != "policy":
                yield f'{where}.approval.{key}: expected true, false or "policy"'
        if hosting.owner is None:
            yield from _unscoped(hosting, where)
        if config.hosting and config.mesh.transport != "nats":
            yield f'{where}: hosting placed agents needs [mesh] transport = "nats"'
            return
        unserved = [d for d in hosting.grants.domains if d not in config.secrets]
        if unserved:
            yield (
                f"{where}.grants.domains: {unserved} have no [secrets.<domain>] table here "
                "(an empty one serves a domain from the environment)"
            )


def _unscoped(hosting: HostingConfig, where: str) -> Iterator[str]:
    """An entry without `owner` consents to any node's agent of that name: only when it
    gives nothing a stranger's agent of that name could abuse (docs/mesh.md, "Consent")."""
    gives: list[str] = []
    if hosting.grants.domains:
        gives.append(f"the secret domains {hosting.grants.domains}")
    ungated = sorted(
        cap
        for cap, on in hosting.capabilities.items()
        if on is True and hosting.approval.get(cap) not in (True, "policy")
    )
    if ungated:
        gives.append(f"the capabilities {ungated} without approval")
    if hosting.http.allow_hosts:
        gives.append(f"the network hosts {hosting.http.allow_hosts}")
    if gives:
        yield (
            f"{where}.owner: it grants {' and '.join(gives)}, so name the node whose agent "
            f'{hosting.agent!r} is (owner = "<the node that deploys it>"): without it any '
            "member of the mesh could deploy an agent of that name and get them"
        )


def _check_mesh(config: Config, where: str) -> Iterator[str]:
    """NATS settings, checked only when they are used; never echoes a credential."""
    mesh = config.mesh
    if mesh.transport != "nats":
        return
    if not mesh.nats_servers:
        yield f'{where}.nats_servers: give at least one server URL with transport = "nats"'
    for i, url in enumerate(mesh.nats_servers):
        if not re.match(r"^(nats|tls)://[^/\s]+$", url):
            yield f"{where}.nats_servers[{i}]: expected nats://HOST:PORT or tls://HOST:PORT"
    ways = [
        mesh.nats_user is not None,
        mesh.nats_creds_file is not None,
        mesh.nats_nkey_seed_file is not None,
    ]
    if sum(ways) > 1:
        yield (
            f"{where}: give one of nats_user (with a password), nats_creds_file "
            "or nats_nkey_seed_file"
        )
    if (mesh.nats_password is not None) != (mesh.nats_user is not None):
        yield f"{where}: nats_user and nats_password (or nats_password_file) go together"
    for key in ("nats_creds_file", "nats_nkey_seed_file"):
        path_text = getattr(mesh, key)
        if path_text is not None and not config.path(path_text).is_file():
            yield f"{where}.{key}: {path_text} is not a readable file"
        elif path_text is not None and (why := exposure(config.path(path_text))):
            yield f"{where}.{key}: {config.path(path_text)} {why}"
    try:
        import nats  # noqa: F401
    except ImportError:
        yield f"{where}.transport: \"nats\" needs nats-py: pip install 'agent-node[nats]'"


def _check_secret_domains(config: Config, source: str) -> Iterator[str]:
    """Refuse domains whose environment names overlap: with `payments` and `payments_admin`,
    AGENT_SECRET_PAYMENTS_ADMIN_API_KEY would be both payments/admin_api_key and
    payments_admin/api_key."""
    domains = {d for a in config.agents for d in a.grants.domains} | set(config.secrets)
    env_domains = sorted(d for d in domains if ENV_SECRET_PART.fullmatch(d))
    for short in env_domains:
        for long in env_domains:
            if long.startswith(short + "_"):
                yield (
                    f"{source}: secret domains {short!r} and {long!r} are ambiguous: the "
                    f"environment variable AGENT_SECRET_{long.upper()}_<KEY> could belong to "
                    f"either; rename one (for example without the `_`)"
                )


def agent_problems(agent: AgentConfig, where: str) -> Iterator[str]:
    """Every problem of one agent entry (the API's deployments are checked the same way)."""
    return _check_agent(agent, where)


MAX_PLACEMENT = 100


def placement_problems(placement: list[str], config: Config, where: str) -> Iterator[str]:
    """Why a placement set cannot be used (runtime.toml and the deploy API check the same):
    at most MAX_PLACEMENT node names, no name twice, this node among them, and a set of more
    than one node only with the NATS transport (the leases live there)."""
    if not placement:
        return
    if len(placement) > MAX_PLACEMENT:
        yield f"{where}: at most {MAX_PLACEMENT} node names, got {len(placement)}"
    for name in sorted({n for n in placement if placement.count(n) > 1}):
        yield f"{where}: the node {name!r} is named twice"
    for name in placement:
        if not AGENT_NAME_RE.fullmatch(name):
            yield f"{where}: {name[:80]!r} is not a node name ({AGENT_NAME})"
    if config.node.name not in placement:
        yield f"{where}: must include this node ({config.node.name!r}), which deploys it"
    if len(set(placement)) > 1 and config.mesh.transport != "nats":
        yield f'{where}: more than one node needs [mesh] transport = "nats"'


def _check_agent(agent: AgentConfig, where: str) -> Iterator[str]:
    if agent.component.startswith(REGISTRY_REFERENCE):
        _, at, version = agent.component.removeprefix(REGISTRY_REFERENCE).partition("@")
        if not at or not is_semver(version):
            yield (
                f"{where}.component: a registry reference names its version, "
                f"registry:ID@VERSION (SemVer), got {agent.component!r}"
            )
    for key, value in agent.approval.items():
        gates = value is True or value == APPROVE_BY_POLICY
        if key != "timeout_secs" and gates and agent.capabilities.get(key) is not True:
            yield (
                f"{where}.approval.{key}: gates a capability the agent does not have "
                f"(set capabilities.{key} = true, or drop the rule)"
            )
        if key == "timeout_secs":
            if isinstance(value, bool) or not isinstance(value, int) or value <= 0:
                yield f"{where}.approval.timeout_secs: expected a positive integer"
            elif value > MAX_APPROVAL_TIMEOUT_SECS:  # the event catalogue's bound
                limit = MAX_APPROVAL_TIMEOUT_SECS
                yield f"{where}.approval.timeout_secs: at most {limit} (30 days)"
        elif not isinstance(value, bool) and value != APPROVE_BY_POLICY:
            yield f'{where}.approval.{key}: expected a boolean, or "policy" (the policies decide)'
    for capability, value in agent.capabilities.items():
        if capability == "timeout_secs":
            yield f"{where}.capabilities.timeout_secs: not a capability name"
        if not isinstance(value, bool):
            yield f"{where}.capabilities.{capability}: expected a boolean"


def listen_address(config: Config) -> tuple[str, int]:
    host, _, port = config.node.listen.rpartition(":")
    return host.strip("[]"), int(port)


# ---------------------------------------------------------------- delivery (issues 46 and 47)
WEBHOOK_SECRET = re.compile(r"^whsec_[A-Za-z0-9+/]{32,88}={0,2}$(?!\n)")


def delivery_problems(config: Config, source: str) -> Iterator[str]:
    """[delivery] and [notifications]: never echoes a channel's URL or secret (they may hold
    credentials), only the key. Runs after the `*_file`s were read (secretfiles.py)."""
    for i, network in enumerate(config.delivery.allow_networks):
        try:
            ipaddress.ip_network(network, strict=False)
        except ValueError:
            yield f"{source}: delivery.allow_networks[{i}]: not a network (CIDR), got {network!r}"
    if config.delivery.backoff_max_secs < config.delivery.backoff_initial_secs:
        yield f"{source}: delivery.backoff_max_secs: must be at least backoff_initial_secs"
    notifications = config.notifications
    console = notifications.console_url
    if console is not None and not re.match(r"^https?://[^/]", console):
        yield f"{source}: notifications.console_url: must start with http:// or https://"
    names = [c.name for c in notifications.channels]
    for i, channel in enumerate(notifications.channels):
        where = f"{source}: notifications.channels[{i}]"
        if names.count(channel.name) > 1:
            yield f"{where}.name: {channel.name!r} is used twice"
        if channel.url is None and channel.url_file is None:
            yield f"{where}: give one of `url` or `url_file`"
        webhook_url = channel.url if channel.kind == "webhook" else None
        if webhook_url is not None and not re.match(r"^https?://[^/\s]+", webhook_url):
            yield f"{where}.url: a webhook URL starts with http:// or https:// and a host"
        if channel.kind == "webhook":
            if channel.secret is None and channel.secret_file is None:
                yield f"{where}: a webhook channel signs: give one of `secret` or `secret_file`"
            elif channel.secret is not None and not WEBHOOK_SECRET.match(channel.secret):
                yield (
                    f"{where}.secret: expected whsec_ and 24 to 64 random bytes in base64 "
                    "(Standard Webhooks)"
                )
        elif channel.secret is not None or channel.secret_file is not None:
            yield f"{where}: only a webhook channel has a `secret`"
        if not channel.on:
            yield f"{where}.on: give requested, escalated or both"
