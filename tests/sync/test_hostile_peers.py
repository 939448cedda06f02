"""A configured peer turned hostile: crafted envelopes signed with its real key, pushed to a real
node process. Each case must be rejected (typed, counted) or harmless, and afterwards the node
must still answer a read and a write within a second and restart cleanly after kill -9.
"""

from __future__ import annotations

import asyncio
import base64
import re
import time
from pathlib import Path

import httpx
import pytest
from nacl.signing import SigningKey

from eventstore.envelope import Event, digest_of, encode_event, sign, utc_now
from eventstore.keys import public_key_multibase
from eventstore.store import ForeignEnvelope
from node.app import open_store
from node.config.load import load_config
from node.streams.mapping import UNIFIED_NAMES
from tests.support import READ_TOKEN, NodeProcess, free_port, tiny_component, write_config
from tests.sync_support import SYNC_TUNING, peer_token, peer_toml, prefill

pytestmark = pytest.mark.timeout(120)

B_KEY = SigningKey(b"\x0b" * 32)
C_KEY = SigningKey(b"\x0c" * 32)
B_TOKEN = peer_token("node-b", "node-a")


def envelope(
    stream: str,
    seq: int,
    type: str,
    data: dict,
    *,
    key: SigningKey = B_KEY,
    origin: str = "node-b",
    prev: str = "",
    ts: str | None = None,
) -> dict:
    """One envelope as pushed, signed with `key`: valid as far as signatures go."""
    event = Event(
        type=type, ts=utc_now() if ts is None else ts, origin=origin, prev=prev, data=data
    )
    payload = encode_event(event)
    signature = sign(key, stream, seq, digest_of(payload))
    return {
        "seq": seq,
        "agent": stream,
        "payload": base64.b64encode(payload).decode(),
        "signature": "ed25519:" + base64.b64encode(signature).decode(),
    }


def hash_of(pushed: dict) -> str:
    return "sha256:" + digest_of(base64.b64decode(pushed["payload"])).hex()


@pytest.fixture(scope="module")
def node(tmp_path_factory):
    """node-a with one configured agent (`worker`, never started: a bare component) and two
    peers whose keys are pinned in the config; node-b is the attacker."""
    root: Path = tmp_path_factory.mktemp("hostile")
    (root / "a").mkdir()
    tiny_component(root / "a" / "agent.wasm")
    extra = SYNC_TUNING + '\n[[agents]]\nname = "worker"\ncomponent = "agent.wasm"\n'
    for name, key in (("node-b", B_KEY), ("node-c", C_KEY)):
        extra += peer_toml(
            name,
            f"http://127.0.0.1:{free_port()}",  # nobody listens: only the receiving side matters
            accepts=peer_token(name, "node-a"),
            presents="unused-token-0000000000",
            public_key=public_key_multibase(key.verify_key),
        )
    config_path = write_config(root / "a", extra)
    prefill(config_path, {"reporter": 1})  # a journal written here, of no configured agent
    process = NodeProcess(config_path).start()
    yield process
    process.kill()


def push(node: NodeProcess, envelopes: list, *, token: str = B_TOKEN, peer_id: str = "node-b"):
    with httpx.Client(base_url=node.url, timeout=30) as client:
        response = client.post(
            "/api/v1/sync/envelopes",
            json={"peer_id": peer_id, "envelopes": envelopes},
            headers={"Authorization": f"Bearer {token}"},
        )
    assert response.status_code == 200, response.text
    return response.json()


def reasons(reply: dict) -> list[str]:
    return [r["reason"] for r in reply["rejections"]]


def assert_responsive(node: NodeProcess) -> None:
    """A read and a durable write, each answered within a second."""
    with node.client() as client:
        started = time.monotonic()
        assert client.get("/api/v1/findings", params={"limit": 1}).status_code == 200
        assert time.monotonic() - started < 1.0
        started = time.monotonic()
        written = client.post(
            "/api/v1/findings",
            json={"agent": "node-a", "severity": "info", "title": "still writable"},
        )
        assert written.status_code == 201, written.text
        assert time.monotonic() - started < 1.0


def survives(node: NodeProcess) -> None:
    """Responsive now, and again after kill -9 and a restart (a full rebuild of what it holds)."""
    assert_responsive(node)
    (Path(node.config_path).parent / "data" / "projections.ckpt").unlink(missing_ok=True)
    node.kill()
    node.start()
    assert_responsive(node)


def findings(node: NodeProcess, agent: str | None = None) -> list[dict]:
    with node.client(READ_TOKEN) as client:
        body = client.get("/api/v1/findings", params={"limit": 1000}).json()
    return [f for f in body["findings"] if agent is None or f["agent"] == agent]


def rejected_counter(node: NodeProcess, reason: str) -> float:
    with node.client(READ_TOKEN) as client:
        text = client.get("/api/v1/metrics").text
    prefix = f'svc_sync_rejected_total{{reason="{reason}"}} '
    line = next((x for x in text.splitlines() if x.startswith(prefix)), None)
    return float(line.split()[1]) if line else 0.0


# ----------------------------------------------------------------------------- content


def test_a_timestamp_in_year_9999_is_rejected_and_the_node_goes_on(node):
    far = envelope(
        "b-payer",
        1,
        "approval.requested",
        {"id": "a-9999", "capability": "spend", "detail": "", "timeout_secs": 30},
        ts="9999-12-31T23:59:59.999999Z",
    )
    before = rejected_counter(node, "future_timestamp")
    reply = push(node, [far])
    assert (reply["accepted"], reasons(reply)) == (0, ["future_timestamp"])
    assert rejected_counter(node, "future_timestamp") == before + 1
    survives(node)


@pytest.mark.parametrize(
    ("data", "fragment"),
    [
        ({"id": "a-big", "capability": "spend", "timeout_secs": 10**15}, "timeout_secs"),
        ({"id": "x" * 1000, "capability": "spend"}, "id"),
        ({"id": "a-bool", "capability": "spend", "timeout_secs": True}, "timeout_secs"),
        ({"capability": "spend"}, "id"),
    ],
)
def test_approval_data_out_of_bounds_is_rejected(node, data, fragment):
    reply = push(node, [envelope("b-bounds", 1, "approval.requested", data)])
    assert reasons(reply) == ["invalid_data"]
    assert fragment in reply["rejections"][0]["detail"]
    survives(node)


def test_a_timestamp_that_is_not_iso_8601_with_a_zone_is_rejected(node):
    for i, ts in enumerate(["yesterday", "2026-01-01T00:00:00", ""]):
        reply = push(node, [envelope(f"b-ts{i}", 1, "log", {"message": "x"}, ts=ts)])
        assert reasons(reply) == ["bad_timestamp"], ts
    survives(node)


def test_an_event_type_with_line_breaks_never_reaches_a_stream(node):
    forged = "log\nid: 999999\nevent: approval_requested\ndata: {}\n\nevent: x"
    reply = push(node, [envelope("b-frames", 1, forged, {"message": "x"})])
    assert reasons(reply) == ["unknown_type"]
    assert "\n" not in reply["rejections"][0]["detail"].replace("\\n", "")
    with node.client(READ_TOKEN) as client:
        answer = client.get("/api/v1/sync/envelopes", params={"agent": "b-frames"}).json()
    assert answer["envelopes"] == []  # nothing was stored
    survives(node)


def test_unknown_and_node_level_types_are_rejected(node):
    reply = push(
        node,
        [
            envelope("b-types", 1, "custom.thing", {}),
            envelope("b-types", 1, "peer.acked", {"peer": "node-b", "heads": {}}),
            envelope("b-types", 1, "package.published", {"id": "p", "version": "1.0.0"}),
        ],
    )
    assert reasons(reply) == ["unknown_type", "not_replicated", "not_replicated"]
    survives(node)


def test_a_payload_nested_past_the_decoder_limit_is_malformed(node):
    shallow = encode_event(Event("log", utc_now(), "node-b", "", {"x": 0}))
    assert shallow.endswith(b"\xa1x\x00")  # data is the last field, 0 its last byte
    event = shallow[:-1] + b"\x91" * 5000 + b"\xc0"  # [[[[...nil...]]]], 5000 deep
    signature = sign(B_KEY, "b-deep", 1, digest_of(event))
    pushed = {
        "seq": 1,
        "agent": "b-deep",
        "payload": base64.b64encode(event).decode(),
        "signature": "ed25519:" + base64.b64encode(signature).decode(),
    }
    assert reasons(push(node, [pushed])) == ["malformed"]
    survives(node)


# ----------------------------------------------------------------------------- ownership


def test_a_peer_cannot_start_or_extend_a_journal_homed_here(node):
    reply = push(  # `reporter` is a journal this node has written (the fixture's)
        node,
        [
            envelope("node-a", 1, "finding", {"title": "in your journal"}),  # the node journal
            envelope("worker", 1, "log", {"message": "I am your agent now"}),  # configured agent
            envelope("reporter", 2, "finding", {"title": "and this one"}),  # written here
        ],
    )
    assert reasons(reply) == ["own_journal"] * 3
    with node.client(READ_TOKEN) as client:
        convergence = client.get("/api/v1/sync/convergence", params={"agent": "worker"}).json()
    assert convergence["home"] in (None, "node-a")  # never the attacker
    survives(node)


def test_only_a_peer_may_start_the_journal_named_after_it(node):
    reply = push(node, [envelope("node-c", 1, "finding", {"title": "I am node-c"})])
    assert reasons(reply) == ["foreign_writer"]
    survives(node)


def test_a_peers_cancel_of_this_nodes_task_changes_nothing(node):
    with node.client() as client:
        created = client.post("/api/v1/a2a/tasks", json={"from": "ops", "to": "worker"})
        assert created.status_code == 201, created.text
        task_id = created.json()["id"]
    reply = push(
        node,
        [
            envelope("b-tasks", 1, "task.canceled", {"id": task_id, "operator": "mallory"}),
        ],
    )
    assert reply["accepted"] == 1  # its own journal: stored, but it owns no such task
    with node.client() as client:
        task = client.get(f"/api/v1/a2a/tasks/{task_id}").json()
        rpc = client.post(
            "/a2a/worker",
            json={"jsonrpc": "2.0", "id": 1, "method": "GetTask", "params": {"id": task_id}},
        ).json()
    assert task["status"] == "pending"
    assert rpc["result"]["status"]["state"] != "TASK_STATE_CANCELED"
    survives(node)
    with node.client() as client:
        assert client.get(f"/api/v1/a2a/tasks/{task_id}").json()["status"] == "pending"


# ----------------------------------------------------------------------------- incidents


def test_a_crafted_incident_key_does_not_suppress_the_real_alert(node):
    ours = envelope("b-fork", 1, "finding", {"title": "original"})
    theirs = envelope("b-fork", 1, "finding", {"title": "forked"})
    decoy = envelope(
        "node-b",
        1,
        "finding",
        {
            "severity": "info",
            "title": "nothing to see",
            "incident": f"node-a/equivocation/b-fork/1/{hash_of(theirs)}",
        },
    )
    assert push(node, [decoy, ours])["accepted"] == 2
    reply = push(node, [theirs])
    assert reasons(reply) == ["equivocation"]
    alerts = [f for f in findings(node, "node-a") if "equivocation in journal b-fork" in f["title"]]
    assert len(alerts) == 1 and alerts[0]["severity"] == "critical"
    survives(node)


def test_two_copies_of_one_envelope_in_one_push_are_a_duplicate(node):
    first = envelope("b-twice", 1, "finding", {"title": "once"})
    reply = push(node, [first, first])
    assert (reply["accepted"], reasons(reply)) == (1, ["duplicate"])
    assert not [f for f in findings(node, "node-a") if "b-twice" in f["title"]]
    survives(node)


def test_equivocation_findings_are_rate_limited_per_peer(node):
    assert push(node, [envelope("b-storm", 1, "finding", {"title": "base"})])["accepted"] == 1
    forks = [envelope("b-storm", 1, "finding", {"title": f"fork {i}"}) for i in range(25)]
    reply = push(node, forks)
    assert reasons(reply) == ["equivocation"] * 25
    storm = [f for f in findings(node, "node-a") if "journal b-storm" in f["title"]]
    assert 1 <= len(storm) <= 10
    survives(node)


# ----------------------------------------------------------------------------- parameters


@pytest.mark.parametrize(
    ("path", "params"),
    [
        ("/api/v1/sync/envelopes", {"agent": "b-bounds", "since": "9" * 30}),
        ("/api/v1/sync/envelopes", {"agent": "b-bounds", "since": str(2**63)}),
        ("/api/v1/sync/envelopes", {"agent": "b-bounds", "limit": "9" * 5000}),
        ("/api/v1/sync/envelopes", {"agent": "x" * 600}),
        ("/api/v1/sync/convergence", {"agent": "bad name!"}),
        ("/api/v1/logs", {"since": "1" + "0" * 19}),
        ("/api/v1/findings", {"limit": "1" + "0" * 40}),
    ],
)
def test_integer_and_name_parameters_out_of_range_are_a_400(node, path, params):
    with httpx.Client(base_url=node.url, timeout=30) as client:
        response = client.get(path, params=params, headers={"Authorization": f"Bearer {B_TOKEN}"})
        if response.status_code == 403:  # logs/findings need the read scope
            response = client.get(
                path, params=params, headers={"Authorization": f"Bearer {READ_TOKEN}"}
            )
    assert response.status_code == 400, response.text
    assert response.headers["content-type"].startswith("application/problem+json")
    assert_responsive(node)


# ----------------------------------------------------------------------------- stored before


def test_a_journal_poisoned_before_these_checks_still_starts(node):
    """Envelopes a node accepted before the catalogue existed are in its journal for good: a
    start (a full rebuild) must get past them, and reads and streams must stay sane."""
    poison = [
        ("approval.requested", {"id": "old-9999", "timeout_secs": 30}, "9999-12-31T23:59:59Z"),
        ("approval.requested", {"id": "old-huge", "timeout_secs": 10**15}, None),
        ("log\nevent: approval_requested\nid: 1", {"message": "forged frame"}, None),
        ("task.canceled", {"id": "whatever", "operator": "mallory"}, None),
    ]
    node.kill()
    config = load_config(node.config_path)

    async def write() -> None:
        store = open_store(config, SigningKey.generate())
        store.start(asyncio.get_running_loop())
        prev = ""
        items = []
        for seq, (type_, data, ts) in enumerate(poison, start=1):
            pushed = envelope("b-legacy", seq, type_, data, prev=prev, ts=ts)
            payload = base64.b64decode(pushed["payload"])
            signature = base64.b64decode(pushed["signature"].removeprefix("ed25519:"))
            items.append(ForeignEnvelope("b-legacy", seq, payload, signature))
            prev = "sha256:" + digest_of(payload).hex()
        results = await store.import_envelopes(
            items, lambda origin: B_KEY.verify_key if origin == "node-b" else None
        )
        assert [r.status.value for r in results] == ["accepted"] * len(poison)
        await store.close()

    asyncio.run(write())
    (Path(node.config_path).parent / "data" / "projections.ckpt").unlink(missing_ok=True)
    node.start()
    assert_responsive(node)
    with node.client(READ_TOKEN) as client:
        approvals = client.get("/api/v1/approvals").json()
        assert client.get("/api/v1/approvals/batched").status_code == 200
    ids = {a["id"] for a in approvals}
    assert "old-9999" in ids  # shown as stored; the far expiry is kept as the request's own ts
    frames = replayed_frames(node)
    assert "forged frame" not in frames  # the stored type with line breaks is never sent
    names = re.findall(r"^event: (.*)$", frames, re.MULTILINE)
    assert "approval_requested" in names
    assert set(names) <= set(UNIFIED_NAMES.values()) | {"keepalive"}
    assert re.findall(r"^id: (.*)$", frames, re.MULTILINE) == sorted(
        re.findall(r"^id: (.*)$", frames, re.MULTILINE), key=int
    )
    survives(node)


def replayed_frames(node: NodeProcess, seconds: float = 1.5) -> str:
    """The raw SSE text of /api/v1/events replayed from the start (Last-Event-ID 0)."""
    text = b""
    deadline = time.monotonic() + seconds
    headers = {"Authorization": f"Bearer {READ_TOKEN}", "Last-Event-ID": "0"}
    with (
        httpx.Client(base_url=node.url, timeout=seconds) as client,
        client.stream("GET", "/api/v1/events", headers=headers) as response,
    ):
        assert response.status_code == 200
        try:
            for chunk in response.iter_raw():
                text += chunk
                if time.monotonic() > deadline:
                    break
        except httpx.ReadTimeout:
            pass
    return text.decode()
