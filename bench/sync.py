"""Benchmark of mesh sync between two real nodes on loopback.

1. Raw ed25519 verify rate: PyNaCl's `VerifyKey.verify` (what the receiver calls) over signed
   bytes of the envelope format, one thread, in this process, before and after the sync run
   (the ratio uses their mean; on a shared machine the load average is printed too).
2. Catch-up of a new node: node-a holds N envelopes (written offline into its journal, spread
   over J journals); node-b starts empty. Timed from node-b answering health until node-b holds
   every envelope (verified, durably stored, folded into its read models), as node-b's
   convergence report shows. envelopes/s = N / that time, set next to the raw verify rate.

Run: .venv/bin/python bench/sync.py [--envelopes 100000] [--journals 10] [--batch 1000]
The last line printed is one JSON object with the figures.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
from pathlib import Path

import httpx
from nacl.signing import SigningKey

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from eventstore.envelope import digest_of, signed_bytes  # noqa: E402
from node.polling import wait_until  # noqa: E402
from tests.support import NodeProcess  # noqa: E402
from tests.sync_support import prefill, write_mesh  # noqa: E402


def raw_verify_rate(samples: int) -> float:
    key = SigningKey.generate()
    verify_key = key.verify_key
    messages = []
    for i in range(samples):
        message = signed_bytes("bench", i + 1, digest_of(b"payload %d" % i))
        messages.append((message, key.sign(message).signature))
    started = time.perf_counter()
    for message, signature in messages:
        verify_key.verify(message, signature)
    return samples / (time.perf_counter() - started)


def held(journals: list[str], client: httpx.Client) -> int:
    total = 0
    for agent in journals:
        r = client.get("/api/v1/sync/convergence", params={"agent": agent})
        total += r.json()["local_seq"]
    return total


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--envelopes", type=int, default=100_000)
    parser.add_argument("--journals", type=int, default=10)
    parser.add_argument("--batch", type=int, default=1000)
    parser.add_argument("--verify-samples", type=int, default=20_000)
    args = parser.parse_args()

    raw_before = raw_verify_rate(args.verify_samples)
    print(f"raw ed25519 verify: {raw_before:,.0f}/s (one thread, {args.verify_samples} samples)")

    with tempfile.TemporaryDirectory(prefix="sync-bench-") as tmp:
        tuning = (
            f"\n[sync]\nbatch_size = {args.batch}\nbackoff_initial_secs = 0.05\n"
            "backoff_max_secs = 0.1\n"
        )
        paths = write_mesh(Path(tmp), ["node-a", "node-b"], extra=tuning)
        names = [f"bulk-{i}" for i in range(args.journals)]
        per = args.envelopes // args.journals
        counts = {
            n: per + (1 if i < args.envelopes % args.journals else 0) for i, n in enumerate(names)
        }
        started = time.perf_counter()
        prefill(paths["node-a"], counts, chunk=2000)
        took = time.perf_counter() - started
        print(f"prefilled node-a with {args.envelopes:,} envelopes in {took:.1f}s")

        a, b = NodeProcess(paths["node-a"]), NodeProcess(paths["node-b"])
        try:
            a.start(timeout=120)
            spawned = time.perf_counter()
            b.start()
            healthy = time.perf_counter()
            with b.client() as client:
                wait_until(
                    lambda: held(names, client) >= args.envelopes,
                    600,
                    "node-b holds every envelope",
                )
            done = time.perf_counter()
        finally:
            a.terminate()
            b.terminate()
        raw_after = raw_verify_rate(args.verify_samples)
        raw = (raw_before + raw_after) / 2
        print(f"raw ed25519 verify again: {raw_after:,.0f}/s; the ratio uses the mean {raw:,.0f}/s")
        elapsed = done - healthy
        rate = args.envelopes / elapsed
        figures = {
            "envelopes": args.envelopes,
            "journals": args.journals,
            "batch_size": args.batch,
            "raw_verify_per_s": round(raw),
            "replicated_per_s": round(rate),
            "ratio_to_raw_verify": round(rate / raw, 3),
            "catch_up_secs": round(elapsed, 2),
            "catch_up_from_spawn_secs": round(done - spawned, 2),
            "raw_verify_before_after": [round(raw_before), round(raw_after)],
            "load_average_1m": round(os.getloadavg()[0], 2),
        }
    print(
        f"new node caught up on {args.envelopes:,} envelopes in {elapsed:.2f}s "
        f"({done - spawned:.2f}s from process spawn): {rate:,.0f} envelopes/s, "
        f"{rate / raw:.2f} x raw verify"
    )
    print(json.dumps({"bench": "sync", **figures}))


if __name__ == "__main__":
    main()
