"""The event catalogue: the docs' table matches it, writers' data round-trips through it, and the
receiver's content check accepts what the node writes and refuses what it must not store."""

from __future__ import annotations

import re
from datetime import UTC, datetime, timedelta

import msgspec
import pytest

from eventstore.envelope import Event, utc_now
from projections import catalogue as c
from tests.support import ROOT


def documented_rows() -> dict[str, tuple[str, list[str]]]:
    """type → (replicated, fields with `?` for optional) from docs/design.md's events table."""
    text = (ROOT / "docs" / "design.md").read_text()
    section = text.split("## Events (`projections/catalogue.py`)", 1)[1].split("\n## ", 1)[0]
    rows = {}
    for line in section.splitlines():
        match = re.match(r"\| `([a-z_.]+)` \| (yes|no) \|([^|]*)\|", line)
        if match:
            fields = re.findall(r"`([a-z_0-9]+)`(\??)", match.group(3))
            rows[match.group(1)] = (match.group(2), [name + opt for name, opt in fields])
    return rows


def catalogued_rows() -> dict[str, tuple[str, list[str]]]:
    rows = {}
    for name, cls in c.CATALOGUE.items():
        fields = [
            f.encode_name + ("?" if _optional(f) else "") for f in msgspec.structs.fields(cls)
        ]
        rows[name] = ("yes" if cls.replicated else "no", fields)
    return rows


def _optional(field: msgspec.structs.FieldInfo) -> bool:
    return field.default is not msgspec.NODEFAULT or field.default_factory is not msgspec.NODEFAULT


def test_the_design_doc_lists_exactly_the_catalogued_events():
    assert documented_rows() == catalogued_rows()


def test_every_name_constant_is_catalogued():
    reasons = {c.UNKNOWN_TYPE, c.INVALID_DATA, c.BAD_TIMESTAMP, c.FUTURE_TIMESTAMP}
    reasons.add(c.NOT_REPLICATED)
    constants = {
        value
        for key, value in vars(c).items()
        if key.isupper()
        and isinstance(value, str)
        and value not in reasons
        and re.fullmatch(r"[a-z_]+(\.[a-z_]+)?", value)
    }
    assert constants == set(c.CATALOGUE)


def event(type_: str, data: dict, ts: str | None = None) -> Event:
    return Event(type=type_, ts=ts or utc_now(), origin="node-b", prev="", data=data)


def test_what_the_writers_build_passes_the_receivers_check():
    payloads = [
        c.ApprovalRequested(id="a1", capability="spend", detail="x", timeout_secs=30),
        c.ApprovalDecided(id="a1", decision="approve", operator="alice"),
        c.TaskCreated(id="t1", from_="ops", to="worker", input={"n": 1}),
        c.TaskProgress(id="t1", progress=None),
        c.Log(level="warn", message="m", stream="stderr"),
        c.Finding(severity="critical", title="t", detail="d", incident="node-b/x"),
        c.ActionPerformed(capability="spend", request={"amount": 1}, status=200),
        c.AgentErrored(error="trap", kind="trap", retry_in_ms=100),
        c.AgentStarted(),
    ]
    for payload in payloads:
        type_, data = c.event_of(payload)
        c.check_replicated(event(type_, data))
        assert msgspec.convert(data, type(payload)) == payload or type_ == c.TASK_PROGRESS


def test_event_of_leaves_out_unset_optional_fields_and_renames_from():
    assert c.event_of(c.Log(level="info", message="m")) == (
        "log",
        {"level": "info", "message": "m"},
    )
    _, data = c.event_of(c.TaskCreated(id="t", from_="a", to="b"))
    assert data == {"id": "t", "from": "a", "to": "b", "input": {}}


@pytest.mark.parametrize(
    ("type_", "data", "ts", "reason"),
    [
        ("no.such", {}, None, c.UNKNOWN_TYPE),
        ("peer.acked", {"peer": "x"}, None, c.NOT_REPLICATED),
        ("approval.requested", {"id": "a", "timeout_secs": 10**12}, None, c.INVALID_DATA),
        ("approval.requested", {"id": ""}, None, c.INVALID_DATA),
        ("approval.decided", {"id": "a", "decision": "maybe"}, None, c.INVALID_DATA),
        ("log", {"level": "loud"}, None, c.INVALID_DATA),
        ("finding", {"title": "x" * 1001}, None, c.INVALID_DATA),
        ("task.completed", {"id": "t", "output": [1]}, None, c.INVALID_DATA),
        ("log", {}, "9999-12-31T00:00:00Z", c.FUTURE_TIMESTAMP),
        ("log", {}, "2026-01-01T00:00:00", c.BAD_TIMESTAMP),
        ("log", {}, "soon", c.BAD_TIMESTAMP),
    ],
)
def test_the_receivers_check_refuses_with_a_typed_reason(type_, data, ts, reason):
    with pytest.raises(c.CatalogueError) as refused:
        c.check_replicated(event(type_, data, ts))
    assert refused.value.reason == reason


def test_extra_fields_and_a_small_clock_skew_are_accepted():
    now = datetime.now(UTC)
    soon = (now + timedelta(seconds=c.MAX_FUTURE_SKEW_SECS - 5)).isoformat()
    c.check_replicated(event("finding", {"title": "t", "from_a_newer_node": [1, 2]}, soon), now)
    late = (now + timedelta(seconds=c.MAX_FUTURE_SKEW_SECS + 5)).isoformat()
    with pytest.raises(c.CatalogueError):
        c.check_replicated(event("finding", {}, late), now)
