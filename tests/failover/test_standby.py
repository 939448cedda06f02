"""A standby at every moment (issue 52 item 1): an upgrade of a placed agent switches only
once another node of its set has the new version compiled, so a kill -9 or a SIGTERM of the
home right after the upgrade answered is followed by a tick on another node within the lease
TTL + 5 s, the replicas never having compiled the new bytes before. Real node processes on a
real 3-server cluster (harness/failover.py), each new version bytes no node compiled yet."""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from harness.failover import (
    LEASE_TTL_SECS,
    FailoverMesh,
    agent_view,
    deploy,
    events,
    publish_component,
    ticks,
    wait_for,
)
from tests.failover.test_failover import placed_counter
from tests.failover.test_placement_ops import SET, new_home

pytestmark = pytest.mark.timeout(420)
BOUND_SECS = LEASE_TTL_SECS + 5


def _leb128(n: int) -> bytes:
    out = bytearray()
    while True:
        byte, n = n & 0x7F, n >> 7
        out.append(byte | (0x80 if n else 0))
        if not n:
            return bytes(out)


def fresh_bytes(wasm: Path, tag: str, folder: Path) -> Path:
    """The same agent with a custom section appended: bytes no node has compiled."""
    name, payload = b"agent-node-test", tag.encode()
    body = _leb128(len(name)) + name + payload
    path = folder / f"counter-{tag}.wasm"
    path.write_bytes(wasm.read_bytes() + b"\x00" + _leb128(len(body)) + body)
    return path


def upgrade(fm: FailoverMesh, home: str, wasm: Path, version: str) -> dict:
    component = publish_component(fm[home], wasm, version=version)
    answer = deploy(fm[home], component, SET)
    assert answer.status_code == 200, answer.text
    body = answer.json()
    standby = body["standby"]
    assert standby["ready"] and set(standby["ready"]) <= set(standby["of"]), body
    assert "ready to take it over" in body["message"], body
    return body


def first_tick_on(fm: FailoverMesh, among: list[str], since: float) -> tuple[str, float]:
    """The node that took the agent over and seconds from `since` to its first tick there."""
    taker = new_home(fm, among)
    ticked = wait_for(
        lambda: any(n == taker for _, n in ticks(events(fm[taker]))) and time.monotonic(),
        BOUND_SECS + 60,
        f"a tick on {taker}",
    )
    return taker, ticked - since


def test_kill_9_and_sigterm_right_after_an_upgrade_find_a_standby(failover, built_agents, tmp_path):
    fm = failover()
    counter = built_agents["counter"]
    placed_counter(fm, counter, SET)

    upgrade(fm, "node-a", fresh_bytes(counter, "two", tmp_path), "1.1.0")
    killed = time.monotonic()
    fm["node-a"].kill()  # right after the answer: the replicas compiled 1.1.0 before it
    taker, took = first_tick_on(fm, ["node-b", "node-c"], killed)
    assert took <= BOUND_SECS, took
    assert agent_view(fm[taker])["current"]["version"] == "1.1.0"

    fm["node-a"].start(60)
    upgrade(fm, taker, fresh_bytes(counter, "three", tmp_path), "1.2.0")
    stopped = time.monotonic()
    fm[taker].terminate()
    others = [n for n in SET if n != taker]
    second, took = first_tick_on(fm, others, stopped)
    assert took <= BOUND_SECS, took
    assert agent_view(fm[second])["current"]["version"] == "1.2.0"
