"""The AG-UI stream: snapshot, JSON Patch deltas, well-nested runs, approval interrupts.

Every event the translator emits is validated with the `ag-ui-protocol` package's models.
"""

from __future__ import annotations

import copy
import types
from typing import Any

import pytest
from ag_ui.core import Event as AguiEvent
from pydantic import TypeAdapter

from node.agui.stream import AguiTranslator, AguiView
from node.api.streams import current_statuses
from node.app import build_app
from node.context import CONTEXT
from node.runtime.agents import AGENTS
from node.streams.bus import BUS
from projections.tasks import Tasks
from tests.projections.envelopes import Journal, fold
from tests.support import SseStream, make_config

ADAPTER = TypeAdapter(AguiEvent)


@pytest.fixture
def config(tmp_path):
    config = make_config(tmp_path)
    config.node.sse_keepalive_secs = 0.5
    return config


def validate(events: list[dict[str, Any]]) -> None:
    """Each event parses as its AG-UI model, and the spec's fields ride along."""
    for data in events:
        model = ADAPTER.validate_python(data)
        assert model.type.value == data["type"]


def check_nesting(events: list[dict[str, Any]]) -> None:
    """What an AG-UI client enforces per thread: runs open before use, close after children."""
    runs: dict[str, str | None] = {}
    messages: dict[str, set[str]] = {}
    tools: dict[str, set[str]] = {}
    for e in events:
        kind, thread = e["type"], e.get("threadId")
        if kind.startswith("STATE_"):
            continue
        if kind == "RUN_STARTED":
            assert runs.get(thread) is None, f"{thread}: run started inside a run"
            runs[thread] = e["runId"]
            messages[thread], tools[thread] = set(), set()
            continue
        assert runs.get(thread) == e["runId"], f"{kind} outside its run: {e}"
        if kind in ("RUN_FINISHED", "RUN_ERROR"):
            if kind == "RUN_FINISHED":
                assert not messages[thread] and not tools[thread], f"open children at {e}"
            runs[thread] = None
        elif kind == "TEXT_MESSAGE_START":
            messages[thread].add(e["messageId"])
        elif kind == "TEXT_MESSAGE_CONTENT":
            assert e["messageId"] in messages[thread]
        elif kind == "TEXT_MESSAGE_END":
            messages[thread].remove(e["messageId"])
        elif kind == "TOOL_CALL_START":
            tools[thread].add(e["toolCallId"])
        elif kind in ("TOOL_CALL_ARGS", "TOOL_CALL_END"):
            assert e["toolCallId"] in tools[thread]
            if kind == "TOOL_CALL_END":
                tools[thread].remove(e["toolCallId"])


def apply_patch(document: dict[str, Any], patch: list[dict[str, Any]]) -> dict[str, Any]:
    """RFC 6902 add/replace on object members and array items (all the stream uses)."""
    document = copy.deepcopy(document)
    for op in patch:
        *parents, last = op["path"].lstrip("/").split("/")
        target: Any = document
        for key in parents:
            target = target[int(key)] if isinstance(target, list) else target[key]
        if isinstance(target, list):
            if op["op"] == "add":
                target.insert(len(target) if last == "-" else int(last), op["value"])
            else:
                target[int(last)] = op["value"]
        else:
            target[last] = op["value"]
    return document


class Recorder:
    """A translator driven directly; collects the data of every item it emits. Journaled
    events are really signed and folded into a tasks read model, whose changes the translator
    follows, as in the node."""

    def __init__(self) -> None:
        self.tasks = fold(Tasks(), [])
        self.log = Journal()
        self.translator = AguiTranslator(self.tasks.approval_change)
        self.events: list[dict[str, Any]] = []

    def run(self, name: str, **data: Any) -> list[dict[str, Any]]:
        out = [i.data for i in self.translator.on_runtime(name, data, data.get("agent"))]
        self.events += out
        return out

    def journal(self, stream: str, event_type: str, **data: Any) -> list[dict[str, Any]]:
        made = self.log.add(stream, event_type, data)
        fold(self.tasks, [made])
        out = [i.data for i in self.translator.on_journal(made)]
        self.events += out
        return out


def types_of(events: list[dict[str, Any]]) -> list[str]:
    return [e["type"] for e in events]


def test_a_full_run_is_well_nested_and_valid():
    r = Recorder()
    r.run("RUN_STARTED", agent="payer", run_id="r1")
    r.run("TEXT_MESSAGE_CONTENT", agent="payer", run_id="r1", text="Hel")  # no START sent
    r.run("TEXT_MESSAGE_CONTENT", agent="payer", run_id="r1", text="lo")
    r.run("TOOL_CALL_START", agent="payer", run_id="r1", tool="http_fetch", args={"url": "u"})
    r.run("TOOL_CALL_END", agent="payer", run_id="r1", tool="http_fetch", result="200")
    r.run("RUN_FINISHED", agent="payer", run_id="r1", duration_ms=12)  # message still open
    assert types_of(r.events) == [
        "RUN_STARTED",
        "TEXT_MESSAGE_START",
        "TEXT_MESSAGE_CONTENT",
        "TEXT_MESSAGE_CONTENT",
        "TOOL_CALL_START",
        "TOOL_CALL_ARGS",
        "TOOL_CALL_END",
        "TOOL_CALL_RESULT",
        "TEXT_MESSAGE_END",
        "RUN_FINISHED",
    ]
    validate(r.events)
    check_nesting(r.events)
    started, content = r.events[0], r.events[2]
    expected = {"agent": "payer", "run_id": "r1", "threadId": "payer", "runId": "r1"}
    assert started.items() >= expected.items()
    assert content["text"] == content["delta"] == "Hel"
    assert content["messageId"] == content["message_id"] == r.events[1]["messageId"]
    assert r.events[4]["toolCallName"] == "http_fetch" and r.events[5]["delta"] == '{"url": "u"}'
    assert r.events[7]["content"] == "200"
    assert r.events[-1]["duration_ms"] == 12 and r.events[-1]["runId"] == "r1"


def test_an_approval_gate_is_an_interrupt_then_a_resumed_run():
    r = Recorder()
    r.run("RUN_STARTED", agent="payer", run_id="r1")
    r.run("TOOL_CALL_START", agent="payer", run_id="r1", tool_call_id="c1", tool="spend")
    out = r.journal(
        "payer",
        "approval.requested",
        id="ap1",
        capability="spend",
        detail="pay 5 EUR",
        timeout_secs=30,
    )
    assert types_of(out) == ["TOOL_CALL_END", "RUN_FINISHED"]
    outcome = out[-1]["outcome"]
    assert outcome["type"] == "interrupt"
    assert outcome["interrupts"] == [
        {
            "id": "ap1",
            "reason": "approval",
            "message": "pay 5 EUR",
            "metadata": {"capability": "spend", "agent": "payer"},
            "toolCallId": "c1",
            "expiresAt": "2026-01-01T00:00:31.000Z",  # requested at ts_at(1), plus 30 s
        }
    ]
    assert r.journal("payer", "approval.decided", id="other", decision="approve") == []
    out = r.journal("payer", "approval.decided", id="ap1", decision="approve")
    assert types_of(out) == ["RUN_STARTED"]
    resumed = out[0]["runId"]
    assert resumed != "r1" and out[0]["resumed_from"] == "r1" and out[0]["decision"] == "approve"
    r.run("TOOL_CALL_END", agent="payer", run_id="r1", tool_call_id="c1")  # closed already
    r.run("TEXT_MESSAGE_START", agent="payer", run_id="r1", message_id="m9")
    r.run("TEXT_MESSAGE_CONTENT", agent="payer", run_id="r1", message_id="m9", text="paid")
    out = r.run("RUN_FINISHED", agent="payer", run_id="r1")
    assert types_of(out) == ["TEXT_MESSAGE_END", "RUN_FINISHED"]
    assert {e["runId"] for e in out} == {resumed}
    validate(r.events)
    check_nesting(r.events)


def test_a_timed_out_approval_also_resumes_and_unknown_ends_are_dropped():
    r = Recorder()
    assert r.run("RUN_FINISHED", agent="payer", run_id="nope") == []
    assert r.run("TEXT_MESSAGE_END", agent="payer", run_id="nope") == []
    assert r.run("TOOL_CALL_END", agent="payer", run_id="nope") == []
    r.run("RUN_STARTED", agent="payer", run_id="r1")
    r.journal("payer", "approval.requested", id="ap1", capability="spend", detail="")
    out = r.journal("payer", "approval.timed_out", id="ap1")
    assert types_of(out) == ["RUN_STARTED"] and out[0]["decision"] == "timeout"
    r.run("RUN_FINISHED", agent="payer", run_id="r1")
    validate(r.events)
    check_nesting(r.events)


def test_errors_stops_and_overlapping_runs_close_cleanly():
    r = Recorder()
    r.run("RUN_STARTED", agent="a", run_id="1")
    r.run("TEXT_MESSAGE_START", agent="a", run_id="1")
    r.run("RUN_STARTED", agent="a", run_id="2")  # the runtime never finished run 1
    r.run("RUN_STARTED", agent="b", run_id="x")
    out = r.journal("a", "agent.errored", kind="trap", error="unreachable")
    assert types_of(out) == ["RUN_ERROR"] and out[0]["message"] == "unreachable"
    assert r.run("RUN_FINISHED", agent="a", run_id="2") == []
    out = r.journal("b", "agent.stopped")
    assert types_of(out) == ["RUN_FINISHED"] and out[0]["outcome"] == {"type": "cancelled"}
    r.run("TEXT_MESSAGE_CONTENT", agent="c", run_id="z", text="t")  # opens run z on its own
    r.run("RUN_ERROR", agent="c", run_id="z", message="bad")
    assert r.journal("nobody", "agent.errored", error="x") == []
    validate(r.events)
    check_nesting(r.events)
    assert types_of(r.events)[:4] == [
        "RUN_STARTED",
        "TEXT_MESSAGE_START",
        "TEXT_MESSAGE_END",
        "RUN_FINISHED",
    ]


def test_state_deltas_are_json_patches_against_the_snapshot():
    t = AguiTranslator(lambda envelope: None)
    t.sync([("payer", "running"), ("worker", "idle")])
    snapshot = t.snapshot_item().data
    assert snapshot["agents"] == [
        {"name": "payer", "status": "running"},
        {"name": "worker", "status": "idle"},
    ]
    assert snapshot["snapshot"] == {"agents": snapshot["agents"]}
    state = snapshot["snapshot"]
    events = [snapshot]
    for agent, status in [("worker", "error"), ("worker", "error"), ("new", "idle")]:
        for item in t.on_status(agent, status):
            events.append(item.data)
            state = apply_patch(state, item.data["delta"])
    assert len(events) == 3  # an unchanged status emits nothing
    assert events[1]["delta"] == [{"op": "replace", "path": "/agents/1/status", "value": "error"}]
    assert events[1]["agent"] == "worker" and events[1]["status"] == "error"
    assert state == t.snapshot_item().data["snapshot"]
    validate(events)


def test_snapshot_statuses_come_from_the_runtime_or_the_config(tmp_path):
    config = make_config(tmp_path, '[[agents]]\nname = "payer"\ncomponent = "p.wasm"\n')
    app = build_app(config)
    assert current_statuses(app) == [("payer", "stopped")]
    runtime = types.SimpleNamespace(
        statuses=lambda: [types.SimpleNamespace(name="payer", status="running")]
    )
    app[AGENTS].attach(runtime, None)  # the runtime's statuses, without starting agents
    assert current_statuses(app) == [("payer", "running")]
    app[AGENTS].attach(types.SimpleNamespace(statuses=lambda: 1 / 0), None)
    app[BUS].publish("agent_status", {"agent": "payer", "status": "idle"})
    assert current_statuses(app) == [("payer", "idle")]


def test_a_client_never_sees_a_run_it_did_not_see_start():
    t = AguiTranslator(lambda envelope: None)
    view = AguiView()
    t.on_runtime("RUN_STARTED", {"run_id": "r1"}, "a")
    seen = [
        i.name
        for i in t.on_runtime("TEXT_MESSAGE_CONTENT", {"text": "x"}, "a")
        + t.on_runtime("RUN_FINISHED", {}, "a")
        + t.on_runtime("RUN_STARTED", {"run_id": "r2"}, "a")
        + t.on_runtime("RUN_FINISHED", {}, "a")
        + t.on_status("a", "idle")
        if view.accept(i)
    ]
    assert seen == ["RUN_STARTED", "RUN_FINISHED", "STATE_DELTA"]


async def test_agui_stream_over_http(client):
    ctx = client.app[CONTEXT]
    bus = client.app[BUS]
    base = str(client.make_url("/"))
    client.app[AGENTS].attach(
        types.SimpleNamespace(
            statuses=lambda: [
                types.SimpleNamespace(name="payer", status="running"),
                types.SimpleNamespace(name="worker", status="idle"),
            ]
        ),
        None,
    )
    try:
        first = await SseStream(base, "/api/v1/agui/events").__aenter__()
        snapshot = await first.next()
    finally:
        client.app[AGENTS].attach(None, None)
    try:
        assert snapshot.event == "STATE_SNAPSHOT" and snapshot.id == ""
        assert snapshot.json()["agents"] == [
            {"name": "payer", "status": "running"},
            {"name": "worker", "status": "idle"},
        ]
        bus.publish("agent_status", {"agent": "payer", "status": "error"})
        bus.publish("RUN_STARTED", {"agent": "payer", "run_id": "r1"})
        late = await SseStream(base, "/api/v1/agui/events").__aenter__()
        bus.publish("TEXT_MESSAGE_CONTENT", {"agent": "payer", "run_id": "r1", "text": "hi"})
        bus.publish("TOOL_CALL_START", {"agent": "payer", "run_id": "r1", "tool": "spend"})
        await ctx.store.append(
            "payer",
            "approval.requested",
            {"id": "ap1", "capability": "spend", "detail": "d", "timeout_secs": 5},
        )
        await ctx.store.append(
            "payer", "approval.decided", {"id": "ap1", "decision": "deny", "operator": "x"}
        )
        bus.publish_threadsafe("RUN_FINISHED", {"agent": "payer", "run_id": "r1"})
        events = [e.json() for e in await first.take(9)]
        assert [e["type"] for e in events] == [
            "STATE_DELTA",
            "RUN_STARTED",
            "TEXT_MESSAGE_START",
            "TEXT_MESSAGE_CONTENT",
            "TOOL_CALL_START",
            "TEXT_MESSAGE_END",
            "TOOL_CALL_END",
            "RUN_FINISHED",
            "RUN_STARTED",
        ]
        assert (await first.next()).json()["type"] == "RUN_FINISHED"
        late_events = [e.json() for e in await late.take(3)]
        # the late client saw neither r1's start nor its content, only the resumed run
        assert [e["type"] for e in late_events] == ["STATE_SNAPSHOT", "RUN_STARTED", "RUN_FINISHED"]
        assert late_events[0]["agents"][0] == {"name": "payer", "status": "error"}
        everything = [snapshot.json(), *events, *late_events[1:]]
        validate(everything)
        check_nesting([snapshot.json(), *events])
    finally:
        await first.close()
        await late.close()


async def test_agui_stream_of_one_agent(client):
    ctx = client.app[CONTEXT]
    bus = client.app[BUS]
    base = str(client.make_url("/"))
    from tests.support import auth

    unknown = await client.get("/api/v1/agui/events?agent=ghost", headers=auth())
    assert unknown.status == 404
    await ctx.store.append("payer", "log", {"level": "info", "message": "known now"})
    async with SseStream(base, "/api/v1/agui/events?agent=payer") as stream:
        assert (await stream.next()).event == "STATE_SNAPSHOT"
        bus.publish("RUN_STARTED", {"agent": "other", "run_id": "o1"})
        bus.publish("agent_status", {"agent": "other", "status": "running"})
        bus.publish("RUN_STARTED", {"agent": "payer", "run_id": "p1"})
        events = [e.json() for e in await stream.take(2)]
    assert [(e["type"], e.get("agent")) for e in events] == [
        ("STATE_DELTA", "other"),  # state is every agent's: the document has them all
        ("RUN_STARTED", "payer"),
    ]


def test_an_interrupt_shows_the_full_request_and_its_hash():
    r = Recorder()
    r.run("RUN_STARTED", agent="payer", run_id="r1")
    request = '{"pad": "' + "x" * 3000 + '", "amount_cents": 987654321}'
    out = r.journal(
        "payer",
        "approval.requested",
        id="ap1",
        capability="spend",
        detail="spend: " + request[:990] + "…",
        request=request,
        request_hash="sha256:" + "a" * 64,
        timeout_secs=30,
    )
    (interrupt,) = out[-1]["outcome"]["interrupts"]
    assert interrupt["message"] == f"approve spend: {request}"
    assert interrupt["metadata"]["request"] == request
    assert interrupt["metadata"]["requestHash"] == "sha256:" + "a" * 64
    validate(r.events)
