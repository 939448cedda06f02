"""Budget notices: an inference budget's use crossing 80 % or 100 % is told once per budget
window and threshold, as a finding and through the node's notification channels
(docs/inference.md, "Budgets"; the outbox turns the finding into notices, node/delivery).

Once means once across restarts and nodes holding the journal: the finding carries an
`incident` key (the budget, the threshold and the window: the budget's period counted from
the epoch), and the findings read model keeps the keys already journaled
(projections/entries.py `has_incident`), so the decision is the journal's, not this process's.
An agent's own budget is told in the agent's journal; a shared one (a group's, the node's) in
the node's own journal, so that its members' crossings make one notice. Only the node whose
agent's call settled reports (InferenceService.settle); a replica folds the same finding into
its outbox but only the journal's home delivers it (node/delivery/dispatch.py `is_home`), and
the home's `delivery.progress` makes the replica forget it (tests/delivery/
test_budget_notice_replica.py).
"""

from __future__ import annotations

import hashlib
import logging
from dataclasses import dataclass
from typing import Protocol

from eventstore.store import EventStore
from node.policy.budgets import Budget
from projections import catalogue as c

log = logging.getLogger(__name__)
INCIDENT = "inference-budget"


@dataclass(frozen=True)
class Crossing:
    """A budget whose use reached `share` % (80 or 100) with a call of `agent`."""

    budget: Budget
    share: int
    agent: str
    at: float  # epoch seconds

    @property
    def title(self) -> str:
        return f"inference budget {self.budget.text!r} is {self.share} % spent"

    def window(self) -> int:
        return int(self.at // max(self.budget.period_secs, 1))


class Incidents(Protocol):
    def has_incident(self, incident: str) -> bool: ...


def incident_key(stream: str, crossing: Crossing) -> str:
    """`<journal>/inference-budget/<share>/<window>/<budget digest>`: the findings read model
    counts a key only in the journal it names."""
    digest = hashlib.sha256(crossing.budget.text.encode()).hexdigest()[:16]
    return f"{stream}/{INCIDENT}/{crossing.share}/{crossing.window()}/{digest}"


def is_budget_incident(stream: str, incident: object) -> bool:
    return isinstance(incident, str) and incident.startswith(f"{stream}/{INCIDENT}/")


class BudgetNotices:
    def __init__(self, store: EventStore, findings: Incidents, node: str) -> None:
        self.store = store
        self.findings = findings
        self.node = node
        self._in_flight: set[str] = set()  # journaled meanwhile: not folded yet

    async def report(self, crossing: Crossing) -> None:
        """Journal the crossing's finding unless its window was told already."""
        shared = crossing.budget.scope.kind != "agent"
        stream = self.node if shared else crossing.agent
        key = incident_key(stream, crossing)
        if key in self._in_flight or self.findings.has_incident(key):
            return
        finding = c.Finding(
            severity="medium" if crossing.share < 100 else "high",
            title=crossing.title,
            detail=f"agent {crossing.agent}: its call took the budget past {crossing.share} %",
            incident=key,
            subject=crossing.agent if shared else None,
        )
        self._in_flight.add(key)
        try:
            await self.store.append(stream, *c.event_of(finding))
        except Exception as e:  # a closing store: the next crossing's window says it again
            log.warning("inference budget notice not journaled: %s", e)
        finally:
            self._in_flight.discard(key)
