"""A2A push notifications (issue 46 item 2): configs set, read, listed and deleted with the
official a2a-sdk client, notifications POSTed to a real receiving server and parsed with the
SDK's own protobuf types, retries and what is refused; a node with real agents."""

from __future__ import annotations

import json

import httpx
import pytest
from a2a.client import ClientConfig, ClientFactory
from a2a.helpers.proto_helpers import new_data_message
from a2a.types.a2a_pb2 import (
    AuthenticationInfo,
    DeleteTaskPushNotificationConfigRequest,
    GetTaskPushNotificationConfigRequest,
    ListTaskPushNotificationConfigsRequest,
    Role,
    SendMessageRequest,
    StreamResponse,
    TaskPushNotificationConfig,
    TaskState,
)
from google.protobuf.json_format import Parse

from node.delivery.service import OUTBOX
from tests.delivery.support import DELIVERY_TOML, send_params, start_receiver
from tests.delivery.support import rpc as call
from tests.polling import until
from tests.protocol_support import agent_toml, cashier_toml, start_node, started
from tests.support import ADMIN_TOKEN, OPERATE_TOKEN, READ_TOKEN, auth

S = TaskState
CLIENT_TOKEN = "client-token-for-this-task-0001"
CREDENTIALS = "secret-credentials-of-the-client-0001"


@pytest.fixture
async def node(aiohttp_server, tmp_path, built_agents):
    toml = (
        agent_toml("worker", built_agents["task_worker"])
        + cashier_toml("cashier", built_agents["cashier"])
        + DELIVERY_TOML
    )
    node = await start_node(aiohttp_server, tmp_path, toml)
    await started(node, "worker", "cashier")
    return node


@pytest.fixture
async def receiver(aiohttp_server):
    return await start_receiver(aiohttp_server)


async def sdk_client(http: httpx.AsyncClient, url: str, **config):
    return await ClientFactory(ClientConfig(httpx_client=http, **config)).create_from_url(url)


def parsed(body: bytes) -> StreamResponse:
    """Strict: a field the A2A 1.0 protobuf does not know fails here."""
    return Parse(body.decode(), StreamResponse())


def states(received) -> list[int]:
    return [parsed(r.body).task.status.state for r in received]


async def delivered(http, node, task_id: str, count: int) -> dict:
    """The first config's delivery state, once `count` deliveries are recorded."""

    async def state():
        rest = await http.get(
            f"{node.url}/api/v1/a2a/tasks/{task_id}/push-configs", headers=auth(READ_TOKEN)
        )
        found = rest.json()[0]["delivery"]
        return found if found["delivered"] >= count else None

    return await until(state, 10, f"{count} deliveries recorded")


async def rpc(http, node, agent: str, method: str, params: dict, token: str = OPERATE_TOKEN):
    return await call(http, node.url, agent, method, params, token)


async def test_sdk_sets_a_config_with_its_message_and_every_change_is_posted(node, receiver, http):
    card = (await http.get(f"{node.url}/a2a/worker/.well-known/agent-card.json")).json()
    assert card["capabilities"]["pushNotifications"] is True
    node_card = (await http.get(f"{node.url}/.well-known/agent-card.json")).json()
    assert node_card["capabilities"]["pushNotifications"] is True

    config = TaskPushNotificationConfig(
        url=f"{receiver.url}/hooks/a2a?client=1",
        token=CLIENT_TOKEN,
        authentication=AuthenticationInfo(scheme="Bearer", credentials=CREDENTIALS),
    )
    client = await sdk_client(http, f"{node.url}/a2a/worker", push_notification_config=config)
    message = new_data_message({"numbers": [1, 2, 3]}, role=Role.ROLE_USER)
    events = [e async for e in client.send_message(SendMessageRequest(message=message))]
    task_id = events[0].task.id

    await receiver.wait_for(3)
    got = receiver.received
    assert states(got) == [S.TASK_STATE_SUBMITTED, S.TASK_STATE_WORKING, S.TASK_STATE_COMPLETED]
    for r in got:
        assert r.path == "/hooks/a2a?client=1"
        assert r.headers["Authorization"] == f"Bearer {CREDENTIALS}"
        assert r.headers["X-A2A-Notification-Token"] == CLIENT_TOKEN
        assert r.headers["Content-Type"] == "application/a2a+json"
        assert parsed(r.body).task.id == task_id
    done = parsed(got[-1].body).task
    assert [json.loads(r.body)["task"]["status"]["timestamp"] for r in got] == sorted(
        json.loads(r.body)["task"]["status"]["timestamp"] for r in got
    )
    assert done.artifacts[0].parts[0].data.struct_value["sum"] == 6
    assert len({r.headers["Idempotency-Key"] for r in got}) == 3  # one per notification

    # the SDK's Get, List, Delete: the answers hold the URL and scheme, never the secrets
    fetched = await client.get_task_push_notification_config(
        GetTaskPushNotificationConfigRequest(task_id=task_id, id=task_id)
    )
    assert fetched.url == config.url and fetched.authentication.scheme == "Bearer"
    assert not fetched.token and not fetched.authentication.credentials
    listed = await client.list_task_push_notification_configs(
        ListTaskPushNotificationConfigsRequest(task_id=task_id)
    )
    assert [c.id for c in listed.configs] == [task_id]
    second = await client.create_task_push_notification_config(
        TaskPushNotificationConfig(task_id=task_id, id="audit", url=f"{receiver.url}/audit")
    )
    assert second.id == "audit" and second.task_id == task_id

    # the delivery state over REST: the URL's origin only
    await delivered(http, node, task_id, 3)
    rest = await http.get(
        f"{node.url}/api/v1/a2a/tasks/{task_id}/push-configs", headers=auth(READ_TOKEN)
    )
    assert rest.status_code == 200, rest.text
    by_id = {c["id"]: c for c in rest.json()}
    assert by_id[task_id]["destination"] == receiver.url
    assert by_id[task_id]["delivery"]["delivered"] == 3
    assert by_id[task_id]["delivery"]["pending"] == 0
    assert by_id[task_id]["client"] == "operator"
    assert CREDENTIALS not in rest.text and CLIENT_TOKEN not in rest.text

    await client.delete_task_push_notification_config(
        DeleteTaskPushNotificationConfigRequest(task_id=task_id, id="audit")
    )
    listed = await client.list_task_push_notification_configs(
        ListTaskPushNotificationConfigsRequest(task_id=task_id)
    )
    assert [c.id for c in listed.configs] == [task_id]

    # another token sees none of them; an admin sees them all
    other = await rpc(
        http,
        node,
        "worker",
        "ListTaskPushNotificationConfigs",
        {"taskId": task_id},
        token=ADMIN_TOKEN,
    )
    assert [c["id"] for c in other["result"]["configs"]] == [task_id]

    # the secrets are nowhere in the journal, in clear: only sealed
    for envelope in node.ctx.store.iter_stream("worker"):
        for secret in (CLIENT_TOKEN, CREDENTIALS, "/hooks/a2a"):
            assert secret.encode() not in envelope.payload
    await client.close()


async def test_a_config_set_on_a_waiting_task_gets_its_later_changes(node, receiver, http):
    client = await sdk_client(http, f"{node.url}/a2a/cashier", streaming=False)
    request = SendMessageRequest(
        message=new_data_message({"pay": {"invoice": "INV-7"}}, role=Role.ROLE_USER)
    )
    (answer,) = [e async for e in client.send_message(request)]
    task = answer.task
    assert task.status.state == S.TASK_STATE_INPUT_REQUIRED
    created = await rpc(
        http,
        node,
        "cashier",
        "CreateTaskPushNotificationConfig",
        {"taskId": task.id, "url": f"{receiver.url}/late"},
    )
    assert created["result"] == {"id": task.id, "taskId": task.id, "url": f"{receiver.url}/late"}
    decided = await rpc(
        http,
        node,
        "cashier",
        "SendMessage",
        {
            "message": {
                "messageId": "m2",
                "role": "ROLE_USER",
                "taskId": task.id,
                "parts": [{"text": "approve"}],
            }
        },
    )
    assert decided["result"]["task"]["status"]["state"] == "TASK_STATE_COMPLETED"
    await receiver.wait_for(2, "/late")
    # what happened before the config (submitted, working, input required) is not sent
    assert states(receiver.at("/late")) == [S.TASK_STATE_WORKING, S.TASK_STATE_COMPLETED]
    await client.close()


async def test_failed_deliveries_are_retried_in_order_and_their_state_shown(node, receiver, http):
    # then 200; "²" is a digit to str.isdigit, not to float(): an unreadable Retry-After
    answers = iter([(503, {"Retry-After": "²"}), 500, 302])
    receiver.answer = lambda _: next(answers, 200)
    params = send_params({"numbers": [2]}, push_url=f"{receiver.url}/retry")
    sent = await rpc(http, node, "worker", "SendMessage", params)
    task_id = sent["result"]["task"]["id"]
    await receiver.wait_for(3, "/retry")
    assert states(receiver.at("/retry")) == [
        S.TASK_STATE_SUBMITTED,
        S.TASK_STATE_WORKING,
        S.TASK_STATE_COMPLETED,
    ]
    assert receiver.refused == 3

    found = await delivered(http, node, task_id, 3)
    assert found["delivered"] == 3 and found["failed_attempts"] == 3
    assert found["attempts"] == 6 and found["pending"] == 0
    assert found["closed"] == "final" and found["last_status"] == 200

    metrics = (await http.get(f"{node.url}/api/v1/metrics", headers=auth(READ_TOKEN))).text
    assert 'svc_delivery_attempts_total{kind="push",outcome="failed"} 3.0' in metrics
    assert 'svc_delivery_ended_total{how="delivered",kind="push"} 3.0' in metrics


async def test_bad_configs_and_forbidden_destinations_are_refused(node, http):
    params = send_params({}, returnImmediately=True)
    task = (await rpc(http, node, "worker", "SendMessage", params))["result"]["task"]
    cases = {
        "http://10.1.2.3/hook": "10.1.2.3 is a private address",
        "http://169.254.169.254/latest/meta-data": "169.254.169.254 is a link-local address",
        "http://[::1]:8080/": "::1 is a loopback address",
        "http://0.0.0.0/": "0.0.0.0 is the unspecified address",
        "ftp://example.com/": "must start with http:// or https://",
        "http://user:pass@127.0.0.1/": "carries credentials",
        "http://no-such-host.invalid/": "does not resolve",
    }
    for url, why in cases.items():
        answer = await rpc(
            http,
            node,
            "worker",
            "CreateTaskPushNotificationConfig",
            {"taskId": task["id"], "url": url},
        )
        assert answer["error"]["code"] == -32602, (url, answer)
        assert why in answer["error"]["message"], (url, answer)
        assert "pass" not in answer["error"]["message"]
    bad_header = await rpc(
        http,
        node,
        "worker",
        "CreateTaskPushNotificationConfig",
        {"taskId": task["id"], "url": "http://127.0.0.1:9/", "token": "a\r\nX-Evil: 1"},
    )
    assert bad_header["error"]["code"] == -32602
    unknown = await rpc(
        http,
        node,
        "worker",
        "GetTaskPushNotificationConfig",
        {"taskId": task["id"], "id": "nope"},
    )
    assert unknown["error"]["code"] == -32001
    missing_task = await rpc(
        http,
        node,
        "worker",
        "CreateTaskPushNotificationConfig",
        {"taskId": "x", "url": "http://127.0.0.1:9/"},
    )
    assert missing_task["error"]["code"] == -32001
    too_many = []
    for i in range(11):
        answer = await rpc(
            http,
            node,
            "worker",
            "CreateTaskPushNotificationConfig",
            {"taskId": task["id"], "id": f"c{i}", "url": "http://127.0.0.1:9/"},
        )
        too_many.append(answer)
    assert all("result" in a for a in too_many[:10])
    assert "the most this node keeps" in too_many[10]["error"]["message"]
    read_only = await http.post(
        f"{node.url}/a2a/worker",
        json={
            "jsonrpc": "2.0",
            "id": 1,
            "method": "CreateTaskPushNotificationConfig",
            "params": {"taskId": task["id"], "url": "http://127.0.0.1:9/"},
        },
        headers=auth(READ_TOKEN),
    )
    assert read_only.status_code == 403


async def test_the_outbox_is_bounded_per_task_and_per_client(
    aiohttp_server, tmp_path, built_agents, receiver, http
):
    toml = (
        agent_toml("worker", built_agents["task_worker"])
        + DELIVERY_TOML
        + "max_pending_per_task = 2\nmax_pending_per_client = 3\n"
    )
    node = await start_node(aiohttp_server, tmp_path, toml)
    await started(node, "worker")
    receiver.answer = lambda _: 503  # down while both tasks run
    tasks = []
    for path in ("/one", "/two"):
        params = send_params({}, push_url=receiver.url + path)
        sent = await rpc(http, node, "worker", "SendMessage", params)
        assert sent["result"]["task"]["status"]["state"] == "TASK_STATE_COMPLETED"
        tasks.append(sent["result"]["task"]["id"])
    receiver.answer = lambda _: 200
    await receiver.wait_for(2, "/one")
    await receiver.wait_for(1, "/two")
    # past the task's bound the oldest waiting one went (the newest says the state);
    # past the token's bound, the new ones did
    assert states(receiver.at("/one")) == [S.TASK_STATE_SUBMITTED, S.TASK_STATE_COMPLETED]
    assert states(receiver.at("/two")) == [S.TASK_STATE_SUBMITTED]
    one = await delivered(http, node, tasks[0], 2)
    two = await delivered(http, node, tasks[1], 1)
    assert (one["dropped"], two["dropped"]) == (1, 2)
    assert one["pending"] == two["pending"] == 0


async def test_a_config_past_the_tokens_bound_is_refused_with_its_message(
    aiohttp_server, tmp_path, built_agents, receiver, http
):
    """SendMessage's config counts against the token's bound like CreateTaskPushNotificationConfig:
    past it, the message is refused saying why, and no task is made (nor a config journaled that
    nothing would deliver)."""
    toml = agent_toml("worker", built_agents["task_worker"]) + DELIVERY_TOML
    node = await start_node(aiohttp_server, tmp_path, toml + "max_configs_per_client = 1\n")
    await started(node, "worker")
    first = await rpc(http, node, "worker", "SendMessage", send_params({}, push_url=receiver.url))
    first_id = first["result"]["task"]["id"]
    second = await rpc(http, node, "worker", "SendMessage", send_params({}, push_url=receiver.url))
    assert "most push configs" in second["error"]["message"], second
    await receiver.wait_for(2)
    assert all(first_id.encode() in r.body for r in receiver.received)  # the first task's only
    listed = await http.get(f"{node.url}/api/v1/a2a/tasks", headers=auth(READ_TOKEN))
    assert [t["id"] for t in listed.json()] == [first_id], listed.text


async def test_follow_up_messages_may_repeat_their_push_config_unchanged(node, receiver, http):
    """The a2a-sdk's `push_notification_config` goes on every message (docs/protocols/a2a.md's
    recipe): the client answers its own input-required task with it, and it is accepted as it
    is; a message that would change it is refused, saying what to use instead."""
    config = TaskPushNotificationConfig(
        url=f"{receiver.url}/follow",
        token=CLIENT_TOKEN,
        authentication=AuthenticationInfo(scheme="Bearer", credentials=CREDENTIALS),
    )
    client = await sdk_client(
        http, f"{node.url}/a2a/cashier", streaming=False, push_notification_config=config
    )
    request = SendMessageRequest(
        message=new_data_message({"pay": {"invoice": "INV-8"}}, role=Role.ROLE_USER)
    )
    (answer,) = [e async for e in client.send_message(request)]
    task = answer.task
    assert task.status.state == S.TASK_STATE_INPUT_REQUIRED
    changed = send_params({"decision": "approve"}, push_url=f"{receiver.url}/elsewhere")
    changed["message"]["taskId"] = task.id
    refused = await rpc(http, node, "cashier", "SendMessage", changed)
    assert refused["error"]["code"] == -32602, refused
    assert "CreateTaskPushNotificationConfig" in refused["error"]["message"]
    approve = SendMessageRequest(
        message=new_data_message({"decision": "approve"}, role=Role.ROLE_USER, task_id=task.id)
    )
    (decided,) = [e async for e in client.send_message(approve)]
    assert decided.task.status.state == S.TASK_STATE_COMPLETED
    await until(lambda: S.TASK_STATE_COMPLETED in states(receiver.at("/follow")), 15, "done")
    assert receiver.at("/elsewhere") == []
    assert len(node.app[OUTBOX].configs(task.id)) == 1  # nothing was added
    await client.close()
