"""A budget's ledger: the charges journaled against it, folded into running totals, so the sum
over any window is two lookups. One mechanism for every budget of the node (a policy's
`@budget` on approvals, inference budgets in tokens or cost), whatever it counts and whoever
shares it: a read model passes the key (`ledger_key`) and the charges it reads from its events.

Keys: `ledger 16 bytes` `u64(time, µs)` `u64(position)` → (amount, running total). The ledger
is the digest of (scope, kind, budget): `scope` says who shares it ("" the agent that was
charged, which is how charges journaled before scopes existed are read; `group:<name>` a named
group of agents; `node:<name>` every agent of one node), `kind` what is counted (a capability,
`inference`, ...) and `budget` which budget (a policy's id, a route). Times never go back within
a ledger (a clock that does is held at the newest), so keys follow positions, the running total
at any key is the sum up to it, and a window's sum is the newest total minus the one before it.
"""

from __future__ import annotations

import hashlib
from decimal import Decimal
from typing import Any

import msgspec

from projections.disk import Txn, u64

_encode = msgspec.msgpack.Encoder().encode
_decode_charge = msgspec.msgpack.Decoder(tuple[str, str]).decode


def ledger_key(agent: str, scope: str, kind: str, budget: str) -> bytes:
    """The ledger of one budget, 16 bytes: per agent when `scope` is "" (the key charges had
    before scopes), else shared by every agent the scope names."""
    parts = ("scoped", scope, kind, budget) if scope else (agent, kind, budget)
    return hashlib.sha256(_encode(parts)).digest()[:16]


class Ledger:
    """The charges of every budget, in one LMDB database of a read model."""

    def __init__(self, db: Any) -> None:
        self.db = db  # Space.db(model, "charges"): its read model's transactions reach it

    def charge(self, txn: Txn, ledger: bytes, micros: int, position: int, amount: Decimal) -> None:
        """Count `amount` against `ledger` at that time and journal position (in the fold)."""
        last_at, total = self._before(txn, ledger, ledger + b"\xff" * 16)
        at = max(micros, last_at)
        entry = ledger + u64(at) + u64(position)
        txn.put(entry, _encode((str(amount), str(total + amount))), db=self.db)

    def _before(self, txn: Txn, ledger: bytes, key: bytes) -> tuple[int, Decimal]:
        """(time, running total) of the ledger's last charge before `key`; (0, 0) for none."""
        cursor = txn.cursor(self.db)
        moved = cursor.prev() if cursor.set_range(key) else cursor.last()
        found = bytes(cursor.key()) if moved else b""
        if not found.startswith(ledger):
            return 0, Decimal(0)
        return int.from_bytes(found[-16:-8], "big"), Decimal(_decode_charge(cursor.value())[1])

    def spent(self, txn: Txn, ledger: bytes, since_micros: int, through: int) -> Decimal:
        """The sum of the ledger's charges since then, at positions up to `through` (what the
        node's readers have been handed: a gate counts later ones itself, in flight)."""
        newest = Decimal(0)
        cursor = txn.cursor(self.db)
        found = cursor.set_range(ledger + b"\xff" * 16)
        moved = cursor.prev() if found else cursor.last()
        while moved:  # back past the charges not delivered yet (one commit's, at most)
            key = bytes(cursor.key())
            if not key.startswith(ledger):
                break
            if int.from_bytes(key[-8:], "big") <= through:
                newest = Decimal(_decode_charge(cursor.value())[1])
                break
            moved = cursor.prev()
        _, before = self._before(txn, ledger, ledger + u64(since_micros))
        return max(newest - before, Decimal(0))
