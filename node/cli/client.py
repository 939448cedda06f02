"""`agent-node approvals|status|tasks|logs|findings|agents`: a client of a node's public API.

Every command is an ordinary API call with the operator's token, so what it does is journaled
exactly as any other client's call. Human tables by default, `--json` for scripts; a failed
call prints the problem's `detail` and exits 1 (2 for a usage error such as a missing token).
What agents, peers and other clients wrote reaches the terminal through `visible`: a control,
bidi or other invisible character shows as its escape (`\\x1b`, `\\u202e`), never acts.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import sys
import time
from collections.abc import Callable
from datetime import UTC, datetime
from typing import Any

from node.cli.agents import add_agents_commands
from node.cli.node_api import (
    CA_FILE_ENV,
    DEFAULT_URL,
    TOKEN_ENV,
    URL_ENV,
    ClientError,
    Node,
    cell,
    emit,
    segment,
    table,
)
from node.cli.placed import replica_status
from node.cli.usage import add_arguments as usage_args
from node.cli.usage import cmd_usage
from node.display.humanize import duration, size, visible, visible_lines
from node.display.request_summary import summary

FOLLOW_INTERVAL_SECS = 1.0
PAGE = 1000  # the API's largest `limit`


# ---------------------------------------------------------------------------- commands
def cmd_status(node: Node, args: argparse.Namespace) -> int:
    """The runtime's agents (GET /api/v1/status) and the replicas this node holds of placed
    agents other nodes run (GET /api/v1/agents), each saying where it runs; `--json`: the
    status objects as the node gives them, then an object per replica (placed.py)."""
    params = {"agent": args.agent} if args.agent else None
    try:
        statuses = node.call("GET", "/api/v1/status", params=params)
        refused = None
    except ClientError as exc:  # `--agent` naming a replica: not in the runtime here
        if not args.agent:
            raise
        statuses, refused = [], exc
    replicas = [replica_status(agent) for agent in _replicas(node, args.agent)]
    if refused is not None and not replicas:
        raise refused
    elsewhere = {r["name"] for r in replicas}  # an agent that moved away keeps a stopped worker
    shown = [s for s in statuses if s["name"] not in elsewhere] + replicas
    rows = [
        {
            **s,
            "uptime": _ms(s.get("uptime_ms")),
            "heap": size(s.get("memory_profile", {}).get("heap_bytes")),
            "fuel": _fuel(s),
            "idle": _ms(s.get("last_activity_ms_ago")),
            "phase": phase_text(s),
        }
        for s in shown
    ]
    columns = [
        ("agent", "name"),
        ("status", "status"),
        ("uptime", "uptime"),
        ("heap", "heap"),
        ("fuel", "fuel"),
        ("restarts", "restart_count"),
        ("idle", "idle"),
        ("phase", "phase"),
    ]
    emit(args, shown, lambda _: table(rows, columns))
    return 0


def _replicas(node: Node, name: str | None) -> list[dict[str, Any]]:
    """The placed agents another node runs, as this node's replica of each says."""
    if name is None:
        agents = node.call("GET", "/api/v1/agents")
    else:
        try:
            agents = [node.call("GET", f"/api/v1/agents/{segment(name)}")]
        except ClientError:
            return []
    return [a for a in agents if a["status"] == "replica"]


def _fuel(status: dict[str, Any]) -> str:
    if "memory_profile" not in status:  # no instance here
        return ""
    return status["memory_profile"].get("fuel_remaining") or "unlimited"


def phase_text(status: dict[str, Any]) -> str:
    """What an agent without a live instance is doing, and why ("" when it runs)."""
    phase, reason = status.get("phase"), status.get("reason")
    if not phase:
        return ""
    return f"{phase}: {reason}" if reason else str(phase)


def _ms(value: Any) -> str:
    return duration(value / 1000) if isinstance(value, int | float) else ""


def cmd_approvals_list(node: Node, args: argparse.Namespace) -> int:
    if args.batched:
        groups = node.call("GET", "/api/v1/approvals/batched")
        columns = [("agent", "agent"), ("capability", "capability"), ("count", "count")]
        columns.append(("ids", "ids"))
        emit(args, groups, lambda g: table(g["groups"], columns))
        return 0
    pending = node.call("GET", "/api/v1/approvals")
    columns = [
        ("id", "id"),
        ("agent", "agent"),
        ("capability", "capability"),
        ("expires in", "expires_in"),
        ("state", "state"),
        ("approvals", "approvals_text"),
        ("size", "size"),
        ("hash", "hash"),
        ("detail", "detail"),
    ]
    now = time.time()
    rows = [
        {
            **p,
            "state": _pending_state(p),
            "approvals_text": (p.get("approvals") or {}).get("progress", ""),
            "expires_in": _until(p.get("expires_at"), now),
            **_what_is_asked(p),
        }
        for p in pending
    ]
    emit(args, pending, lambda _: table(rows, columns))
    return 0


DETAIL_WIDTH = 160  # the list's summary of a request; `--json` has the whole request
HASH_SHOWN = 12  # hex digits of the request's sha256: enough to tell two requests apart


def _what_is_asked(request: dict[str, Any]) -> dict[str, str]:
    """Size, sha256 prefix and summary of the exact request a decision binds to (the hash is
    the start of its `request_hash`, computed here from the text shown). The summary is
    made here from the request (short fields such as an amount first, long values elided), not
    taken from the journaled `detail`, which a peer's journal could word differently."""
    text = request.get("request")
    if not isinstance(text, str) or not text:  # journaled without its text: only the detail
        return {"size": "", "hash": "", "detail": str(request.get("detail") or "")[:DETAIL_WIDTH]}
    data = text.encode("utf-8", "surrogatepass")  # as projections.approvals.hash_request
    return {
        "size": size(len(data)),
        "hash": hashlib.sha256(data).hexdigest()[:HASH_SHOWN],
        "detail": summary(str(request.get("capability")), text, DETAIL_WIDTH),
    }


def _pending_state(request: dict[str, Any]) -> str:
    """`orphaned` says what a decision on it will do; a recorded decision shows as well."""
    if request.get("state") != "orphaned":
        return request.get("state") or "pending"
    recorded = request.get("recorded")
    suffix = f"; {recorded} recorded by {request.get('recorded_by')}" if recorded else ""
    return f"orphaned ({request.get('note')}{suffix})"


def _until(timestamp: Any, now: float) -> str:
    """`4 min 10 s` from now to an ISO timestamp; the timestamp itself if it does not parse."""
    try:
        moment = datetime.fromisoformat(str(timestamp).replace("Z", "+00:00"))
    except ValueError:
        return str(timestamp or "")
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=UTC)
    left = moment.timestamp() - now
    return duration(left) if left > 0 else "due"


HISTORY_COLUMNS = [
    ("at", "at"),
    ("agent", "agent"),
    ("outcome", "outcome"),
    ("capability", "capability"),
    ("by", "by"),
    ("reason", "reason"),
    ("id", "id"),
    ("detail", "detail"),
]


def cmd_approvals_history(node: Node, args: argparse.Namespace) -> int:
    """Resolved requests, newest first: what was asked, the outcome, who decided and why."""
    resolved = node.call("GET", "/api/v1/approvals/history", params={"limit": args.limit})
    rows = [{**r, "by": _decided_by(r)} for r in resolved]
    emit(args, resolved, lambda _: table(rows, HISTORY_COLUMNS))
    return 0


def _decided_by(resolution: dict[str, Any]) -> str:
    """Who decided: the operator, every approver when several were needed, or the policy."""
    approvers = resolution.get("approvers")
    if approvers:
        return ", ".join(map(str, approvers))
    if resolution.get("outcome") == "timeout":
        return "(timed out)"
    return str(resolution.get("operator") or "")


def _decide(decision: str) -> Callable[[Node, argparse.Namespace], int]:
    def command(node: Node, args: argparse.Namespace) -> int:
        ids = list(args.ids)
        for group in args.group or ():
            ids.extend(_group_ids(node, group))
        if not ids:
            raise ClientError("give approval ids, or --group AGENT:CAPABILITY", exit_code=2)
        reason = getattr(args, "reason", None)
        body: dict[str, Any] = {"decision": decision}
        if reason is not None:
            body["reason"] = reason
        if len(ids) == 1 and not args.group:
            path = f"/api/v1/approvals/{segment(ids[0])}"
            result = node.call("POST", path, json=body)
            emit(args, result, _decision_text)
            return 0
        result = node.call("POST", "/api/v1/approvals/batch", json={"ids": ids, **body})
        emit(args, result, lambda r: _batch_summary(decision, r))
        return 0 if result["decided"] or result.get("waiting") or not ids else 1

    return command


def _decision_text(result: dict[str, Any]) -> str:
    if result.get("applies") == "waiting":  # one of several approvers: counted, still pending
        return visible(f"approval of {result['id']} counted: {result['approvals']['progress']}")
    text = f"{result['decision']} {result['id']} at {result['decided_at']}"
    text = f"{text}: {result['reason']}" if result.get("reason") else text
    return visible(f"{text} ({result['effect']})" if result.get("effect") else text)


def _group_ids(node: Node, group: str) -> list[str]:
    agent, sep, capability = group.partition(":")
    if not sep or not agent or not capability:
        raise ClientError(f"--group takes AGENT:CAPABILITY, got {group!r}", exit_code=2)
    groups = node.call("GET", "/api/v1/approvals/batched")["groups"]
    for g in groups:
        if g["agent"] == agent and g["capability"] == capability:
            return list(g["ids"])
    raise ClientError(f"no pending approvals for {agent} asking {capability}")


def _batch_summary(decision: str, result: dict[str, Any]) -> str:
    lines = [f"{decision}: {result['decided']} decided"]
    lines += [f"  {decision} {i}" for i in result["ids"]]
    lines += [f"  counted toward {i} (it needs more approvers)" for i in result.get("waiting", [])]
    lines += [
        f"  skipped {i} (unknown, already resolved or hosted elsewhere)"
        for i in result.get("skipped", [])
    ]
    return "\n".join(map(visible, lines))


TASK_COLUMNS = [
    ("id", "id"),
    ("from", "from"),
    ("to", "to"),
    ("status", "status"),
    ("created_at", "created_at"),
    ("completed_at", "completed_at"),
]


def cmd_tasks_list(node: Node, args: argparse.Namespace) -> int:
    params = {k: v for k, v in (("status", args.status), ("agent", args.agent)) if v}
    tasks = node.call("GET", "/api/v1/a2a/tasks", params=params)
    emit(args, tasks, lambda t: table(t, TASK_COLUMNS))
    return 0


def cmd_tasks_get(node: Node, args: argparse.Namespace) -> int:
    task = node.call("GET", f"/api/v1/a2a/tasks/{segment(args.id)}")
    emit(args, task, _task_text)
    return 0


def _task_text(task: dict[str, Any]) -> str:
    lines = [f"{key}: {cell(task.get(key))}" for key in ("id", "from", "to", "status")]
    for key in ("created_at", "completed_at", "input", "progress", "output", "error"):
        if task.get(key) is not None:
            lines.append(f"{key}: {cell(task[key])}")
    return "\n".join(lines)


def cmd_tasks_create(node: Node, args: argparse.Namespace) -> int:
    try:
        task_input = json.loads(args.input)
    except json.JSONDecodeError as exc:
        raise ClientError(f"--input is not JSON: {exc}", exit_code=2) from None
    body = {"from": args.from_, "to": args.to, "input": task_input}
    created = node.call("POST", "/api/v1/a2a/tasks", json=body)
    emit(args, created, lambda c: visible(f"created {c['id']} ({c['status']})"))
    return 0


def cmd_tasks_cancel(node: Node, args: argparse.Namespace) -> int:
    """Through the agent's A2A endpoint (CancelTask): the REST API has no cancel."""
    task = node.call("GET", f"/api/v1/a2a/tasks/{segment(args.id)}")
    rpc = {"jsonrpc": "2.0", "id": 1, "method": "CancelTask", "params": {"id": task["id"]}}
    reply = node.call("POST", f"/a2a/{segment(task['to'])}", json=rpc)
    if reply.get("error"):
        raise ClientError(f"cannot cancel {task['id']}: {reply['error'].get('message')}")
    emit(args, reply["result"], lambda _: visible(f"canceled {task['id']}"))
    return 0


LOG_COLUMNS = [("seq", "seq"), ("ts", "ts"), ("level", "level"), ("agent", "agent")]
LOG_COLUMNS.append(("message", "message"))
FINDING_COLUMNS = [("seq", "seq"), ("ts", "ts"), ("severity", "severity"), ("agent", "agent")]
FINDING_COLUMNS += [("by", "posted_by"), ("title", "title"), ("detail", "detail")]


def _entries(
    kind: str, columns: list[tuple[str, str]]
) -> Callable[[Node, argparse.Namespace], int]:
    """Page through /api/v1/{kind} from --since; with --follow keep polling with next_seq."""

    def command(node: Node, args: argparse.Namespace) -> int:
        since, printed_header = args.since, False
        remaining = args.limit
        while True:
            size = PAGE if remaining is None else min(PAGE, remaining)
            page = node.call("GET", f"/api/v1/{kind}", params={"since": since, "limit": size})
            entries = page[kind]
            if args.agent:
                entries = [e for e in entries if e.get("agent") == args.agent]
            if args.json:
                for entry in entries:
                    print(json.dumps(entry), flush=True)
            elif entries:
                text = table(entries, columns)
                text = visible_lines(text if not printed_header else text.split("\n", 1)[1])
                print(text, flush=True)
                printed_header = True
            since = page["next_seq"]
            if remaining is not None:
                remaining -= len(page[kind])
                if remaining <= 0:
                    return 0
            if len(page[kind]) < size:
                if not args.follow:
                    if not printed_header and not args.json:
                        print("(none)")
                    return 0
                time.sleep(FOLLOW_INTERVAL_SECS)

    return command


# ---------------------------------------------------------------------------- wiring
def add_client_commands(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """Register the client commands on agent-node's sub-command parser."""
    common = argparse.ArgumentParser(add_help=False)
    common.add_argument(
        "--url", default=os.environ.get(URL_ENV, DEFAULT_URL), help=f"node URL (${URL_ENV})"
    )
    common.add_argument(
        "--token", default=os.environ.get(TOKEN_ENV), help=f"bearer token (${TOKEN_ENV})"
    )
    common.add_argument(
        "--ca-file", help=f"PEM CA certificate(s) an https node's must chain to (${CA_FILE_ENV})"
    )
    common.add_argument("--json", action="store_true", help="JSON output for scripts")

    def command(
        parent: argparse._SubParsersAction[argparse.ArgumentParser],
        name: str,
        func: Callable[..., int],
        help: str,
        timeout: float = 30,
    ) -> argparse.ArgumentParser:
        p = parent.add_parser(name, help=help, description=help, parents=[common])
        p.set_defaults(func=_run(func, timeout))
        return p

    status = command(sub, "status", cmd_status, "status of the node's agents")
    status.add_argument("--agent", help="only this agent")
    usage_args(command(sub, "usage", cmd_usage, "inference usage and cost per agent and model"))

    approvals = sub.add_parser("approvals", help="list and decide pending approvals")
    actions = approvals.add_subparsers(metavar="ACTION")
    listing = command(actions, "list", cmd_approvals_list, "pending approval requests")
    listing.add_argument("--batched", action="store_true", help="grouped by agent and capability")
    for decision, verb in (("approve", "approve"), ("deny", "deny")):
        p = command(actions, verb, _decide(decision), f"{verb} approvals (several: one batch)")
        p.add_argument("ids", nargs="*", help="approval ids")
        p.add_argument(
            "--group", action="append", metavar="AGENT:CAPABILITY", help="every pending one of it"
        )
        if decision == "deny":
            p.add_argument(
                "--reason",
                help="why (one line of visible text, up to 500 characters): the agent is told",
            )
    past = command(
        actions, "history", cmd_approvals_history, "decided and timed-out requests, newest first"
    )
    past.add_argument("--limit", type=_non_negative, default=50, help="at most this many (50)")

    tasks = sub.add_parser("tasks", help="A2A tasks").add_subparsers(metavar="ACTION")
    listing = command(tasks, "list", cmd_tasks_list, "tasks, oldest first")
    listing.add_argument(
        "--status", choices=("pending", "running", "completed", "failed"), help="only this status"
    )
    listing.add_argument("--agent", help="only tasks assigned to this agent")
    command(tasks, "get", cmd_tasks_get, "one task").add_argument("id")
    create = command(tasks, "create", cmd_tasks_create, "create a task for a hosted agent")
    create.add_argument("--from", dest="from_", default="operator", help="delegating agent")
    create.add_argument("--to", required=True, help="assigned agent")
    create.add_argument("--input", default="{}", help="JSON object (default {})")
    command(tasks, "cancel", cmd_tasks_cancel, "cancel a pending or running task").add_argument(
        "id"
    )

    for kind, columns, help in (
        ("logs", LOG_COLUMNS, "log entries"),
        ("findings", FINDING_COLUMNS, "findings"),
    ):
        p = command(sub, kind, _entries(kind, columns), help)
        p.add_argument("--since", type=_non_negative, default=0, help="entries after this seq")
        p.add_argument("--limit", type=_non_negative, help="at most this many (default all)")
        p.add_argument("--agent", help="only this agent's")
        p.add_argument("--follow", "-f", action="store_true", help="keep printing new ones")

    add_agents_commands(sub, command)  # `agents ...`: the same registrar (agents.py)


def _non_negative(text: str) -> int:
    value = int(text)
    if value < 0:
        raise argparse.ArgumentTypeError("must be 0 or more")
    return value


def _run(
    func: Callable[[Node, argparse.Namespace], int], timeout: float = 30
) -> Callable[[argparse.Namespace], int]:
    def run(args: argparse.Namespace) -> int:
        if not args.token:
            print(f"agent-node: give --token or set {TOKEN_ENV}", file=sys.stderr)
            return 2
        try:
            node = Node(args.url, args.token, timeout, args.ca_file)
        except ClientError as exc:
            print(f"agent-node: {exc.detail}", file=sys.stderr)
            return exc.exit_code
        try:
            return func(node, args)
        except ClientError as exc:
            print(f"agent-node: {visible(exc.detail)}", file=sys.stderr)
            return exc.exit_code
        except KeyboardInterrupt:
            return 130
        finally:
            node.close()

    return run
