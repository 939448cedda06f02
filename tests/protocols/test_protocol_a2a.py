"""A2A 1.0 over JSON-RPC, driven by the official a2a-sdk client against a node hosting real
agents: card resolution, send, stream, get, list, input-required, answer, cancel; and every
kind of bad input, answered with its A2A / JSON-RPC error and never a 500."""

from __future__ import annotations

import asyncio
import json
from typing import Any

import httpx
import pytest
from a2a.client import ClientConfig, ClientFactory
from a2a.client.card_resolver import A2ACardResolver
from a2a.helpers.proto_helpers import get_data_parts, new_data_message, new_text_message
from a2a.types.a2a_pb2 import (
    CancelTaskRequest,
    GetTaskRequest,
    ListTasksRequest,
    Role,
    SendMessageRequest,
    SubscribeToTaskRequest,
    TaskState,
)
from a2a.utils.errors import TaskNotCancelableError
from google.protobuf.json_format import MessageToDict

from projections.tasks import Tasks
from tests.polling import until
from tests.protocol_support import (
    agent_toml,
    cashier_toml,
    start_node,
    started,
)
from tests.support import OPERATE_TOKEN, READ_TOKEN, auth

S = TaskState


@pytest.fixture
async def node(aiohttp_server, tmp_path, built_agents):
    toml = agent_toml("worker", built_agents["task_worker"]) + cashier_toml(
        "cashier", built_agents["cashier"]
    )
    node = await start_node(aiohttp_server, tmp_path, toml)
    await started(node, "worker", "cashier")
    return node


@pytest.fixture
async def unparked(aiohttp_server, tmp_path, built_agents):
    """The cashier on a node that parks no run: a task waiting for an approval holds the
    agent's one instance, so a task sent after it stays submitted until that one ends (with
    parking the worker takes it at once, and a cancel races its run)."""
    toml = cashier_toml("cashier", built_agents["cashier"])
    node = await start_node(aiohttp_server, tmp_path, toml, "max_parked_runs_per_agent = 0")
    await started(node, "cashier")
    return node


@pytest.fixture
async def http():
    async with httpx.AsyncClient(headers=auth(OPERATE_TOKEN), timeout=30) as client:
        yield client


async def sdk_client(http: httpx.AsyncClient, url: str, *, streaming: bool = True):
    config = ClientConfig(httpx_client=http, streaming=streaming)
    return await ClientFactory(config).create_from_url(url)


def user_data(data: dict[str, Any], **kwargs: Any):
    return SendMessageRequest(message=new_data_message(data, role=Role.ROLE_USER, **kwargs))


def user_text(text: str, **kwargs: Any):
    return SendMessageRequest(message=new_text_message(text, role=Role.ROLE_USER, **kwargs))


def kind(event) -> str:
    return event.WhichOneof("payload")


async def collect(stream) -> list:
    return [event async for event in stream]


async def test_sdk_resolves_the_card_sends_and_streams_a_task(node, http):
    node_card = await A2ACardResolver(http, node.url).get_agent_card()
    assert node_card.capabilities.streaming
    # one agent behind the node's card: its interfaces are alternatives for the same agent
    (interface,) = node_card.supported_interfaces
    assert (interface.url, interface.protocol_binding, interface.protocol_version) == (
        f"{node.url}/a2a/worker",
        "JSONRPC",
        "1.0",
    )
    assert [s.id for s in node_card.skills] == ["worker", "cashier"]
    # every /a2a/<agent> needs a token, and the card says so
    assert node_card.security_schemes["bearer"].http_auth_security_scheme.scheme == "Bearer"
    assert [list(r.schemes) for r in node_card.security_requirements] == [["bearer"]]

    client = await sdk_client(http, node.url)  # the node's card: the first agent
    events = await collect(client.send_message(user_data({"numbers": [1, 2, 3]})))
    assert [kind(e) for e in events] == [
        "task",
        "status_update",  # started
        "status_update",  # progress 1/3
        "status_update",
        "status_update",
        "artifact_update",
        "status_update",  # completed
    ]
    task = events[0].task
    assert task.status.state == S.TASK_STATE_SUBMITTED
    assert get_data_parts(task.history[0].parts) == [{"numbers": [1, 2, 3]}]
    states = [e.status_update.status.state for e in events if kind(e) == "status_update"]
    assert states == [S.TASK_STATE_WORKING] * 4 + [S.TASK_STATE_COMPLETED]
    progress = events[2].status_update.status.message
    assert get_data_parts(progress.parts) == [{"done": 1, "of": 3}]
    artifact = events[5].artifact_update.artifact
    assert get_data_parts(artifact.parts) == [{"sum": 6, "count": 3}]
    assert all(e.WhichOneof("payload") != "message" for e in events)

    blocking = await sdk_client(http, f"{node.url}/a2a/worker", streaming=False)
    (answer,) = await collect(blocking.send_message(user_text('{"numbers": [4, 5]}')))
    done = answer.task
    assert done.status.state == S.TASK_STATE_COMPLETED
    assert get_data_parts(done.artifacts[0].parts) == [{"sum": 9, "count": 2}]

    fetched = await client.get_task(GetTaskRequest(id=task.id))
    assert fetched.status.state == S.TASK_STATE_COMPLETED
    assert fetched.context_id == task.context_id and fetched.history[0].task_id == task.id
    listed = await client.list_tasks(ListTasksRequest())
    assert [t.id for t in listed.tasks] == [done.id, task.id]  # most recently updated first
    assert listed.total_size == 2 and not listed.tasks[0].artifacts  # includeArtifacts: false
    only = await client.list_tasks(ListTasksRequest(context_id=task.context_id))
    assert [t.id for t in only.tasks] == [task.id]

    # one journal: the spec's REST view shows the same tasks
    rest = await http.get(
        f"{node.url}/api/v1/a2a/tasks", params={"agent": "worker"}, headers=auth(READ_TOKEN)
    )
    by_id = {t["id"]: t for t in rest.json()}
    assert by_id[task.id]["status"] == "completed" and by_id[task.id]["from"] == "operator"
    assert by_id[task.id]["output"] == {"sum": 6, "count": 3}
    assert by_id[done.id]["input"] == {"numbers": [4, 5]}
    await client.close()
    await blocking.close()


async def test_an_approval_gated_task_is_input_required_until_answered(node, http):
    client = await sdk_client(http, f"{node.url}/a2a/cashier")
    request = user_data({"pay": {"invoice": "INV-0042", "amount_cents": 990}})
    events = await collect(client.send_message(request))
    last = events[-1].status_update.status
    assert last.state == S.TASK_STATE_INPUT_REQUIRED  # the stream ends while it waits
    task_id = events[0].task.id
    (pending,) = (await http.get(f"{node.url}/api/v1/approvals", headers=auth(READ_TOKEN))).json()
    assert pending["agent"] == "cashier" and pending["capability"] == "spend"
    assert pending["id"] in last.message.parts[0].text
    # the A2A message carries the whole request and the hash a decision binds to
    assert pending["request"] in last.message.parts[0].text
    assert pending["request_hash"] in last.message.parts[0].text

    fetched = await client.get_task(GetTaskRequest(id=task_id))
    assert fetched.status.state == S.TASK_STATE_INPUT_REQUIRED
    rest = (
        await http.get(f"{node.url}/api/v1/a2a/tasks/{task_id}", headers=auth(READ_TOKEN))
    ).json()
    assert rest["status"] == "running"

    watched: list = []

    async def watch() -> None:
        async for event in client.subscribe(SubscribeToTaskRequest(id=task_id)):
            watched.append(event)

    watcher = asyncio.create_task(watch())
    await until(lambda: watched)
    assert watched[0].task.status.state == S.TASK_STATE_INPUT_REQUIRED

    blocking = await sdk_client(http, f"{node.url}/a2a/cashier", streaming=False)
    answer = new_text_message("approve", role=Role.ROLE_USER, task_id=task_id)
    (result,) = await collect(blocking.send_message(SendMessageRequest(message=answer)))
    assert result.task.status.state == S.TASK_STATE_COMPLETED
    output = get_data_parts(result.task.artifacts[0].parts)[0]
    assert output["paid"] is True
    await asyncio.wait_for(watcher, 10)  # the subscription ends with the task
    states = [e.status_update.status.state for e in watched if kind(e) == "status_update"]
    assert states[-1] == S.TASK_STATE_COMPLETED and S.TASK_STATE_WORKING in states
    decided = node.journal("cashier", "approval.decided")
    assert decided == [
        {
            "type": "approval.decided",
            "id": pending["id"],
            "decision": "approve",
            "operator": "operator",
            "request_hash": pending["request_hash"],
        }
    ]
    await client.close()
    await blocking.close()


async def test_cancel_denies_what_the_task_waits_for_and_is_final(unparked, http):
    node = unparked
    client = await sdk_client(http, f"{node.url}/a2a/cashier", streaming=False)
    waiting = await collect(client.send_message(user_text("pay INV-7")))
    first = waiting[0].task
    assert first.status.state == S.TASK_STATE_INPUT_REQUIRED
    # the worker is busy waiting, so the next task stays submitted
    (queued,) = await collect(
        client.send_message(
            SendMessageRequest(
                message=new_text_message("hello", role=Role.ROLE_USER),
                configuration={"return_immediately": True},
            )
        )
    )
    assert queued.task.status.state == S.TASK_STATE_SUBMITTED

    canceled = await client.cancel_task(CancelTaskRequest(id=queued.task.id))
    assert canceled.status.state == S.TASK_STATE_CANCELED
    canceled = await client.cancel_task(CancelTaskRequest(id=first.id))
    assert canceled.status.state == S.TASK_STATE_CANCELED
    assert "canceled by operator" in canceled.status.message.parts[0].text
    with pytest.raises(TaskNotCancelableError):
        await client.cancel_task(CancelTaskRequest(id=first.id))

    # the approval it waited for was denied by the canceler; the task service refuses the
    # agent's late answer, and the canceled queued task never runs: the worker goes on to the
    # next task, which it takes only once it is done with the canceled one
    probe = await http.post(
        f"{node.url}/api/v1/a2a/tasks",
        json={"from": "operator", "to": "cashier", "input": {"text": "probe"}},
        headers=auth(OPERATE_TOKEN),
    )
    probe_id = probe.json()["id"]
    await until(lambda: node.journal("cashier", "task.completed"))
    assert [e["id"] for e in node.journal("cashier", "task.completed")] == [probe_id]
    decided = node.journal("cashier", "approval.decided")
    assert [(d["decision"], d["operator"]) for d in decided] == [("deny", "operator")]
    assert (await client.get_task(GetTaskRequest(id=first.id))).status.state == (
        S.TASK_STATE_CANCELED
    )
    started_ids = [e["id"] for e in node.journal("cashier", "task.started")]
    assert started_ids == [first.id, probe_id]
    rest = (
        await http.get(f"{node.url}/api/v1/a2a/tasks/{first.id}", headers=auth(READ_TOKEN))
    ).json()
    assert rest["status"] == "failed" and rest["error"] == "canceled by operator"
    listed = await client.list_tasks(ListTasksRequest(status=S.TASK_STATE_CANCELED))
    assert {t.id for t in listed.tasks} == {first.id, queued.task.id}
    await client.close()

    # what A2A shows is a read model like any other: a rebuild from position 0 equals it
    rebuilt = node.ctx.projections.fresh()
    rebuilt.rebuild(node.ctx.store.iter_chunks())
    assert rebuilt.get(Tasks).snapshot() == node.ctx.projections.get(Tasks).snapshot()
    assert rebuilt.get(Tasks).snapshot() == node.ctx.projections.get(Tasks).snapshot()
    assert node.ctx.projections.get(Tasks).snapshot()["canceled"] == {
        first.id: "operator",
        queued.task.id: "operator",
    }


# ---------------------------------------------------------------------------- bad input
STREAMING = ("SendStreamingMessage", "SubscribeToTask")


def only_event(response: httpx.Response) -> Any:
    """The one `data:` event of a stream that is all one error."""
    (data,) = [line[6:] for line in response.text.splitlines() if line.startswith("data: ")]
    return json.loads(data)


async def rpc(http: httpx.AsyncClient, url: str, body: Any, **headers: str) -> httpx.Response:
    raw = body if isinstance(body, bytes) else json.dumps(body).encode()
    return await http.post(
        url, content=raw, headers={"Content-Type": "application/json", **headers}
    )


async def test_bad_calls_get_their_json_rpc_errors(node, http):
    url = f"{node.url}/a2a/worker"
    done = await rpc(
        http,
        url,
        {
            "jsonrpc": "2.0",
            "id": "s",
            "method": "SendMessage",
            "params": {
                "message": {
                    "messageId": "m1",
                    "role": "ROLE_USER",
                    "parts": [{"data": {"numbers": [1]}}],
                }
            },
        },
    )
    finished = done.json()["result"]["task"]
    assert finished["status"]["state"] == "TASK_STATE_COMPLETED"
    other = await rpc(
        http,
        f"{node.url}/a2a/cashier",
        {
            "jsonrpc": "2.0",
            "id": 1,
            "method": "SendMessage",
            "params": {
                "message": {"messageId": "m2", "role": "ROLE_USER", "parts": [{"text": "hello"}]}
            },
        },
    )
    cashier_task = other.json()["result"]["task"]["id"]
    tasks_before = len(node.journal("worker", "task.created"))

    def said(role: str) -> dict:
        return {"messageId": "m", "role": role, "parts": [{"text": "x"}]}

    def call(method: str, params: Any = None, id_: Any = 7) -> dict:
        body: dict[str, Any] = {"jsonrpc": "2.0", "id": id_, "method": method}
        if params is not None:
            body["params"] = params
        return body

    cases: list[tuple[Any, int]] = [
        (b"{not json", -32700),
        (b"\xff\xfe", -32700),
        ([call("GetTask", {"id": "x"})], -32600),  # batches are not taken
        ({"id": 1, "method": "GetTask"}, -32600),  # no jsonrpc
        ({"jsonrpc": "2.0", "method": "GetTask", "params": {"id": "x"}}, -32600),  # no id
        (call("GetTask", {"id": "x"}, id_={"a": 1}), -32600),
        (call(""), -32600),
        (call("GetTask", ["x"]), -32602),  # params not an object
        (call("NoSuchMethod"), -32601),
        (call("message/send", {}), -32601),  # A2A 0.3 names are not served
        (call("SendMessage", {}), -32602),  # no message
        (call("SendMessage", {"message": {"parts": [{"text": "x"}]}}), -32602),  # no messageId
        (
            call("SendMessage", {"message": {"messageId": "m", "role": "ROLE_USER", "parts": []}}),
            -32602,
        ),
        (
            call(
                "SendMessage", {"message": {"messageId": "m", "role": "ROLE_USER", "parts": "text"}}
            ),
            -32602,
        ),
        (
            call(
                "SendMessage",
                {
                    "message": {
                        "messageId": "m",
                        "role": "ROLE_USER",
                        "parts": [{"url": "http://x/y.png"}],
                    }
                },
            ),
            -32005,
        ),
        (
            call(
                "SendMessage",
                {
                    "message": {"messageId": "m", "role": "ROLE_USER", "parts": [{"text": "x"}]},
                    "configuration": {"taskPushNotificationConfig": {"url": "x"}},
                },
            ),
            -32602,  # push notifications are supported (tests/delivery/): not this URL
        ),
        (
            call(
                "SendMessage",
                {
                    "message": {
                        "messageId": "m",
                        "role": "ROLE_USER",
                        "taskId": "nope",
                        "parts": [{"text": "approve"}],
                    }
                },
            ),
            -32001,
        ),
        (
            call(
                "SendMessage",
                {
                    "message": {
                        "messageId": "m",
                        "role": "ROLE_USER",
                        "taskId": finished["id"],
                        "parts": [{"text": "more"}],
                    }
                },
            ),
            -32004,
        ),
        (call("GetTask", {}), -32602),
        (call("GetTask", {"id": 5}), -32602),
        (call("GetTask", {"id": "nope"}), -32001),
        (call("GetTask", {"id": cashier_task}), -32001),  # another agent's task
        (call("GetTask", {"id": finished["id"], "historyLength": -1}), -32602),
        (call("ListTasks", {"pageSize": 0}), -32602),
        (call("ListTasks", {"pageSize": 101}), -32602),
        (call("ListTasks", {"status": "done"}), -32602),
        (call("ListTasks", {"pageToken": "zzz"}), -32602),
        (call("ListTasks", {"statusTimestampAfter": "yesterday"}), -32602),
        (call("CancelTask", {"id": "nope"}), -32001),
        (call("CancelTask", {"id": finished["id"]}), -32002),
        (call("SubscribeToTask", {"id": "nope"}), -32001),
        (call("SubscribeToTask", {"id": finished["id"]}), -32004),  # terminal: nothing to follow
        (
            call(
                "SendStreamingMessage",
                {"message": {"messageId": "m", "role": "ROLE_USER", "parts": []}},
            ),
            -32602,
        ),
        (call("CreateTaskPushNotificationConfig", {"taskId": finished["id"]}), -32602),  # no url
        (call("GetExtendedAgentCard", {}), -32004),  # every card says it has none
        # a client's message has role ROLE_USER: required, and nothing else is taken
        (call("SendMessage", {"message": {"messageId": "m", "parts": [{"text": "x"}]}}), -32602),
        (call("SendMessage", {"message": said("ROLE_AGENT")}), -32602),
        (call("SendMessage", {"message": said("BOGUS")}), -32602),
        (call("SendMessage", {"message": said("ROLE_UNSPECIFIED")}), -32602),
        (call("SendStreamingMessage", {"message": said("ROLE_AGENT")}), -32602),
        (
            call(  # A2A 1.0 §3.4.3: a contextId that is not the task's
                "SendMessage",
                {"message": {**said("ROLE_USER"), "taskId": finished["id"], "contextId": "c"}},
            ),
            -32602,
        ),
    ]
    for body, code in cases:
        response = await rpc(http, url, body)
        assert response.status_code == 200, (body, response.text)
        streamed = isinstance(body, dict) and body.get("method") in STREAMING
        # a streaming method answers with a stream, its errors too (A2A 1.0 §9.4.2)
        media = "text/event-stream" if streamed else "application/json"
        assert response.headers["content-type"].startswith(media), body
        answer = only_event(response) if streamed else response.json()
        assert answer["jsonrpc"] == "2.0" and "result" not in answer, (body, answer)
        assert answer["error"]["code"] == code, (body, answer)
        assert isinstance(answer["error"]["message"], str) and answer["error"]["message"]
    assert len(node.journal("worker", "task.created")) == tasks_before  # none was stored
    not_found = (await rpc(http, url, call("GetTask", {"id": "nope"}))).json()
    assert not_found["id"] == 7
    assert not_found["error"]["data"][0]["reason"] == "TASK_NOT_FOUND"

    version = await rpc(http, url, call("GetTask", {"id": "x"}), **{"A2A-Version": "0.3"})
    assert version.json()["error"]["code"] == -32009

    # transport faults stay HTTP problems
    assert (
        await rpc(http, f"{node.url}/a2a/nobody", call("GetTask", {"id": "x"}))
    ).status_code == 404
    async with httpx.AsyncClient() as nobody:
        anonymous = await nobody.post(url, json=call("GetTask", {"id": "x"}))
    assert anonymous.status_code == 401
    async with httpx.AsyncClient(headers=auth(READ_TOKEN)) as reader:
        read = await rpc(reader, url, call("GetTask", {"id": finished["id"]}))
        assert read.json()["result"]["id"] == finished["id"]
        send = await rpc(
            reader,
            url,
            call(
                "SendMessage",
                {"message": {"messageId": "m", "role": "ROLE_USER", "parts": [{"text": "x"}]}},
            ),
        )
        assert send.status_code == 403
        assert (await rpc(reader, url, call("CancelTask", {"id": "x"}))).status_code == 403


async def test_streams_speak_sse_of_json_rpc_and_end_with_the_task(node, http):
    url = f"{node.url}/a2a/worker"
    body = {
        "jsonrpc": "2.0",
        "id": "st-1",
        "method": "SendStreamingMessage",
        "params": {
            "message": {
                "messageId": "m9",
                "role": "ROLE_USER",
                "parts": [{"text": '{"fail": "no can do"}'}],
            }
        },
    }
    frames = []
    async with http.stream("POST", url, json=body) as response:
        assert response.headers["content-type"].startswith("text/event-stream")
        async for line in response.aiter_lines():
            if line.startswith("data: "):
                frames.append(json.loads(line[6:]))
    assert all(f["jsonrpc"] == "2.0" and f["id"] == "st-1" for f in frames)
    results = [f["result"] for f in frames]
    assert list(results[0]) == ["task"]
    final = results[-1]["statusUpdate"]["status"]
    assert final["state"] == "TASK_STATE_FAILED"
    assert final["message"]["parts"] == [{"text": "no can do"}]
    task = results[0]["task"]
    get = await rpc(
        http,
        url,
        {
            "jsonrpc": "2.0",
            "id": 2,
            "method": "GetTask",
            "params": {"id": task["id"], "historyLength": 0},
        },
    )
    got = get.json()["result"]
    assert got["status"]["state"] == "TASK_STATE_FAILED" and "history" not in got
    assert got["contextId"] == task["contextId"]
    # every status the stream showed parses as the SDK's StreamResponse
    from a2a.types.a2a_pb2 import StreamResponse
    from google.protobuf.json_format import ParseDict

    for result in results:
        MessageToDict(ParseDict(result, StreamResponse()))


async def test_per_agent_card_is_public_and_parses(node):
    async with httpx.AsyncClient() as anonymous:
        card = await A2ACardResolver(anonymous, f"{node.url}/a2a/cashier").get_agent_card()
        missing = await anonymous.get(f"{node.url}/a2a/nobody/.well-known/agent-card.json")
    assert card.name == "cashier"
    (interface,) = card.supported_interfaces
    assert interface.url == f"{node.url}/a2a/cashier"
    assert interface.protocol_binding == "JSONRPC" and interface.protocol_version == "1.0"
    assert card.capabilities.streaming and card.capabilities.push_notifications
    assert card.skills[0].tags == ["spend"]
    assert "bearer" in card.security_schemes
    assert missing.status_code == 404
