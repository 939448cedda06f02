"""Push notifications survive kill -9 of the node (issue 46): a real node process whose
receiver is down while its tasks finish; killed, started again, it delivers every
notification, in order per task."""

from __future__ import annotations

import json

import httpx
import pytest

from tests.delivery.support import DELIVERY_TOML, rpc, send_params, start_receiver
from tests.polling import until
from tests.protocol_support import agent_toml
from tests.support import OPERATE_TOKEN, READ_TOKEN, NodeProcess, auth, write_config

pytestmark = pytest.mark.timeout(120)
TASKS = 6
STATES = ["TASK_STATE_SUBMITTED", "TASK_STATE_WORKING", "TASK_STATE_COMPLETED"]


def per_task(received) -> dict[str, list[str]]:
    """Each task's states in the order they arrived, duplicates (at least once) folded."""
    seen: dict[str, list[str]] = {}
    for r in received:
        task = json.loads(r.body)["task"]
        states = seen.setdefault(task["id"], [])
        if task["status"]["state"] not in states:
            states.append(task["status"]["state"])
    return seen


async def test_notifications_waiting_at_a_kill_9_are_all_delivered_after_the_restart(
    aiohttp_server, tmp_path, built_agents
):
    receiver = await start_receiver(aiohttp_server)
    accepted = 0

    def answer(_) -> int:  # the first few go through, then the receiver is down
        nonlocal accepted
        accepted += 1
        return 200 if accepted <= 4 else 503

    receiver.answer = answer
    config = write_config(
        tmp_path, agent_toml("worker", built_agents["task_worker"]) + DELIVERY_TOML
    )
    node = NodeProcess(config)
    with node:
        async with httpx.AsyncClient(base_url=node.url, headers=auth(OPERATE_TOKEN)) as http:
            ids = []
            for i in range(TASKS):
                params = send_params({"numbers": [i]}, push_url=f"{receiver.url}/crash")
                sent = await rpc(http, node.url, "worker", "SendMessage", params, OPERATE_TOKEN)
                ids.append(sent["result"]["task"]["id"])
            await until(lambda: receiver.refused >= 3, 30, "deliveries failing")

            async def pending() -> int:
                answer = await http.get("/api/v1/deliveries", headers=auth(READ_TOKEN))
                return answer.json()["pending_push"]

            assert await pending() > 0
        node.kill()
        receiver.answer = lambda _: 200
        node.start()
        await until(
            lambda: (
                len(per_task(receiver.received)) == TASKS
                and all(s == STATES for s in per_task(receiver.received).values())
            ),
            30,
            "every notification of every task",
        )
    assert set(per_task(receiver.received)) == set(ids)
