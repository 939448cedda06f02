"""The bounds of MCP sessions (node/protocols/mcp_sessions.py) and the reading of a client's answer
to an elicitation (node/protocols/mcp_elicit.py), which any client with a token
reaches: whatever it opens, holds busy and ends, no token holds more than its share, the node no
more than its total, a busy session (a request in flight) is never the one ended to
make room, and a session's queue for its GET stream stays bounded, each URI once."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from node.protocols.mcp_elicit import MAX_REASON, decision_of
from node.protocols.mcp_sessions import MAX_PENDING, McpSessions, SessionLimitError

TOKENS = [bytes([n]) * 32 for n in range(3)]
op = st.one_of(
    st.tuples(st.just("open"), st.integers(0, 2)),
    st.tuples(st.just("busy"), st.integers(0, 30)),
    st.tuples(st.just("end"), st.integers(0, 30)),
)


@settings(max_examples=80, deadline=None)
@given(st.lists(op, max_size=60), st.integers(1, 4), st.integers(1, 8))
def test_sessions_stay_within_their_bounds(ops, per_token, total):
    sessions = McpSessions(per_token, total, idle_secs=3600)
    made = []
    busy, ended_by_client = set(), set()
    for kind, n in ops:
        if kind == "open":
            token = TOKENS[n]
            try:
                made.append(sessions.create(token, f"t{n}", "a", frozenset(), {}))
            except SessionLimitError:
                live = [s for s in made if not s.ended]
                mine = [s for s in live if s.token == token]
                # refused only when what would have to make room is all busy
                assert (
                    all(s.busy for s in mine)
                    if len(mine) >= per_token
                    else all(s.busy for s in live)
                )
        elif made:
            session = made[n % len(made)]
            if kind == "busy" and not session.ended:
                session.in_flight += 1
                busy.add(session.id)
            elif kind == "end":
                sessions.end(session.id)
                ended_by_client.add(session.id)
        live = [s for s in made if not s.ended]
        assert len(sessions) == len(live) <= total
        for token in TOKENS:
            assert sum(1 for s in live if s.token == token) <= per_token
        # a busy session is never ended to make room: only its client ends it
        assert all(s.id in ended_by_client for s in made if s.ended and s.id in busy)
    for s in made:
        assert sessions.get(s.id, s.token, "a") is (None if s.ended else s)


@settings(max_examples=60, deadline=None)
@given(st.lists(st.integers(0, 400), max_size=1000))
def test_a_sessions_queue_is_bounded_and_holds_each_uri_once(updates):
    session = McpSessions(1, 1, 3600).create(b"x" * 32, "t", "a", frozenset(), {})
    session.subscriptions = {f"agent://a/state/{n}" for n in range(400)}
    for n in updates:
        session.resource_updated(f"agent://a/state/{n}")
        uris = [m["params"]["uri"] for _, m in session.pending]
        assert len(uris) == len(set(uris)) <= MAX_PENDING
    session.resource_updated("agent://a/not-subscribed")
    assert all(m["params"]["uri"] != "agent://a/not-subscribed" for _, m in session.pending)


json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.text(max_size=700),
    lambda inner: (
        st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=10), inner, max_size=4)
    ),
    max_leaves=20,
)
answers = st.fixed_dictionaries(
    {},
    optional={
        "id": json_values,
        "result": st.fixed_dictionaries(
            {},
            optional={
                "action": st.sampled_from(["accept", "decline", "cancel", "x"]) | json_values,
                "content": st.fixed_dictionaries(
                    {},
                    optional={
                        "decision": st.sampled_from(["approve", "deny", "maybe"]) | json_values,
                        "reason": json_values,
                    },
                )
                | json_values,
            },
        )
        | json_values,
        "error": json_values,
    },
)


@settings(max_examples=120, deadline=None)
@given(answers)
def test_whatever_a_client_answers_is_a_decision_or_nothing(answer):
    """A client's answer to an elicitation (node/protocols/mcp_elicit.py) is hostile input:
    only an explicit accept of approve approves, a reason is bounded text."""
    decided = decision_of(answer)
    if decided is None:
        return
    decision, reason = decided
    assert decision in ("approve", "deny")
    assert reason is None or (isinstance(reason, str) and 0 < len(reason) <= MAX_REASON)
    if decision == "approve":
        assert answer["result"]["action"] == "accept"
        assert answer["result"]["content"]["decision"] == "approve"
