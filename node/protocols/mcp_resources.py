"""An agent's journal as MCP resources (read-only JSON), and which of them an event changes.

Every MCP agent offers, under `agent://<agent>/`:

| URI | what | read model |
|---|---|---|
| `status` | what GET /api/v1/status says of it | the runtime's status |
| `state` | its durable state's keys | projections/agent_state.py (a fold of its journal) |
| `state/{key}` (a template) | one key's value | the same |
| `findings{?since,limit}` | its findings after a seq | projections/entries.py `Findings` |
| `logs{?since,limit}` | its log lines after a seq | projections/entries.py `Logs` |
| `tasks{?cursor}` | the tasks sent to it | projections/tasks.py, as GET /api/v1/a2a/tasks |
| `approvals` | its pending approval requests | projections/approvals.py |

What a page holds is what the REST page holds (the same read models, bounded by the same
`limit` clamp and `node.page_max_kb`; the journal's values were redacted as they were written).
Findings and logs are one node-wide sequence each: a page of one agent's walks at most
`SCAN_PAGES` pages of the node's and says where it stopped (`next_seq`), so a read never walks
the whole history. `touched` maps an event of the node's streams (node/streams/bus.py) to the
URIs it changed, for `resources/subscribe`.
"""

from __future__ import annotations

from typing import Any
from urllib.parse import parse_qs, quote, unquote, urlsplit

import msgspec

from node.context import NodeContext
from node.runtime.runtime import AgentRuntime
from node.services.tasks import TaskQuery, TaskService
from node.web.http import MAX_LIMIT
from node.web.jsonrpc import INVALID_PARAMS, RpcError
from projections.agent_state import fold_state
from projections.approvals import Approvals
from projections.entries import Findings, Logs

SCHEME = "agent"
RESOURCE_NOT_FOUND = -32002  # MCP's code for a URI the server does not have
SCAN_PAGES = 20  # pages of the node-wide findings or logs one read walks, at most
SCAN_MIN = 50  # entries of such a page, at least (a page of one agent's may skip others')
JSON = "application/json"
_encode = msgspec.json.Encoder().encode

STATIC = (
    ("status", "Status", "What the runtime says of the agent now (GET /api/v1/status)"),
    ("state", "Durable state keys", "The keys of the agent's durable state (state-set)"),
    ("findings", "Findings", "The agent's findings, oldest first (?since=<seq>&limit=<n>)"),
    ("logs", "Logs", "The agent's log lines, oldest first (?since=<seq>&limit=<n>)"),
    ("tasks", "Tasks", "The tasks sent to the agent, oldest first (?cursor=<next_cursor>)"),
    ("approvals", "Pending approvals", "The agent's approval requests awaiting a decision"),
)
TEMPLATES = (
    ("state/{key}", "Durable state value", "One key of the agent's durable state"),
    ("findings{?since,limit}", "Findings after a seq", "A page of the agent's findings"),
    ("logs{?since,limit}", "Log lines after a seq", "A page of the agent's log lines"),
    ("tasks{?cursor}", "Tasks after a cursor", "A page of the tasks sent to the agent"),
)
# the unified stream's event names (node/streams/mapping.py) → the resource they change
_TOUCHES = {
    "state_set": "state",
    "finding": "findings",
    "log": "logs",
    "agent_status": "status",
    "agent_started": "status",
    "agent_stopped": "status",
    "agent_restarted": "status",
    "error": "status",
}


def uri(agent: str, path: str) -> str:
    return f"{SCHEME}://{agent}/{path}"


def touched(agent: str, name: str, data: dict[str, Any]) -> list[str]:
    """The URIs an event of the agent's stream changed."""
    if name.startswith("task_"):
        return [uri(agent, "tasks")]
    if name.startswith("approval_"):
        return [uri(agent, "approvals")]
    kind = _TOUCHES.get(name)
    if kind is None:
        return []
    if kind == "state" and isinstance(data.get("key"), str):
        return [uri(agent, "state"), uri(agent, "state/" + quote(data["key"], safe=""))]
    return [uri(agent, kind)]


class JournalResources:
    """Reads one agent's resources from the node's read models (on the event loop: each read
    is one LMDB read transaction or a fold of the journal's new events)."""

    def __init__(self, ctx: NodeContext, tasks: TaskService) -> None:
        self.ctx = ctx
        self.tasks = tasks
        self._states: dict[str, tuple[int, dict[str, str]]] = {}  # agent → (seq, state)

    def listed(self, agent: str) -> list[dict[str, Any]]:
        return _described(agent, STATIC, "uri")

    def templates(self, agent: str) -> list[dict[str, Any]]:
        return _described(agent, TEMPLATES, "uriTemplate")

    def owns(self, agent: str, address: str) -> bool:
        return address.startswith(f"{SCHEME}://{agent}/")

    def read(self, agent: str, runtime: AgentRuntime, address: str) -> dict[str, Any]:
        """`resources/read`'s result for one of the agent's journal URIs."""
        parts = urlsplit(address)
        path = parts.path.lstrip("/")
        query = {k: v[-1] for k, v in parse_qs(parts.query).items()}
        if path == "status":
            body: Any = [msgspec.to_builtins(s.to_api()) for s in runtime.status(agent)]
            body = body[0] if body else None
        elif path == "state":
            body = {"keys": sorted(self.state(agent))}
        elif path.startswith("state/"):
            key = unquote(path.removeprefix("state/"))
            state = self.state(agent)
            if key not in state:
                raise RpcError(RESOURCE_NOT_FOUND, f"agent {agent} has no state key {key!r}")
            body = {"key": key, "value": state[key]}
        elif path in ("findings", "logs"):
            body = self._entries(agent, path, query)
        elif path == "tasks":
            body = self._tasks(agent, query)
        elif path == "approvals":
            listed = self.ctx.projections.get(Approvals).list()
            body = {"approvals": [msgspec.to_builtins(r) for r in listed if r.agent == agent]}
        else:
            raise RpcError(RESOURCE_NOT_FOUND, f"no resource {address[:200]!r}")
        text = _encode(body).decode()
        return {"contents": [{"uri": address, "mimeType": JSON, "text": text}]}

    def state(self, agent: str) -> dict[str, str]:
        """The agent's durable state: the kept fold, with the journal's newer events folded in."""
        seq, state = self._states.get(agent, (0, {}))
        store = self.ctx.store
        while True:
            envelopes = store.read_stream(agent, seq, 5000)
            if not envelopes:
                break
            fold_state(state, envelopes)
            seq = envelopes[-1].seq
        self._states[agent] = (seq, state)
        return state

    def _entries(self, agent: str, kind: str, query: dict[str, str]) -> dict[str, Any]:
        since, limit = _number(query, "since", 0), min(_number(query, "limit", 100), MAX_LIMIT)
        model = self.ctx.projections.get(Findings if kind == "findings" else Logs)
        room = self.ctx.config.node.page_max_kb * 1024
        found: list[Any] = []
        for _ in range(SCAN_PAGES if limit else 0):
            next_seq, page = model.page(since, max(limit, SCAN_MIN), room)
            found += [e for e in page if e.agent == agent][: limit - len(found)]
            if not page or len(found) >= limit:
                since = found[-1].seq if len(found) >= limit else next_seq
                break
            since = next_seq
        return {"next_seq": since, kind: [msgspec.to_builtins(e) for e in found]}

    def _tasks(self, agent: str, query: dict[str, str]) -> dict[str, Any]:
        room = self.ctx.config.node.page_max_kb * 1024
        page = self.tasks.page(TaskQuery(None, agent, _number(query, "cursor", 0), 100, room))
        body: dict[str, Any] = {"tasks": [msgspec.to_builtins(t) for t in page.tasks]}
        if page.next_cursor is not None:
            body["next_cursor"] = page.next_cursor
        return body


def _number(query: dict[str, str], name: str, default: int) -> int:
    value = query.get(name)
    if value is None:
        return default
    if not value.isdigit() or len(value) > 18:
        raise RpcError(INVALID_PARAMS, f"`{name}` in the URI must be a non-negative integer")
    return int(value)


def _described(
    agent: str, entries: tuple[tuple[str, str, str], ...], key: str
) -> list[dict[str, Any]]:
    """MCP's listing of resources (or templates): one entry per (path, name, text)."""
    return [
        {
            key: uri(agent, path),
            "name": f"{agent} {name.lower()}",
            "title": name,
            "description": text,
            "mimeType": JSON,
        }
        for path, name, text in entries
    ]
