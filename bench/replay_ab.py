"""Replay speed of the node's read models at two revisions, side by side on one journal.

bench/store_ab.py compares two versions of `eventstore/store.py`; this compares everything a
rebuild runs (the projections, their registry, the catalogue): each revision is exported into a
temp dir (`WT`: this working tree), one journal of `--events` findings is written once, and each
round runs a child process per revision (alternating which goes first) that rebuilds every
read model of the node from position 0 `--folds` times and reports its median events per CPU
second (the wall clock of a shared machine is mostly other people's load), and, next to it in
the same child, the raw scan and decode of bench/journal.py (b) (one and the same function for
both revisions, alternating which runs first), so each revision also gets its replay ÷ raw scan
ratio. Compare the two revisions' figures of one run, never figures of different runs (on a
shared machine they drift by more than most changes).

Run: .venv/bin/python bench/replay_ab.py A B [--rounds 4] [--events 30000] [--folds 7]
  e.g. .venv/bin/python bench/replay_ab.py 9fe7016 WT
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
SIGNER = "eventstore/_sign_batch.abi3.so"


def export(revision: str, into: Path) -> Path:
    """A directory holding `revision` (the working tree itself for WT)."""
    if revision == "WT":
        return ROOT
    target = into / revision
    target.mkdir()
    archive = subprocess.run(
        ["git", "archive", revision], cwd=ROOT, check=True, capture_output=True
    ).stdout
    subprocess.run(["tar", "-x", "-C", str(target)], input=archive, check=True)
    if (ROOT / SIGNER).exists():  # the built C signer is not in git
        shutil.copy(ROOT / SIGNER, target / SIGNER)
    return target


def child(root: Path, journal: Path, events: int, folds: int) -> None:
    """In the child: write the journal if missing, then time `folds` full rebuilds."""
    sys.path.insert(0, str(root))
    import asyncio
    import time

    from nacl.signing import SigningKey

    from eventstore.store import EventStore, NewEvent
    from node.app import build_app
    from node.context import CONTEXT
    from tests.support import make_config

    key = SigningKey(b"\7" * 32)
    data = {"severity": "low", "title": "disk almost full", "detail": "92% used on /var"}
    if not (journal / "data.mdb").exists():

        async def fill() -> None:
            store = EventStore(journal, key, "bench")
            store.start()
            for start in range(0, events, 1000):
                count = min(1000, events - start)
                await store.append_many(
                    [NewEvent(f"agent-{i % 10}", "finding", data) for i in range(count)]
                )
            await store.close()

        asyncio.run(fill())
    ctx = build_app(make_config(Path(tempfile.mkdtemp(prefix="bench-config-"))))[CONTEXT]
    ctx.store.close_sync()

    def rebuild() -> float:
        store = EventStore(journal, key, "bench")
        projections = ctx.projections.fresh()
        started = time.process_time()  # CPU time: the rebuild runs on this thread alone
        projections.rebuild(store.iter_chunks())
        elapsed = time.process_time() - started
        store.close_sync()
        if projections.disk is not None:
            projections.disk.close()
        return events / elapsed

    rates, scans, ratios = [], [], []
    for i in range(folds):  # alternating which goes first
        if i % 2:
            scan = raw_scan_rate(journal)
            rate = rebuild()
        else:
            rate = rebuild()
            scan = raw_scan_rate(journal)
        rates.append(rate)
        scans.append(scan)
        ratios.append(rate / scan)
    print(
        json.dumps(
            {
                "median_per_s": statistics.median(rates),
                "scan_per_s": statistics.median(scans),
                "ratio": statistics.median(ratios),
            }
        )
    )


def raw_scan_rate(journal: Path) -> float:
    """bench/journal.py's raw limit of (b), defined here so that both revisions' children run
    the same one: every stored record read in global order (one get each) and decoded."""
    import time

    import lmdb
    import msgspec

    from eventstore.envelope import decode_event

    env = lmdb.open(str(journal), readonly=True, max_dbs=4, lock=False)
    all_db, events_db = env.open_db(b"all", create=False), env.open_db(b"events", create=False)
    decoder = msgspec.msgpack.Decoder(tuple[int, bytes, bytes, bytes])
    count = 0
    started = time.process_time()
    with env.begin() as txn:
        for _position, key in txn.cursor(db=all_db):
            _pos, payload, _digest, _sig = decoder.decode(txn.get(key, db=events_db))
            decode_event(payload)
            count += 1
    elapsed = time.process_time() - started
    env.close()
    return count / elapsed


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("a")
    parser.add_argument("b")
    parser.add_argument("--rounds", type=int, default=4)
    parser.add_argument("--events", type=int, default=30000)
    parser.add_argument("--folds", type=int, default=7)
    parser.add_argument("--child", nargs=2, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        child(Path(args.child[0]), Path(args.child[1]), args.events, args.folds)
        return
    with tempfile.TemporaryDirectory(prefix="replay-ab-") as tmp:
        roots = {rev: export(rev, Path(tmp)) for rev in (args.a, args.b)}
        journal = Path(tmp) / "journal"
        rates: dict[str, list[float]] = {args.a: [], args.b: []}
        ratios: dict[str, list[float]] = {args.a: [], args.b: []}
        for i in range(args.rounds):
            order = (args.a, args.b) if i % 2 == 0 else (args.b, args.a)
            for rev in order:
                command = [sys.executable, __file__, args.a, args.b, "--events", str(args.events)]
                command += ["--folds", str(args.folds), "--child", str(roots[rev]), str(journal)]
                out = subprocess.run(
                    command,
                    check=True,
                    capture_output=True,
                    text=True,
                ).stdout
                found = json.loads(out.strip().splitlines()[-1])
                rates[rev].append(found["median_per_s"])
                ratios[rev].append(found["ratio"])
            print(
                f"round {i + 1}: "
                + ", ".join(
                    f"{r} {rates[r][-1]:,.0f}/s ({ratios[r][-1]:.3f} of raw)" for r in rates
                )
            )
    a, b = (statistics.median(rates[r]) for r in (args.a, args.b))
    print(f"median of rounds: {args.a} {a:,.0f}/s, {args.b} {b:,.0f}/s, b/a {b / a:.3f}")
    ra, rb = (statistics.median(ratios[r]) for r in (args.a, args.b))
    print(f"replay ÷ raw scan and decode: {args.a} {ra:.3f}, {args.b} {rb:.3f}")
    report = {
        "bench": "replay_ab",
        "a": args.a,
        "b": args.b,
        "events": args.events,
        "a_per_s": round(a),
        "b_per_s": round(b),
        "b_over_a": round(b / a, 3),
        "a_over_raw_scan": round(ra, 3),
        "b_over_raw_scan": round(rb, 3),
        "ratio_rounds": {r: [round(x, 3) for x in v] for r, v in ratios.items()},
        "rounds": {r: [round(x) for x in v] for r, v in rates.items()},
        "load_average_1m": os.getloadavg()[0],
    }
    print(json.dumps(report))


if __name__ == "__main__":
    main()
