"""What each agent's inference spent, in tokens and in cost, on the node's one budget ledger
(projections/ledger.py): `inference.completed` charges the agent's own two ledgers, and an
inference budget of a group or of the node sums the ledgers of the agents it covers
(node/inference/budgets.py). Charges are the provider's counts, so a restart or a rebuild
reads the same totals."""

from __future__ import annotations

from collections.abc import Iterable
from decimal import Decimal
from typing import Any

from eventstore.envelope import Envelope
from projections import catalogue as c
from projections.disk import Space, Txn
from projections.ledger import Ledger, ledger_key

KIND = "inference"
UNITS = ("tokens", "cost")  # cost in nano-units of the node's currency
ALL = 2**63 - 1


def _micros(ts: str) -> int:
    when = c.parse_ts(ts)
    return int(when.timestamp() * 1_000_000) if when is not None else 0


class InferenceLedger:
    name = "inference_ledger"
    handles = frozenset({c.INFERENCE_COMPLETED})
    space: Space

    def bind(self, space: Space) -> None:
        self.space = space
        self.ledger = Ledger(space.db(self.name, "charges"))

    def fold(self, txn: Txn, envelope: Envelope) -> None:
        payload = c.payload_of(envelope)
        if not isinstance(payload, c.InferenceCompleted):
            return
        moment = _micros(envelope.event.ts)
        amounts = {
            "tokens": payload.input_tokens + payload.output_tokens,
            "cost": payload.cost_nanos,
        }
        for unit, amount in amounts.items():
            if amount:
                key = ledger_key(envelope.stream, "", KIND, unit)
                self.ledger.charge(txn, key, moment, envelope.position, Decimal(amount))

    def spent(self, agents: Iterable[str], unit: str, since_micros: int) -> Decimal:
        """What the agents spent in `unit` since then (every folded charge)."""
        with self.space.read() as txn:
            return sum(
                (
                    self.ledger.spent(txn, ledger_key(a, "", KIND, unit), since_micros, ALL)
                    for a in set(agents)
                ),
                Decimal(0),
            )

    def snapshot(self) -> Any:
        with self.space.read() as txn:
            return [
                (bytes(k).hex(), bytes(v).hex()) for k, v in txn.cursor(self.ledger.db).iternext()
            ]
