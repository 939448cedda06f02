"""Nodes for the console and CLI tests: a gated payer, a secret reader, a task worker and a
cashier, optionally with approval requests already pending in the journal."""

from __future__ import annotations

import asyncio
from pathlib import Path

from eventstore.keys import load_or_create_key
from node.app import open_store
from node.config.load import load_config
from projections.approvals import hash_request
from tests.support import write_config

# what an on-call operator holds: read to see, operate to decide (operate alone cannot read)
ONCALL_TOKEN = "test-oncall-token-00000001"
# an approver of the finance group, whom a policy may require (docs/approvals.md)
FINANCE_TOKEN = "test-finance-token-0000001"
# a request that needs two approvers, one of them from finance
TWO_WITH_FINANCE = [{"count": 1}, {"count": 1, "group": "finance"}]


def console_config(directory: Path, agents: dict[str, Path], *, payer_tick_ms: int = 400) -> Path:
    """payer (spend gated), vault (grant on `payments`), worker (tasks), cashier (gated tasks)."""
    return write_config(
        directory,
        f"""
[[auth.tokens]]
name = "oncall"
token = "{ONCALL_TOKEN}"
scopes = ["read", "operate"]

[[auth.tokens]]
name = "finance"
token = "{FINANCE_TOKEN}"
scopes = ["read", "operate"]
groups = ["finance"]

[[agents]]
name = "payer"
description = "Pays invoices, each after an operator's approval"
component = "{agents["payer"]}"
tick_interval_ms = {payer_tick_ms}
[agents.capabilities]
spend = true
[agents.approval]
spend = true
timeout_secs = 600

[[agents]]
name = "vault"
component = "{agents["secrets_reader"]}"
tick_interval_ms = 1000
[agents.grants]
domains = ["payments"]

[[agents]]
name = "worker"
component = "{agents["task_worker"]}"
tick_interval_ms = 200

[[agents]]
name = "cashier"
component = "{agents["cashier"]}"
tick_interval_ms = 60000
[agents.capabilities]
spend = true
[agents.approval]
spend = true
timeout_secs = 600

[secrets.payments]
api_key = "console-test-secret"
""",
    )


def seed_pending(
    config_path: Path,
    journal: str,
    capability: str,
    ids: list[str],
    timeout_secs: int = 600,
    detail: str | None = None,
    request: str | None = None,
    approvers: list[dict[str, object]] | None = None,
) -> None:
    """Journal approval requests while no node runs, as a node killed while its agents waited
    leaves them: the next node lists them as pending and arms their timeouts. `approvers`:
    the distinct approvers a policy asked for (`[{"count": 1, "group": "finance"}]`)."""
    config = load_config(config_path)
    store = open_store(config, load_or_create_key(config.data_path))

    async def write() -> None:
        store.start()
        for approval_id in ids:
            data = {
                "id": approval_id,
                "capability": capability,
                "detail": detail or f"{capability} request {approval_id}",
                "timeout_secs": timeout_secs,
            }
            if request is not None:  # the exact text, and the hash a decision binds to
                data |= {"request": request, "request_hash": hash_request(request)}
            if approvers is not None:
                data["approvers"] = approvers
            await store.append(journal, "approval.requested", data)
        await store.close()

    asyncio.run(write())


def seed_denied(
    config_path: Path, journal: str, capability: str, approval_id: str, reason: str
) -> None:
    """Journal a request and its denial with `reason` while no node runs: a reason the API
    would refuse, as a peer's journal or one written before the check can hold."""
    config = load_config(config_path)
    store = open_store(config, load_or_create_key(config.data_path))
    asked = {"id": approval_id, "capability": capability, "detail": f"{capability} request"}
    denied = {"id": approval_id, "decision": "deny", "operator": "peer-op", "reason": reason}

    async def write() -> None:
        store.start()
        await store.append(journal, "approval.requested", asked)
        await store.append(journal, "approval.decided", denied)
        await store.close()

    asyncio.run(write())


def seed_usage(config_path: Path, journal: str, calls: list[dict[str, object]]) -> None:
    """Journal inference calls (`inference.completed` payloads) while no node runs."""
    config = load_config(config_path)
    store = open_store(config, load_or_create_key(config.data_path))

    async def write() -> None:
        store.start()
        for call in calls:
            await store.append(journal, "inference.completed", call)
        await store.close()

    asyncio.run(write())
