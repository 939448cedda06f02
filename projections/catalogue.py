"""The event catalogue: every event type the node writes, by name, with the shape of its data.

Why one module: signatures prove who wrote an envelope, not that its content is sane. Writers
build their events from these Structs (`event_of`), folds use these names, and the sync
receiver checks every replicated payload against the catalogue (`check_replicated`) before it
is stored, so a peer can only send events this node knows how to fold, with bounded strings and
numbers and a timestamp it can parse.

Extending it: a new type is one Struct with its `type` and one `@entry` line; a new optional
field is one line with a default. Unknown extra fields in a payload are accepted (a newer peer
may carry more); the push body's size cap (`[node] max_body_kb`) bounds the whole payload.
docs/design.md lists the events; tests/projections/test_catalogue.py checks that list
against this module.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Annotated, Any, ClassVar, Literal, TypeGuard, TypeVar

import msgspec

from eventstore.envelope import Envelope, Event

# ----------------------------------------------------------------------------- names
APPROVAL_REQUESTED = "approval.requested"
APPROVAL_DECIDED = "approval.decided"
APPROVAL_TIMED_OUT = "approval.timed_out"
APPROVAL_ABANDONED = "approval.abandoned"
# one approver's approval of a request that needs several (issue 47): never a decision
APPROVAL_ENDORSED = "approval.endorsed"
GRANT_CREATED = "grant.created"
GRANT_REVOKED = "grant.revoked"
GRANT_RESTORED = "grant.restored"
TASK_CREATED = "task.created"
TASK_STARTED = "task.started"
TASK_PROGRESS = "task.progress"
TASK_COMPLETED = "task.completed"
TASK_FAILED = "task.failed"
TASK_CANCELED = "task.canceled"
# multi-turn tasks (docs/agents.md, "Multi-turn tasks"): a run that leaves its task open, and
# the client's next message to it
TASK_AWAITING = "task.awaiting"
TASK_MESSAGE = "task.message"
LOG = "log"
FINDING = "finding"
STATE_SET = "state.set"
SECRET_ACCESSED = "secret.accessed"
ACTION_PERFORMED = "action.performed"
INFERENCE_COMPLETED = "inference.completed"
# recorded host calls (docs/agents.md, "When a node dies mid-run"; projections/call_records.py)
RUN_OPENED = "run.opened"
CALL_RECORDED = "call.recorded"
RUN_CLOSED = "run.closed"

INFERENCE_FAILED = "inference.failed"  # issue 54
AGENT_STARTED = "agent.started"
AGENT_STOPPED = "agent.stopped"
AGENT_RESTARTED = "agent.restarted"
AGENT_ERRORED = "agent.errored"
AGENT_RETIRED = "agent.retired"
# the lifecycle of the node's agents, in `$node` (projections/deployments.py)
AGENT_DEPLOYED = "agent.deployed"
AGENT_UPGRADED = "agent.upgraded"
AGENT_ROLLED_BACK = "agent.rolled_back"
AGENT_SUSPENDED = "agent.suspended"
AGENT_RESUMED = "agent.resumed"
AGENT_REMOVED = "agent.removed"
PACKAGE_PUBLISHED = "package.published"
PEER_KEY_PINNED = "peer.key_pinned"
PEER_ACKED = "peer.acked"
KEY_ROTATED = "node.key_rotated"
NODE_RELOADED = "node.reloaded"
# placement and failover, in the agent's own journal (docs/mesh.md, "Placement and failover")
AGENT_PLACED = "agent.placed"
JOURNAL_HANDOFF = "journal.handoff"
JOURNAL_TAKEOVER = "journal.takeover"
AGENT_MOVED_IN = "agent.moved_in"
# by the home, before an upgrade switches to a new definition: the set's other nodes fetch and
# compile it meanwhile, so one of them is ready to take the agent over on it (issue 52)
AGENT_PREPARING = "agent.preparing"
# an operator's stop and start of a placed agent, in its own journal: they follow it to every
# node that becomes its home (the drain before a handoff is `agent.stopped`, an instance's end)
AGENT_HALTED = "agent.halted"
AGENT_UNHALTED = "agent.unhalted"
# the agent's owner (the signer of its journal's seq 1) hands its decisions to another node
AGENT_OWNER_HANDED = "agent.owner_handed"

# ----------------------------------------------------------------------------- bounds
LOG_LEVELS = ("trace", "debug", "info", "warn", "error")
SEVERITIES = ("info", "low", "medium", "high", "critical")
MAX_TEXT = 64 * 1024  # a log message, a finding's detail, an error text
MAX_TITLE = 1000  # a finding's title, an approval's detail as the gate writes it
MAX_APPROVAL_TIMEOUT_SECS = 30 * 24 * 3600
# How far ahead of this node's clock a replicated event's `ts` may be (clocks of a mesh drift).
MAX_FUTURE_SKEW_SECS = 300
MAX_ROTATION_HEADS = 100_000  # journals one key rotation may list
MAX_COUNT = 2**53  # integers a JSON client can still read exactly

Id = Annotated[str, msgspec.Meta(min_length=1, max_length=128)]
# An operator, a capability, a domain...: set by the config or the code, never that long.
Name = Annotated[str, msgspec.Meta(max_length=1000)]
JournalName = Annotated[str, msgspec.Meta(pattern=r"^[A-Za-z0-9][A-Za-z0-9._-]{0,63}$")]
Title = Annotated[str, msgspec.Meta(max_length=MAX_TITLE)]
Text = Annotated[str, msgspec.Meta(max_length=MAX_TEXT)]
Count = Annotated[int, msgspec.Meta(ge=0, le=MAX_COUNT)]
Timeout = Annotated[int, msgspec.Meta(gt=0, le=MAX_APPROVAL_TIMEOUT_SECS)]
# an approval's request: an agent's is at most 64 KiB, and masking secrets may lengthen it
Request = Annotated[str, msgspec.Meta(max_length=2 * MAX_TEXT)]
RequestHash = Annotated[str, msgspec.Meta(pattern=r"^(sha256:[0-9a-f]{64})?$")]
LogLevel = Literal["trace", "debug", "info", "warn", "error"]
Severity = Literal["info", "low", "medium", "high", "critical"]


def is_log_level(value: str) -> TypeGuard[LogLevel]:
    return value in LOG_LEVELS


def is_severity(value: str) -> TypeGuard[Severity]:
    return value in SEVERITIES


class Payload(msgspec.Struct, kw_only=True):
    """The `data` of one event type; `type` names it, `replicated` says whether peers may send
    it (node-level `$` journals never leave their node)."""

    type: ClassVar[str]
    replicated: ClassVar[bool] = True


CATALOGUE: dict[str, type[Payload]] = {}
P = TypeVar("P", bound=type[Payload])


def entry(cls: P) -> P:
    """Add a payload Struct to the catalogue under its `type`."""
    if cls.type in CATALOGUE:
        raise ValueError(f"event type {cls.type!r} catalogued twice")
    CATALOGUE[cls.type] = cls
    return cls


# ----------------------------------------------------------------------------- approvals
# ---- policies and approvers (issue 47, docs/approvals.md): who decided by which policy set,
# what a permit charged to a budget, and how many people a request needs
MAX_APPROVERS = 10  # distinct approvers one request may need
MAX_POLICY_IDS = 100
GroupName = Annotated[str, msgspec.Meta(pattern=r"^[A-Za-z0-9][A-Za-z0-9._-]{0,63}$")]
PolicySetHash = Annotated[str, msgspec.Meta(pattern=r"^sha256:[0-9a-f]{64}$")]
# an amount of at least 0 as decimal text (a budget's charge, total and limit): exact, whatever
# JSON carried it as
Amount = Annotated[str, msgspec.Meta(pattern=r"^[0-9]{1,30}(\.[0-9]{1,10})?$")]


class ApproverSlot(msgspec.Struct, frozen=True, kw_only=True):
    """`count` more distinct approvers, from `group` (a token group) or anyone."""

    count: Annotated[int, msgspec.Meta(ge=1, le=MAX_APPROVERS)]
    group: GroupName | None = None


class PolicyRef(msgspec.Struct, frozen=True, kw_only=True, omit_defaults=True):
    """The policies (their `@id`s) of the policy set (the sha256 of its files) that decided or
    asked, and why in words."""

    set: PolicySetHash
    ids: Annotated[list[Name], msgspec.Meta(max_length=MAX_POLICY_IDS)] = []
    reason: Text | None = None


class BudgetCharge(msgspec.Struct, frozen=True, kw_only=True, omit_defaults=True):
    """What a permit counted against the budget of policy `budget`: `amount` of the request's
    `field`, the running `total` with it, within `limit` per `period_secs`."""

    budget: Name
    field: Name
    amount: Amount
    total: Amount
    limit: Amount
    period_secs: Annotated[int, msgspec.Meta(gt=0, le=MAX_COUNT)]
    # who shares the budget: "" the agent charged (as before scopes), `group:<name>` a named
    # group of agents ([agent_groups]), `node:<name>` every agent of that node
    scope: Annotated[str, msgspec.Meta(max_length=200)] = ""


@entry
class ApprovalRequested(Payload):
    type = APPROVAL_REQUESTED
    id: Id
    capability: Name = ""
    detail: Text = ""
    timeout_secs: Timeout = 300
    # the exact request that is performed once approved (secrets masked) and its hash, which
    # a decision binds to; the task whose run asked, if one did
    request: Request = ""
    request_hash: RequestHash = ""
    task: Id | None = None
    # the policies that asked people, and how many distinct approvers (absent: one)
    policy: PolicyRef | None = None
    approvers: Annotated[list[ApproverSlot], msgspec.Meta(max_length=MAX_APPROVERS)] | None = None
    # the recorded host call that asked ("<run>#<position>", projections/call_records.py): an
    # approval given to it holds when a resumed run makes the same call there again
    call: Name | None = None


@entry
class ApprovalDecided(Payload):
    type = APPROVAL_DECIDED
    id: Id
    decision: Literal["approve", "deny"]
    operator: Name | None = None
    request_hash: RequestHash = ""  # the request decided on
    reason: Text | None = None  # why, when the node decided (a canceled task's approvals)
    # no running call waited for it (its agent instance ended): recorded on the request, which
    # stays pending, and applied when the agent asks for exactly the same again
    later: bool | None = None  # written only when true
    # decided by the policy set (`operator` is "policy:<id>"), with what its permit charged
    policy: PolicyRef | None = None
    charges: Annotated[list[BudgetCharge], msgspec.Meta(max_length=MAX_POLICY_IDS)] | None = None
    # every distinct approver, when the request needed more than one (the last is `operator`)
    approvers: Annotated[list[Name], msgspec.Meta(max_length=MAX_APPROVERS)] | None = None


@entry
class ApprovalEndorsed(Payload):
    """One approver's approval of a request that needs several: the request stays pending (a
    node that does not know this type refuses it rather than reading it as the decision); the
    one that completes the count is journaled with the `approval.decided` in one write."""

    type = APPROVAL_ENDORSED
    id: Id
    operator: Name
    request_hash: RequestHash = ""
    # the token's groups when it approved: what the count is judged by, whatever changes later
    groups: Annotated[list[GroupName], msgspec.Meta(max_length=100)] = []


@entry
class ApprovalTimedOut(Payload):
    type = APPROVAL_TIMED_OUT
    id: Id


@entry
class ApprovalAbandoned(Payload):
    """Closed by the node: nothing can ever perform it (its agent stopped, its task ended, the
    agent asked for something else in its place)."""

    type = APPROVAL_ABANDONED
    id: Id
    reason: Text = ""


# ----------------------------------------------------------------------------- grants
@entry
class GrantCreated(Payload):
    type = GRANT_CREATED
    domain: Name


@entry
class GrantRevoked(Payload):
    """By an operator (`operator` names the token), or by the node when the agent's deployment
    stopped asking for the domain (`reason` says which change: an upgrade, a removal)."""

    type = GRANT_REVOKED
    domain: Name
    reason: Text = ""
    operator: Name | None = None


@entry
class GrantRestored(Payload):
    type = GRANT_RESTORED
    domain: Name


# ----------------------------------------------------------------------------- tasks
@entry
class TaskCreated(Payload):
    type = TASK_CREATED
    id: Id
    from_: Name = msgspec.field(name="from", default="")
    to: JournalName | None = None
    input: dict[str, Any] = {}
    a2a: dict[str, Any] | None = None  # the A2A context (contextId, the asking message)
    caller: Name | None = None  # the API token that created it (absent: its agent `from` did)


@entry
class TaskStarted(Payload):
    type = TASK_STARTED
    id: Id


@entry
class TaskProgress(Payload):
    type = TASK_PROGRESS
    id: Id
    progress: Any = None


@entry
class TaskCompleted(Payload):
    type = TASK_COMPLETED
    id: Id
    output: dict[str, Any] = {}


@entry
class TaskFailed(Payload):
    type = TASK_FAILED
    id: Id
    error: Text = ""


@entry
class TaskCanceled(Payload):
    type = TASK_CANCELED
    id: Id
    operator: Name | None = None


@entry
class TaskAwaiting(Payload):
    """A run of the task ended without ending it: the agent awaits its client's next message,
    asking for it (`input_required`) or still working; `message` is what it says to the
    client, `reply` what its `handle-task` returned."""

    type = TASK_AWAITING
    id: Id
    input_required: bool = False
    message: Text | None = None
    reply: dict[str, Any] | None = None


@entry
class TaskMessage(Payload):
    """The client's next message to a task that awaits one: `input` is what the agent's next
    run of the task gets, `a2a` the message as the client sent it, `operator` its token."""

    type = TASK_MESSAGE
    id: Id
    input: dict[str, Any] = {}
    a2a: dict[str, Any] | None = None
    operator: Name | None = None


# ----------------------------------------------------------------------------- agent output
@entry
class Log(Payload):
    type = LOG
    level: LogLevel = "info"
    message: Text = ""
    stream: Literal["stdout", "stderr"] | None = None
    trace_id: Name | None = None  # the run's trace (node/ops/tracing.py), when tracing is on


@entry
class Finding(Payload):
    type = FINDING
    severity: Severity = "info"
    title: Title = ""
    detail: Text = ""
    incident: Title | None = None  # a sync incident's de-duplication key (node/sync/incidents)
    posted_by: Name | None = None  # the API token that posted it; absent: the agent's own
    # what it is about, when not the journal's own agent: a finding posted about a name the
    # node does not host is kept in the node's own journal (node/services/findings.py)
    subject: JournalName | None = None
    trace_id: Name | None = None  # the run's trace (node/ops/tracing.py), when tracing is on


@entry
class StateSet(Payload):
    type = STATE_SET
    key: str  # agent-chosen, bounded only by the payload: peers must not refuse what we write
    value: str
    trace_id: Name | None = None  # the run's trace (node/ops/tracing.py), when tracing is on


@entry
class SecretAccessed(Payload):
    type = SECRET_ACCESSED
    domain: Name
    key: Name


@entry
class ActionPerformed(Payload):
    type = ACTION_PERFORMED
    capability: Name
    method: str | None = None  # from the agent's request, as the agent wrote it
    url: str | None = None
    status: int | str | None = None
    request: Any = None
    trace_id: Name | None = None  # the run's trace (node/ops/tracing.py), when tracing is on


@entry
class InferenceCompleted(Payload):
    """One inference call answered; the metering fields (issue 54, docs/inference.md) are
    absent from events of older nodes, which read as a call of unknown cost."""

    type = INFERENCE_COMPLETED
    route: Name
    chars: Count = 0
    model: Name = ""  # the alias the call used
    provider_model: Name = ""  # as the provider named the model that answered
    input_tokens: Count = 0
    output_tokens: Count = 0
    cost_nanos: Count = 0  # in 1e-9 of the node's currency (prices per million tokens)
    duration_ms: Count = 0
    finish_reason: Name = ""
    tool_calls: Count = 0
    trace_id: Name = ""


@entry
class InferenceFailed(Payload):
    """An inference call that got no answer: the provider failed, or a limit refused it
    (`refused`: a rate limit or a budget, before the provider was asked)."""

    type = INFERENCE_FAILED
    route: Name
    model: Name = ""
    error: Text = ""
    duration_ms: Count = 0
    refused: bool = False
    trace_id: Name = ""


# ----------------------------------------------------------------------------- recorded calls
# A run (a tick, a task's turn, a tool call) that makes a host call with an effect or a cost
# first journals `run.opened`: its id, which the call keys (Idempotency-Key) derive from, is then
# the same on every node that resumes it. Each such call, once it returned, is journaled as
# `call.recorded` with its position in the run, its request's hash and its result (redacted,
# bounded), before the result reaches the agent; `run.closed` ends the run. A run interrupted
# before `run.closed` is resumed by the next instance (node/runtime/callrecords.py).

# what one record's result may hold at most, whatever the config says: a recorded event stays
# under the peers' push limit (node.runtime.limits.MAX_EVENT_BYTES, 256 KiB)
MAX_RECORD_RESULT = 192 * 1024
RunKindName = Literal["tick", "task", "tool", "list-tools"]
CallName = Literal["invoke", "infer", "create_task"]
CallOutcome = Literal["ok", "error"]


@entry
class RunOpened(Payload):
    """A run's first recorded call is about to be made. `subject` is what the next instance
    matches a run it starts to (a task's id, a tool's name, "" for a tick)."""

    type = RUN_OPENED
    run: Id
    kind: RunKindName
    subject: Name = ""


@entry
class CallRecorded(Payload):
    """A host call that returned: `call` and `target` say which (the capability, the model
    route, the receiving agent), `request_hash` what it was asked, `result` what it gave (the
    agent's text; for an error, its message with `error_kind`). A result past the record's bound
    is not kept: `omitted` holds its size, and a resumed run gets an error instead of it."""

    type = CALL_RECORDED
    run: Id
    position: Count
    call: CallName
    target: Name = ""
    request_hash: RequestHash = ""
    outcome: CallOutcome = "ok"
    result: Annotated[str, msgspec.Meta(max_length=MAX_RECORD_RESULT)] = ""
    error_kind: Name | None = None
    omitted: Count | None = None


@entry
class RunClosed(Payload):
    """The run returned (or faulted): a later run never takes its records."""

    type = RUN_CLOSED
    run: Id


# ----------------------------------------------------------------------------- agent life
@entry
class AgentStarted(Payload):
    type = AGENT_STARTED


@entry
class AgentStopped(Payload):
    type = AGENT_STOPPED


@entry
class AgentRestarted(Payload):
    type = AGENT_RESTARTED
    restart_count: Count = 0


@entry
class AgentErrored(Payload):
    type = AGENT_ERRORED
    error: Text = ""
    kind: Name = ""
    retry_in_ms: Count = 0


@entry
class AgentRetired(Payload):
    """The end of a deployment under this name (removed): its state and grants end here, so a
    later deployment of the same name starts with nothing; the history before stays for audit."""

    type = AGENT_RETIRED
    reason: Text = ""
    operator: Name | None = None


# ----------------------------------------------------------------------------- deployments
# What the node runs, in its own `$node` journal: how each agent was deployed, upgraded, rolled
# back, suspended, resumed and removed (projections/deployments.py folds them; docs/design.md,
# "Agents as a live resource"). `agent.started`/`agent.stopped` already mean "an instance of it
# started/ended" in the agent's own journal (at every restart), so an operator's stop and start
# are `agent.suspended` and `agent.resumed`.
MAX_AGENT_ENTRIES = 100  # capabilities, approval rules, grant domains, allowed hosts
# "" when the component could not be read at deployment (a config agent's missing file)
Checksum = Annotated[str, msgspec.Meta(pattern=r"^(sha256:[0-9a-f]{64})?$")]
Positive = Annotated[int, msgspec.Meta(gt=0, le=MAX_COUNT)]
DeploymentSource = Literal["config", "api"]


class AgentLimits(msgspec.Struct, kw_only=True, frozen=True):
    tick_interval_ms: Positive
    fuel_per_tick: Positive
    memory_limit_mb: Positive
    tick_timeout_ms: Positive


class AgentDefinition(msgspec.Struct, kw_only=True, frozen=True):
    """Everything that makes one version of an agent: the component (`registry:ID@VERSION`, or
    a file for a config-declared agent) with the sha256 of its bytes, and its permissions."""

    component: Name
    sha256: Checksum
    description: Text = ""
    capabilities: Annotated[dict[Name, bool], msgspec.Meta(max_length=MAX_AGENT_ENTRIES)] = {}
    # capability → gated (true), or "policy" (the node's policy set decides: issue 47; a node
    # from before it refuses such a definition rather than run the capability ungated), plus
    # `timeout_secs` (an int)
    approval: Annotated[
        dict[Name, bool | int | Literal["policy"]], msgspec.Meta(max_length=MAX_AGENT_ENTRIES)
    ] = {}
    limits: AgentLimits
    mcp: bool = False
    grant_domains: Annotated[list[Name], msgspec.Meta(max_length=MAX_AGENT_ENTRIES)] = []
    allow_hosts: Annotated[list[Name], msgspec.Meta(max_length=MAX_AGENT_ENTRIES)] = []
    # the inference models it may use, by alias, and its default (issue 54; none: the node's
    # default model)
    inference_models: Annotated[list[Name], msgspec.Meta(max_length=MAX_AGENT_ENTRIES)] = []
    inference_default: Name | None = None


@entry
class AgentDeployed(Payload):
    type = AGENT_DEPLOYED
    replicated = False
    agent: JournalName
    revision: Positive
    source: DeploymentSource
    definition: AgentDefinition
    operator: Name | None = None


@entry
class AgentUpgraded(Payload):
    type = AGENT_UPGRADED
    replicated = False
    agent: JournalName
    revision: Positive
    source: DeploymentSource
    definition: AgentDefinition
    operator: Name | None = None


@entry
class AgentRolledBack(Payload):
    """Back to the deployment below the current one (`to_revision`), by an operator or by the
    node itself when an upgrade did not load or failed its first run (`automatic`)."""

    type = AGENT_ROLLED_BACK
    replicated = False
    agent: JournalName
    from_revision: Positive
    to_revision: Positive
    reason: Text = ""
    automatic: bool = False
    operator: Name | None = None


@entry
class AgentSuspended(Payload):
    type = AGENT_SUSPENDED
    replicated = False
    agent: JournalName
    operator: Name | None = None


@entry
class AgentResumed(Payload):
    type = AGENT_RESUMED
    replicated = False
    agent: JournalName
    operator: Name | None = None


@entry
class AgentRemoved(Payload):
    type = AGENT_REMOVED
    replicated = False
    agent: JournalName
    reason: Text = ""
    operator: Name | None = None


# ----------------------------------------------------------------------------- placement
# Which nodes may host an agent and which one writes its journal now (its home), in the agent's
# own journal, so every replica learns them with the journal itself (projections/journals.py
# folds them; node/sync/rules/ accepts a new writer only by them).
MAX_PLACEMENT = 100  # nodes in one placement set
Epoch = Annotated[int, msgspec.Meta(ge=0, le=MAX_COUNT)]
NodeName = JournalName  # a node's name is its node journal's name
Placement = Annotated[list[NodeName], msgspec.Meta(min_length=1, max_length=MAX_PLACEMENT)]
MoveReason = Literal["handoff", "takeover"]
PlacedChange = Literal["deployed", "upgraded", "rolled_back", "placed"]


@entry
class AgentPlaced(Payload):
    """By the home, when a placed agent is deployed, upgraded, rolled back or its placement
    changes: what every node of `placement` runs if it becomes the home."""

    type = AGENT_PLACED
    placement: Placement
    definition: AgentDefinition
    epoch: Epoch = 0
    # the home's deployment it follows, and who made it (0/None: written by an older version)
    revision: Count = 0
    operator: Name | None = None
    change: PlacedChange = "deployed"


@entry
class JournalHandoff(Payload):
    """By the current home, in a planned move: from the next seq on, `to` writes the journal."""

    type = JOURNAL_HANDOFF
    to: NodeName
    epoch: Epoch


@entry
class JournalTakeover(Payload):
    """By the new home, the first envelope it writes, after it won the lease of `epoch`.
    `lease_position`: the mesh stream's position of its lease record at `epoch` (its lease
    log, node/placement/leaselog.py), where every node judges it; 0 in takeovers of versions
    before the lease log (read as ever, refused when judged now)."""

    type = JOURNAL_TAKEOVER
    epoch: Epoch
    lease_revision: Count
    previous_home: NodeName
    lease_position: Count = 0


@entry
class AgentHalted(Payload):
    """By the home: an operator stopped the placed agent. It stays stopped on every node that
    becomes its home until `agent.unhalted`."""

    type = AGENT_HALTED
    operator: Name | None = None


@entry
class AgentUnhalted(Payload):
    """By the home: an operator started the placed agent again."""

    type = AGENT_UNHALTED
    operator: Name | None = None


@entry
class AgentOwnerHanded(Payload):
    """By the agent's owner, while it is the home: from this envelope on, `to` is the owner,
    the only node whose `agent.placed`, `agent.halted`, `agent.unhalted`, `agent.retired` and
    `agent.owner_handed` every node accepts (node/sync/rules/owner.py)."""

    type = AGENT_OWNER_HANDED
    to: NodeName
    operator: Name | None = None


@entry
class AgentPreparing(Payload):
    """By the home: the definition an upgrade is about to switch to. It changes nothing that
    runs; the set's other nodes make its component ready (fetched, compiled) and advertise
    that they did, and the home's `agent.placed` of it follows."""

    type = AGENT_PREPARING
    definition: AgentDefinition


@entry
class AgentMovedIn(Payload):
    """By the new home once the agent runs there."""

    type = AGENT_MOVED_IN
    epoch: Epoch
    from_node: NodeName
    reason: MoveReason
    open_tasks: Count = 0
    abandoned_approvals: Count = 0


# ----------------------------------------------------------------------------- node-level
@entry
class PackagePublished(Payload):
    type = PACKAGE_PUBLISHED
    replicated = False
    id: Name
    version: Name
    description: Text = ""
    checksum: Name = ""
    wasm_size_bytes: Count = 0


@entry
class PeerKeyPinned(Payload):
    type = PEER_KEY_PINNED
    replicated = False
    peer: Name
    public_key: Name
    source: Name = ""


@entry
class PeerAcked(Payload):
    type = PEER_ACKED
    replicated = False
    peer: Name
    heads: dict[str, Count] = {}


@entry
class KeyRotated(Payload):
    """In the node's key journal `@<node>` (projections/keys.py), signed by the previous key:
    the new key, and the heads of every journal the previous key signed."""

    type = KEY_ROTATED
    previous_public_key: Name
    new_public_key: Name
    heads: Annotated[dict[str, Count], msgspec.Meta(max_length=MAX_ROTATION_HEADS)] = {}


@entry
class NodeReloaded(Payload):
    """In `$node`: what a SIGHUP reloaded, by name only (never a value or a token's hash);
    `policy_set`: the sha256 of the policy files now in force (issue 47)."""

    type = NODE_RELOADED
    replicated = False
    tokens: list[Name] = []
    peer_tokens: list[Name] = []
    secrets: list[Name] = []
    restart_needed: list[Name] = []
    policy_set: PolicySetHash | None = None


# ----------------------------------------------------------------------------- delivery
# A2A push notification configs and the outbox's delivered marks, in the journal of the task's
# agent (issues 46 and 47; node/delivery/, docs/notifications.md)
PUSH_CONFIGURED = "push.configured"
PUSH_REMOVED = "push.removed"
DELIVERY_PROGRESS = "delivery.progress"
MAX_SEALED_TEXT = 8192  # one node's sealed box of a push destination, in base64
MAX_DELIVERY_MARKS = 1000  # finished deliveries named by one `delivery.progress`
Sealed = Annotated[
    dict[NodeName, Annotated[str, msgspec.Meta(max_length=MAX_SEALED_TEXT)]],
    msgspec.Meta(max_length=MAX_PLACEMENT + 1),
]
DeliveryId = Annotated[str, msgspec.Meta(min_length=1, max_length=600)]


@entry
class PushConfigured(Payload):
    """A client's push notification config for a task (created, or replaced under its id).
    Its destination (URL, token, credentials) is only in `sealed`: a sealed box per node that
    may deliver it (node/delivery/sealing.py), never in clear."""

    type = PUSH_CONFIGURED
    task: Id
    id: Id
    client: Name
    sealed: Sealed = {}


@entry
class PushRemoved(Payload):
    type = PUSH_REMOVED
    task: Id
    id: Id
    operator: Name | None = None


@entry
class DeliveryProgress(Payload):
    """Deliveries of this journal's notifications that ended (delivered, given up or dropped),
    by their portable ids: a node that takes the journal over sends the rest again."""

    type = DELIVERY_PROGRESS
    done: Annotated[list[DeliveryId], msgspec.Meta(max_length=MAX_DELIVERY_MARKS)] = []


# ----------------------------------------------------------------------------- use
def event_of(payload: Payload) -> tuple[str, dict[str, Any]]:
    """(type, data) of a payload, as `EventStore.append(stream, *event_of(...))` takes them.

    An optional field (default None) left at None is absent from the data, as before the
    catalogue existed; every other field is written."""
    data = msgspec.to_builtins(payload)
    for name in _optional(type(payload)):
        if data.get(name, 0) is None:
            del data[name]
    return payload.type, data


_OPTIONAL: dict[type[Payload], tuple[str, ...]] = {}


def _optional(cls: type[Payload]) -> tuple[str, ...]:
    names = _OPTIONAL.get(cls)
    if names is None:
        fields = msgspec.structs.fields(cls)
        names = _OPTIONAL[cls] = tuple(f.encode_name for f in fields if f.default is None)
    return names


P_co = TypeVar("P_co", bound=Payload)


def read(cls: type[P_co], data: dict[str, Any]) -> P_co | None:
    """`data` as `cls`, or None when it does not fit (a fold then ignores the event)."""
    try:
        return msgspec.convert(data, cls)
    except msgspec.ValidationError:
        return None


def payload_of(envelope: Envelope) -> Payload | None:
    """The event's data as its catalogue Struct: how a reader learns what an event says
    without indexing a dict or comparing its type string (None for an unknown type, or data
    that does not fit, which a fold ignores too)."""
    event = envelope.event
    cls = CATALOGUE.get(event.type)
    return read(cls, event.data) if cls is not None else None


UNKNOWN_TYPE = "unknown_type"
INVALID_DATA = "invalid_data"
BAD_TIMESTAMP = "bad_timestamp"
FUTURE_TIMESTAMP = "future_timestamp"
NOT_REPLICATED = "not_replicated"


class CatalogueError(ValueError):
    """A replicated event the catalogue refuses; `reason` is the sync rejection's reason."""

    def __init__(self, reason: str, detail: str) -> None:
        super().__init__(detail)
        self.reason = reason
        self.detail = detail


def parse_ts(text: str) -> datetime | None:
    """An event's `ts` as an aware datetime, or None when it is not ISO 8601 with a zone."""
    if len(text) > 64:
        return None
    try:
        parsed = datetime.fromisoformat(text)
    except ValueError:
        return None
    return parsed if parsed.tzinfo is not None else None


def check_replicated(event: Event, now: datetime | None = None) -> None:
    """Raise CatalogueError unless a peer may send `event`: a catalogued, replicated type whose
    data decodes as its Struct, and a `ts` no more than MAX_FUTURE_SKEW_SECS ahead of `now`."""
    if len(event.origin) > 256:
        raise CatalogueError(INVALID_DATA, "origin is longer than 256 characters")
    cls = CATALOGUE.get(event.type)
    if cls is None:
        raise CatalogueError(UNKNOWN_TYPE, f"event type {event.type[:80]!r} is not catalogued")
    if not cls.replicated:
        raise CatalogueError(NOT_REPLICATED, f"{event.type} events stay on their node")
    try:
        msgspec.convert(event.data, cls)
    except msgspec.ValidationError as exc:
        raise CatalogueError(INVALID_DATA, f"{event.type} data: {str(exc)[:300]}") from None
    ts = parse_ts(event.ts)
    if ts is None:
        raise CatalogueError(BAD_TIMESTAMP, f"ts {event.ts[:80]!r} is not ISO 8601 with a zone")
    limit = (now or datetime.now(UTC)) + timedelta(seconds=MAX_FUTURE_SKEW_SECS)
    if ts > limit:
        raise CatalogueError(
            FUTURE_TIMESTAMP,
            f"ts {event.ts!r} is more than {MAX_FUTURE_SKEW_SECS} s ahead of this node's clock",
        )
