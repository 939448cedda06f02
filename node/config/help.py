"""What every key of runtime.toml means, in one place: `config schema` puts these into its JSON
Schema (`description`), so an editor shows them, and tests/node/test_config_init.py checks that
every field of node/config/model.py's structs has one (a new key without a line here fails it).

docs/configuration.md says the same at more length; keep the two in step.
"""

from __future__ import annotations

from typing import Any

import msgspec

from node.config import model as c

KEYS: dict[type[msgspec.Struct], dict[str, str]] = {
    c.Config: {
        "node": "This node: its name, where it listens, its data folder and operations knobs.",
        "auth": "The API's bearer tokens and their scopes.",
        "peers": "The other nodes of the mesh this node replicates with.",
        "sync": "Tuning of the replicator (HTTP pushes between peers); defaults suit a LAN.",
        "mesh": "How envelopes travel between nodes: HTTP pushes or a NATS JetStream stream.",
        "inference": "The models agents' inference calls may use (OpenAI-compatible servers "
        "and Anthropic's Messages API), their prices and limits (docs/inference.md).",
        "mcp": "MCP's HTTP transport: the browser origins it accepts besides the node's own.",
        "agents": "The agents this node hosts, each a WebAssembly component.",
        "hosting": "Placed agents of other nodes this node consents to host when they fail over "
        'or move here, and what they may have here (docs/mesh.md, "Consent"); without an '
        "entry it keeps their journals and never runs them.",
        "actions": "Capability name to the URL an approved action is POSTed to.",
        "secrets": "Secret domain to {key: value} (or key_file: path); agents read them "
        "with get-secret while granted the domain. Never journaled or logged.",
        "delivery": "The outbox of notifications (A2A push, approval channels): where it may "
        "send, retries, limits (docs/notifications.md).",
        "notifications": "Who is told that an approval request waits: channels and escalation.",
        "tracing": "OpenTelemetry spans of runs, host calls, approval waits and inference, "
        'sent over OTLP/HTTP (off by default; docs/inference.md, "Traces").',
        "policy": "Approval policies in Cedar that permit, forbid or ask people about each use "
        'of a capability whose approval is "policy" (docs/approvals.md).',
        "agent_groups": "Group name to agent names: a budget shared by the group "
        '(@budget("amount 100 per day for group NAME"), docs/approvals.md).',
    },
    c.NodeSection: {
        "name": "The node's name: the origin of every envelope it signs, its identity to peers.",
        "listen": "HOST:PORT the HTTP API listens on.",
        "data_dir": "Journal, node key, registry blobs and caches (relative to this file).",
        "public_url": "The URL clients reach this node at (agent card, did:web, agents.md); "
        "default http://<listen>.",
        "sse_keepalive_secs": "Interval of keepalive events on every SSE stream.",
        "sse_queue_max": "Events buffered per SSE client before it is disconnected.",
        "shutdown_drain_secs": "After SIGTERM, how long health answers 503 while requests "
        "are still served.",
        "max_upload_mb": "Largest registry upload (413 above).",
        "compile_timeout_secs": "Longest one component compile may take before its child "
        "process is killed.",
        "compile_memory_mb": "Address space of one compile child (a Python agent needs "
        "about 1 GiB).",
        "max_body_kb": "Largest JSON request body (413 above).",
        "map_size_mb": "Initial LMDB map size; it doubles whenever it fills.",
        "checkpoint_events": "Checkpoint the in-memory read models after this many envelopes.",
        "checkpoint_secs": "...or after this many seconds with any new envelope.",
        "event_loop": "The serving event loop: auto (uvloop where installed), uvloop or asyncio.",
        "tls_cert_file": "PEM certificate (chain) for HTTPS on listen; with tls_key_file.",
        "tls_key_file": "The certificate's unencrypted PEM key (mode 0600).",
        "header_timeout_secs": "From accept to the end of a request's headers; then closed.",
        "keepalive_timeout_secs": "An idle keep-alive connection is closed after this.",
        "write_timeout_secs": "A client that stops reading a response is dropped after this.",
        "body_timeout_secs": "A JSON body that did not come with its headers: 408 after this.",
        "max_connections": "Open connections in total (0: the fd limit less a quarter).",
        "max_connections_per_client": "Open connections from one client address.",
        "page_max_kb": "A page of logs, findings, tasks or envelopes stops near this size.",
        "max_open_tasks_per_agent": "Pending and running tasks of one agent (429 past it).",
        "max_parked_runs_per_agent": "Task runs of one agent parked while people decide on "
        "their approval (the agent works on meanwhile); past it a run waits in place. 0: never.",
        "call_record_max_kb": "A recorded host call's result kept in the journal, at most "
        "(1-192 KiB); a larger one is not kept and a resumed run gets an error for it.",
        "sse_streams_max": "Open SSE, A2A and AG-UI streams on the node (429 past it).",
        "sse_streams_per_token": "Open streams of one token (429 past it).",
        "sse_replays_max": "Streams replaying a backlog at once (429 past it).",
        "sse_replays_per_token": "Backlog replays of one token at once (429 past it).",
        "probation_ticks": "After an upgrade or rollback, good runs that end its probation.",
        "probation_secs": "...or seconds of probation, whichever comes first.",
        "probation_max_faults": "More faults than this in probation roll it back by itself.",
        # edge (issue 45)
        "reserved_connections": "Connections kept for GET /api/v1/health and admin tokens.",
        "ipv6_client_prefix": "IPv6 clients are counted per network of this prefix length.",
        "requests_per_token": "Requests of one token in flight at once, streams aside (429).",
        "uploads_per_token": "Registry uploads of one token at once (429 past it).",
        "upload_timeout_secs": "A whole registry upload (each chunk: body_timeout_secs).",
    },
    c.AuthSection: {
        "tokens": "The API's tokens; make one with `agent-node token new NAME --scopes ...`.",
    },
    c.TokenEntry: {
        "name": "The identity recorded as operator with this token's decisions.",
        "token": "The token in clear (at least 16 characters); or token_sha256 or token_file.",
        "token_sha256": "The token's SHA-256 in hex (what `agent-node token new` prints).",
        "token_file": "A file holding the token (read at start and on SIGHUP).",
        "scopes": "What the token may do: read, operate, publish, sync, admin (admin: all).",
        "groups": "Approver groups the token is in: a policy may ask for approvers from a "
        'group (@approvers("1 from finance")).',
    },
    c.Peer: {
        "name": "The peer's [node] name.",
        "url": "The peer's base URL (http:// or https://).",
        "token": "The token this node presents to the peer (a sync-scoped token there).",
        "token_file": "Instead of token: a file holding it.",
        "public_key": "The peer's key (multibase z6Mk...); else fetched from its did.json.",
    },
    c.SyncSection: {
        "batch_size": "Envelopes per push.",
        "batch_max_kb": "Bytes per push, at most.",
        "pushes_in_flight": "Pushes outstanding per peer (1-16).",
        "backoff_initial_secs": "First wait after a failed push.",
        "backoff_max_secs": "Longest wait between retries.",
        "heartbeat_secs": "Interval of heartbeats to idle peers.",
        "request_timeout_secs": "Deadline of one request to a peer.",
        "ack_flush_secs": "How long acknowledgements are gathered before they are sent.",
    },
    c.MeshSection: {
        "transport": "http: all-to-all pushes; nats: one JetStream stream per mesh.",
        "name": "The mesh's name: stream MESH_<name>, subjects mesh.<name>.*.",
        "nats_servers": "nats://HOST:PORT or tls://HOST:PORT URLs (transport = nats).",
        "nats_user": "NATS user, with nats_password or nats_password_file.",
        "nats_password": "NATS password (or nats_password_file).",
        "nats_password_file": "A file holding the NATS password.",
        "nats_creds_file": "A NATS .creds file (JWT and nkey seed).",
        "nats_nkey_seed_file": "An nkey seed file (SU...).",
        "stream_replicas": "Replicas of the stream when this node creates it (1-5).",
        "stream_max_age_secs": "Retention of the stream by age (0: by size only).",
        "stream_max_bytes": "Size limit of the stream (-1: none).",
        "publish_window": "Own envelopes published and not yet acknowledged, at most.",
        "fetch_batch": "Envelopes asked for by each pull from the stream.",
        "heads_interval_secs": "How often this node's heads are published and peers' read.",
        "ca_file": "PEM CA certificate(s) https:// peers must chain to (default: the system's).",
        "repair_timeout_secs": "Deadline of one HTTP request of a gap repair from one peer.",
        "lease_ttl_secs": "TTL of a placed agent's lease (1-300 s); its home renews it every "
        "quarter of it and stops writing a fifth of it before it can expire.",
        "advert_interval_secs": "How often this node puts its advert (secret domains, "
        "capabilities, free slots); an advert lives three times this.",
        "agent_slots": "Placed agents this node offers to host (its advert's free slots).",
        "standby_wait_secs": "How long a deploy or upgrade of a placed agent waits for "
        "another node of its set to be ready to take it over on the new version (0: not at "
        "all; `--no-wait-standby` for one call).",
    },
    c.InferenceSection: {
        "local_url": "OpenAI-compatible base URL of the local route (.../v1).",
        "cloud_url": "Base URL of the cloud route.",
        "cloud_api_key_env": "Environment variable holding the cloud API key.",
        "default_route": "Route used when an agent's request names none.",
        "local_model": "The model sent to the local route.",
        "cloud_model": "The model sent to the cloud route.",
        "timeout_secs": "Idle timeout for a response and each next piece of a stream.",
        "models": "Alias to a model ([inference.models.<alias>]); local_url and cloud_url are "
        "the aliases local and cloud unless this names them.",
        "default_model": "The alias an agent that lists no models uses (default: default_route).",
        "requests_per_minute": "Most inference calls of one agent in a minute (0: no limit); "
        "a call waits for room when that comes before its run's deadline.",
        "tokens_per_minute": "Most tokens (input and output) of one agent's calls in a minute "
        "(0: no limit).",
        "retries": "How often a provider's 429 or 503 is tried again, after its Retry-After, "
        "within the run's deadline.",
        "stream_window_ms": "Streamed pieces of an answer that arrive within this many ms of "
        "the last stream event go out together, as one event (the first at once; 0: each "
        "piece on its own).",
        "budgets": "Budgets of inference ([[inference.budgets]]): per agent, per group of "
        "agents or for the node, per hour, day, week or month, in tokens or cost.",
    },
    c.InferenceBudget: {
        "rule": 'The budget, as the policies\' budgets read it: "tokens 100000 per day", '
        '"cost 2.5 per month for group support", "cost 50 per week for node".',
        "over": "refuse (the call fails, saying which budget and what is left) or ask "
        "(people decide the call, as an approval).",
    },
    c.ModelSection: {
        "provider": "openai (any OpenAI-compatible server: vLLM, llama.cpp, Ollama, OpenAI) or "
        "anthropic (the Messages API).",
        "base_url": "The API's base URL (.../v1).",
        "model": "The provider's name of the model.",
        "api_key_env": "Environment variable holding the API key (read at each call).",
        "api_key_file": "A file holding the API key (0600).",
        "api_key": "The API key itself (prefer api_key_file or api_key_env).",
        "input_price": "Price per million input tokens (the node's one currency).",
        "output_price": "Price per million output tokens.",
        "route": "local or cloud: its label in svc_inference_requests_total.",
        "max_tokens": "max_tokens sent when a call gives none.",
        "timeout_secs": "Idle timeout of this model (default [inference]'s).",
    },
    c.TracingSection: {
        "enabled": "Send spans (needs the otel extra: pip install 'agent-node[otel]').",
        "endpoint": "The collector's OTLP/HTTP traces URL (protobuf), .../v1/traces.",
        "service_name": "service.name of the spans' resource.",
        "export_interval_ms": "How long finished spans wait to be sent together.",
        "headers": "Headers of each export (a hosted collector's key; never logged).",
    },
    c.AgentInference: {
        "models": "Model aliases the agent may use (none: the node's default model alone).",
        "default": "The alias a call that names none uses (default: the first of models).",
    },
    c.AgentConfig: {
        "name": "The agent's name, also its journal's.",
        "component": "The WebAssembly component: a path (relative to this file) or "
        "registry:ID@VERSION.",
        "description": "Shown in the agent card and agents.md.",
        "tick_interval_ms": "Time between ticks.",
        "mcp": "Expose the agent's tools at POST /api/v1/mcp/{name}.",
        "fuel_per_tick": "Fuel (WebAssembly instructions, roughly) per call.",
        "memory_limit_mb": "Cap on the agent's linear memory.",
        "tick_timeout_ms": "Wall-clock time per call, host calls included.",
        "capabilities": "Capability name to true: what the agent may invoke (http_fetch and "
        "task_await are built in; another name is an action, see [actions]).",
        "approval": "Capability name to true: each use waits for an operator's approval; or "
        'to "policy": the [policy] set permits, forbids or asks people; timeout_secs: how long '
        "(default 300).",
        "grants": "Secret domains granted to the agent.",
        "http": "What http_fetch may reach.",
        "inference": "The inference models it may use (with capabilities.inference = true).",
        "placement": "Node names that may host the agent (with the NATS mesh; default: this "
        "node alone). More than one makes it a placed agent that fails over (docs/mesh.md).",
    },
    c.HostingConfig: {
        "agent": "The placed agent's name.",
        "owner": "The node whose agent it is (the one that deploys it): another node's agent "
        "of that name is never hosted here. Required when the entry grants secret domains, "
        "a capability without approval or network hosts.",
        "components": "sha256:<hex> of the components it may run here; empty: any that "
        "passes this node's compile check.",
        "capabilities": "Capability name to true: what it may invoke here (a definition asking "
        "for more gets not-permitted).",
        "approval": "Capability name to true: gated here whatever its definition says; "
        "timeout_secs caps the wait.",
        "grants": "Secret domains it may read here; this node takes it only when these cover "
        "every domain its definition asks for.",
        "http": "What http_fetch may reach here (intersected with its definition's).",
        "inference": "The inference models it may use here (those its definition names too; "
        "none in common: this node's default model).",
        "mcp": "Expose its tools here when its definition does.",
        "fuel_per_tick": "Most fuel per call here.",
        "memory_limit_mb": "Most linear memory here.",
        "tick_timeout_ms": "Longest wall-clock time per call here.",
        "tick_interval_ms": "Shortest time between ticks here.",
    },
    c.McpSection: {
        "allowed_origins": "Origins (scheme://host[:port]) whose requests the MCP endpoints "
        "accept besides the public URL's; a request with another Origin is a 403.",
        "sessions_per_token": "Most MCP sessions (Mcp-Session-Id) one token holds; past it, "
        "its least recently used idle session ends.",
        "sessions_max": "Most MCP sessions the node holds in all.",
        "session_idle_secs": "An MCP session without a stream or a request in flight ends "
        "after this long unused.",
    },
    c.GrantsSection: {"domains": "Secret domains the agent may read with get-secret."},
    c.HttpSection: {"allow_hosts": "host:port or host (port 443) that http_fetch may reach."},
    c.ActionSection: {
        "url": "An approved action is POSTed here as {agent, capability, request}.",
        "timeout_secs": "Deadline of that request.",
    },
    # delivery (issues 46 and 47; docs/notifications.md)
    c.DeliverySection: {
        "allow_networks": "CIDRs besides public addresses that notifications may go to; "
        "loopback, private, link-local and other special ranges are refused otherwise.",
        "attempt_timeout_secs": "Deadline of one delivery attempt (connect, send, answer).",
        "deadline_secs": "A notification not delivered this long after its event is given up.",
        "backoff_initial_secs": "Wait after the first failed attempt; doubles each time.",
        "backoff_max_secs": "Longest wait between attempts (a random part is taken off).",
        "in_flight": "Deliveries under way at once, over all destinations.",
        "per_host": "Connections at once to one destination host.",
        "max_configs_per_task": "A2A push notification configs of one task.",
        "max_configs_per_client": "A2A push notification configs of one token, over its tasks.",
        "max_pending_per_task": "Undelivered notifications of one task and config; past it the "
        "oldest waiting one is dropped (the newest says the task's state).",
        "max_pending_kb_per_task": "...and their bytes.",
        "max_pending_per_client": "Undelivered notifications of one token or channel; past it "
        "new ones are dropped.",
        "max_pending_kb_per_client": "...and their bytes.",
        "max_body_kb": "Largest notification body; a larger task is sent without its history "
        "(then without its artifacts).",
        "retention_secs": "How long the delivery state of a finished config or request is kept.",
    },
    c.ChannelConfig: {
        "name": "The channel's name, in the delivery state of each request.",
        "kind": "webhook (a signed POST, Standard Webhooks) or apprise (chat or mail through an "
        "Apprise URL).",
        "url": "The webhook's URL or the Apprise URL (it may hold credentials: prefer url_file).",
        "url_file": "A file holding the URL.",
        "secret": "A webhook's signing secret, whsec_ and base64 of 24-64 random bytes.",
        "secret_file": "A file holding the signing secret.",
        "on": "requested (when a request waits for people), escalated (before it times out), "
        "decided, expired, abandoned (a follow-up once a request it was told of ends so).",
        "agents": "Only requests of these agents (empty: all).",
        "capabilities": "Only requests for these capabilities (empty: all).",
        "groups": "Only requests whose approvers name one of these groups (empty: all).",
    },
    c.NotificationsSection: {
        "channels": "Where approval notifications go ([[notifications.channels]]).",
        "console_url": "The console's address in notification links (default "
        "<public_url>/console/).",
        "escalate_before_secs": "An escalation goes out this long before a request times out "
        "(at most half of its timeout).",
    },
    c.PolicySection: {
        "files": "Cedar policy files (relative to this file), read in order; each policy "
        'names itself with @id("...").',
        "timezone": "IANA time zone of context.time (hour, weekday, date) (default UTC).",
        "requests": "Capability to the fields of its request policies may read, each a Cedar "
        'type ("Long", "String", "Bool", "decimal", "Set<...>", "?" at the end when optional) '
        "or a table of them.",
    },
}

INTERNAL = {(c.Config, "base_dir")}  # set by the loader, never written in a file


def undescribed() -> list[str]:
    """Fields of the config's structs without a description, and stale entries."""
    missing = []
    for struct in _structs(c.Config):
        described = KEYS.get(struct, {})
        names = {f.encode_name for f in msgspec.structs.fields(struct)}
        missing += [
            f"{struct.__name__}.{name}"
            for name in sorted(names)
            if name not in described and (struct, name) not in INTERNAL
        ]
        missing += [f"{struct.__name__}.{name} (stale)" for name in described if name not in names]
    return missing


def describe(schema: dict[str, Any]) -> None:
    """Put each key's description into a schema from msgspec.json.schema(Config)."""
    definitions = schema.get("$defs", {})
    for struct, keys in KEYS.items():
        properties = definitions.get(struct.__name__, {}).get("properties", {})
        for name, text in keys.items():
            if name in properties:
                properties[name]["description"] = text


def _structs(root: type[msgspec.Struct]) -> list[type[msgspec.Struct]]:
    found: list[type[msgspec.Struct]] = []
    todo = [root]
    while todo:
        struct = todo.pop()
        if struct in found:
            continue
        found.append(struct)
        for field in msgspec.structs.fields(struct):
            todo += [t for t in _types_in(field.type) if t not in found]
    return found


def _types_in(kind: Any) -> list[type[msgspec.Struct]]:
    if isinstance(kind, type) and issubclass(kind, msgspec.Struct):
        return [kind]
    return [t for arg in getattr(kind, "__args__", ()) for t in _types_in(arg)]
