"""An agent's durable state as the fold of its own journal: each `state.set` sets a key, an
`agent.retired` (the end of a deployment under that name) clears them all.

Pure: the fold takes envelopes and the state so far and returns the next, so a reader that
keeps the state and the seq it reached folds only what came after (node/protocols/mcp_resources.py,
the MCP resources `agent://<agent>/state...`). The agent's own host reads the same events the
same way (node/runtime/host.py)."""

from __future__ import annotations

from collections.abc import Iterable

from eventstore.envelope import Envelope
from projections import catalogue as c


def fold_state(state: dict[str, str], envelopes: Iterable[Envelope]) -> dict[str, str]:
    """`state` (changed in place, and returned) after `envelopes`, oldest first."""
    for envelope in envelopes:
        kind = envelope.event.type
        if kind == c.STATE_SET:
            payload = c.payload_of(envelope)
            if isinstance(payload, c.StateSet):
                state[payload.key] = payload.value
        elif kind == c.AGENT_RETIRED:
            state.clear()
    return state
