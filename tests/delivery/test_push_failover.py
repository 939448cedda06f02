"""A failover resumes push delivery (issue 46): two real nodes in this process, the agent's
journal replicated from its home (node-a) to a node of its placement set (node-b) with real
signatures; node-a delivers what it can and journals it (delivery.progress), then dies;
node-b takes the journal over and delivers the rest, with the client's credentials from the
box sealed to its own key, and nothing node-a already delivered."""

from __future__ import annotations

import json

import httpx

from node.context import CONTEXT
from node.delivery.service import OUTBOX
from projections import catalogue as c
from tests.delivery.pair import placed_pair
from tests.delivery.support import DELIVERY_TOML, rpc, send_params, start_receiver
from tests.polling import until
from tests.protocol_support import agent_toml
from tests.support import OPERATE_TOKEN, auth


async def test_the_node_that_takes_a_journal_over_delivers_what_its_home_did_not(
    aiohttp_server, tmp_path, built_agents
):
    receiver = await start_receiver(aiohttp_server)
    delivered_first = []

    def answer(received) -> int:  # node-a gets its first notification through, then nothing
        if not delivered_first:
            delivered_first.append(received)
            return 200
        return 503

    receiver.answer = answer
    worker = agent_toml("worker", built_agents["task_worker"])
    _, server_a, app_b = await placed_pair(
        aiohttp_server, tmp_path, "worker", worker, DELIVERY_TOML
    )
    b = app_b[CONTEXT]
    port_a = server_a.port

    async with httpx.AsyncClient(headers=auth(OPERATE_TOKEN)) as http:
        params = send_params({}, push_url=f"{receiver.url}/failover")
        push = params["configuration"]["taskPushNotificationConfig"]
        push["authentication"] = {"scheme": "Bearer", "credentials": "cred-0001"}
        sent = await rpc(
            http, f"http://127.0.0.1:{port_a}", "worker", "SendMessage", params, OPERATE_TOKEN
        )
    task_id = sent["result"]["task"]["id"]

    def replica(kind: str) -> list:
        """node-b's copy of the journal (replicated by the mesh's own HTTP sync)."""
        return [e for e in b.store.iter_stream("worker") if e.event.type == kind]

    await until(lambda: replica("task.completed"), 30, "the task done, replicated")
    await until(lambda: replica(c.DELIVERY_PROGRESS), 15, "node-a's delivery, replicated")
    await until(lambda: receiver.refused >= 1, 15, "node-a fails to deliver the rest")
    parked = b.store.last_position
    await until(lambda: app_b[OUTBOX].ingester.cursor >= parked, 10, "node-b's outbox folds it")
    assert app_b[OUTBOX].book.pending_count() == 2  # WORKING and COMPLETED, parked

    await server_a.close()  # node-a is gone
    takeover = c.JournalTakeover(epoch=1, lease_revision=1, previous_home="node-a")
    receiver.answer = lambda _: 200
    await b.store.append("worker", *c.event_of(takeover))

    await until(lambda: len(receiver.received) >= 3, 15, "node-b delivers the rest")
    states = [json.loads(r.body)["task"]["status"]["state"] for r in receiver.received]
    assert states == ["TASK_STATE_SUBMITTED", "TASK_STATE_WORKING", "TASK_STATE_COMPLETED"]
    assert all(r.headers["Authorization"] == "Bearer cred-0001" for r in receiver.received)
    assert {json.loads(r.body)["task"]["id"] for r in receiver.received} == {task_id}
