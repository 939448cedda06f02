"""The CPU floor of mesh convergence: what checking one foreign envelope costs, whatever carries it.

Every node verifies and commits every foreign envelope, so a mesh of N nodes each writing E
envelopes does N·(N-1)·E of these checks in all; on C cores no transport converges faster than
that CPU divided by C. Measured here in CPU seconds of one thread (`time.thread_time`: the
machine's other tenants hardly change it): the signature check alone (`verify_batch`, one C call,
no GIL), the executor's whole share of an import (`precheck`: decode, hash, signature), and the
event loop's screening of a push (`parse_envelope`, `decode_event`, the catalogue check).

Run: .venv/bin/python bench/verify_floor.py [--envelopes 20000]
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from datetime import UTC, datetime
from pathlib import Path

import msgspec
from nacl.signing import SigningKey

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from eventstore.batch_sign import verify_batch  # noqa: E402
from eventstore.envelope import decode_event, digest_of, signed_bytes  # noqa: E402
from eventstore.imports import precheck  # noqa: E402
from harness.mesh import signed_chain  # noqa: E402
from node.sync.wire import parse_envelope  # noqa: E402
from projections.catalogue import check_replicated  # noqa: E402


def per_item_us(work, count: int, rounds: int = 3) -> float:
    """The best of `rounds` (thread CPU time per item, µs)."""
    best = float("inf")
    for _ in range(rounds):
        started = time.thread_time()
        work()
        best = min(best, (time.thread_time() - started) / count * 1e6)
    return best


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--envelopes", type=int, default=20_000)
    args = parser.parse_args()
    key = SigningKey.generate()
    pushed = signed_chain(key, "node-x", "agent-x", args.envelopes)
    raws = [msgspec.Raw(msgspec.json.encode(p)) for p in pushed]
    items = [parse_envelope(r) for r in raws]
    checks = [
        (bytes(key.verify_key), signed_bytes(i.stream, i.seq, digest_of(i.payload)), i.signature)
        for i in items
    ]
    assert all(verify_batch(checks))
    now = datetime.now(UTC)

    def screen() -> None:
        for raw in raws:
            check_replicated(decode_event(parse_envelope(raw).payload), now)

    n = args.envelopes
    figures = {
        "bench": "verify_floor",
        "envelopes": n,
        "verify_batch_us": round(per_item_us(lambda: verify_batch(checks), n), 1),
        "precheck_us": round(per_item_us(lambda: precheck(items, lambda _: key.verify_key), n), 1),
        "screen_us": round(per_item_us(screen, n), 1),
    }
    print(json.dumps(figures))


if __name__ == "__main__":
    main()
