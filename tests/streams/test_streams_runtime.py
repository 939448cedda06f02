"""Streams fed by a real agent: the payer's gated spend on the per-agent and AG-UI streams."""

from __future__ import annotations

import pytest

from tests.polling import until
from tests.streams.test_streams_agui import check_nesting, validate
from tests.support import OPERATE_TOKEN, READ_TOKEN, SseStream, auth, make_config


@pytest.fixture
def config(tmp_path, built_agents):
    config = make_config(
        tmp_path,
        f"""
[[agents]]
name = "payer"
component = "{built_agents["payer"]}"
tick_interval_ms = 20
[agents.capabilities]
spend = true
[agents.approval]
spend = true
timeout_secs = 30
""",
    )
    config.node.sse_keepalive_secs = 1
    return config


async def decide_next(client, decided: set[str]) -> str:
    """Approve the next pending approval not decided yet (the first one waits for the payer
    to load and tick)."""

    async def fresh() -> list[dict]:
        listed = await (await client.get("/api/v1/approvals", headers=auth(READ_TOKEN))).json()
        return [a for a in listed if a["id"] not in decided]

    approval = (await until(fresh, 30.0, what="a pending approval"))[0]["id"]
    response = await client.post(
        f"/api/v1/approvals/{approval}",
        json={"decision": "approve"},
        headers=auth(OPERATE_TOKEN),
    )
    assert response.status == 200
    decided.add(approval)
    return approval


async def test_a_gated_agent_on_the_unified_and_agui_streams(client):
    base = str(client.make_url("/"))
    async with (
        SseStream(base, "/api/v1/agui/events") as agui,
        SseStream(base, "/api/v1/agents/stream?agent=payer") as unified,
    ):
        snapshot = (await agui.next(10)).json()
        assert snapshot["type"] == "STATE_SNAPSHOT"
        assert [a["name"] for a in snapshot["agents"]] == ["payer"]
        decided: set[str] = set()
        for _ in range(3):
            await decide_next(client, decided)
        await decide_next(client, decided)  # the 4th request exists: the 3rd run finished
        events = []
        while not any(
            e["type"] == "RUN_FINISHED" and "outcome" not in e for e in events
        ) or not any(e.get("outcome", {}).get("type") == "interrupt" for e in events):
            events.append((await agui.next(10)).json())
        names: set[str] = set()
        wanted = {"approval_requested", "approval_decided", "state_set", "log", "agent_complete"}
        while not wanted <= names:  # journaled and ephemeral events of the payer's ticks
            names.add((await unified.next(10)).event)
    validate([snapshot, *events])
    check_nesting(events)
    interrupt = next(e for e in events if e.get("outcome", {}).get("type") == "interrupt")
    (gate,) = interrupt["outcome"]["interrupts"]
    assert gate["id"] in decided and gate["metadata"]["capability"] == "spend"
    resumed = [e for e in events if e["type"] == "RUN_STARTED" and e.get("resumed_from")]
    assert resumed and all(e["decision"] == "approve" for e in resumed)
