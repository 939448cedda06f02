"""Journal throughput and replay speed, each next to its raw limit measured in the same run.

(a) durable signed appends/s through the group-commit writer, 64 concurrent producers, vs the
    raw limit: msgspec encode + sha256 + ed25519 sign + LMDB put, 1000 per txn, one fsync each
    (and, for context, the same with 256 producers, whose batches are not capped at 64; and the
    same with the PyNaCl signer, an install without the C extension);
(b) rebuild of every read model from position 0 (the on-disk ones into a scratch environment,
    as `agent-node replay` does) in events/s vs a raw LMDB scan + decode of the same journal;
(c) POST /api/v1/findings requests/s at concurrency 64 vs a bare aiohttp handler.

Run: .venv/bin/python bench/journal.py [--events 30000] [--requests 6000] [--rounds 3]
"""

from __future__ import annotations

import argparse
import asyncio
import hashlib
import shutil
import sys
import tempfile
import time
from pathlib import Path

import lmdb
import msgspec
from nacl.signing import SigningKey

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.common import http_load, report, start_process, stop_process
from eventstore.envelope import Event, decode_event, encode_event, signed_bytes, utc_now
from eventstore.signing import (
    SIGNER,
    BatchSigner,
    PyNaClBatchSigner,
    PyNaClSharedSigner,
    SharedSigner,
)
from eventstore.store import EventStore
from node.app import build_app, disk_models
from node.context import CONTEXT
from projections.base import Projections
from tests.support import ADMIN_TOKEN, auth, free_port, make_config, write_config

KEY = SigningKey(b"\7" * 32)


def node_projections():
    """Empty instances of every read model the node folds (all areas, not just logs): the
    in-memory ones, and the on-disk ones in a scratch environment of their own."""
    ctx = build_app(make_config(Path(tempfile.mkdtemp(prefix="bench-config-"))))[CONTEXT]
    ctx.store.close_sync()
    return ctx.projections.fresh()


def node_store(directory: Path, signer=SharedSigner) -> tuple[EventStore, Projections]:
    """A store set up as the node sets up its own: the writer folds the on-disk read models in
    its transactions, the loop folds the in-memory ones after each commit."""
    fresh = node_projections()
    store = EventStore(directory, KEY, "bench", signer=signer, indexer=disk_models())
    assert fresh.disk is not None
    fresh.disk.close()
    return store, Projections(fresh, store.indexer)  # type: ignore[arg-type]


DATA = {"severity": "low", "title": "disk almost full", "detail": "92% used on /var"}


def raw_append_limit(directory: Path, count: int, pynacl: bool = False) -> float:
    """What one thread can do with no queue at all: the ceiling for the writer.

    It signs with the writer's own primitive (one C call per transaction, on this thread), the
    fastest way one thread has to sign a thousand envelopes.
    """
    env = lmdb.open(str(directory), map_size=1 << 30, max_dbs=4)
    db = env.open_db(b"events")
    record = msgspec.msgpack.Encoder()
    signer = PyNaClBatchSigner(KEY) if pynacl else BatchSigner(KEY)
    prev = ""
    started = time.perf_counter()
    for start in range(0, count, 1000):
        with env.begin(write=True, db=db) as txn:
            ts = utc_now()  # one per transaction, as the writer takes one per commit
            staged = []
            for seq in range(start + 1, min(start + 1000, count) + 1):
                payload = encode_event(Event("finding", ts, "bench", prev, DATA))
                digest = hashlib.sha256(payload).digest()
                staged.append((seq, payload, digest))
                prev = "sha256:" + digest.hex()
            signatures = signer.sign([signed_bytes("bench", seq, d) for seq, _, d in staged])
            for (seq, payload, digest), signature in zip(staged, signatures, strict=True):
                txn.put(
                    b"bench\0" + seq.to_bytes(8, "big"),
                    record.encode((seq, payload, digest, signature)),
                )
    elapsed = time.perf_counter() - started
    env.close()
    return count / elapsed


async def group_commit_rate(
    directory: Path, count: int, producers: int = 64, pynacl: bool = False
) -> float:
    signer = PyNaClSharedSigner if pynacl else SharedSigner
    store, projections = node_store(directory, signer)
    projections.rebuild(())  # as the node does at start: collector state frozen after set-up
    store.add_commit_listener(projections.apply)
    store.start()
    per_producer = count // producers

    async def producer(n: int) -> None:
        stream = f"agent{n % 8}"
        for _ in range(per_producer):
            await store.append(stream, "finding", DATA)

    started = time.perf_counter()
    await asyncio.gather(*(producer(n) for n in range(producers)))
    elapsed = time.perf_counter() - started
    await store.close()
    return per_producer * producers / elapsed


def raw_scan_rate(directory: Path) -> tuple[float, int]:
    """Read every envelope in global order and decode it, with nothing else on top."""
    env = lmdb.open(str(directory), readonly=True, max_dbs=4, lock=False)
    all_db, events_db = env.open_db(b"all", create=False), env.open_db(b"events", create=False)
    decoder = msgspec.msgpack.Decoder(tuple[int, bytes, bytes, bytes])
    count = 0
    started = time.perf_counter()
    with env.begin() as txn:
        for _position, key in txn.cursor(db=all_db):
            _pos, payload, _digest, _sig = decoder.decode(txn.get(key, db=events_db))
            decode_event(payload)
            count += 1
    elapsed = time.perf_counter() - started
    env.close()
    return count / elapsed, count


def replay_rate(directory: Path) -> float:
    store = EventStore(directory, KEY, "bench")
    projections = node_projections()
    started = time.perf_counter()
    projections.rebuild(store.iter_chunks())
    elapsed = time.perf_counter() - started
    count = projections.position
    store.close_sync()
    if projections.disk is not None:
        projections.disk.close()
    return count / elapsed


async def findings_http(tmp: Path, requests: int, rounds: int) -> dict:
    """Both servers run side by side; rounds alternate which is loaded first."""
    body = lambda i: {"agent": f"bench{i % 8}", "severity": "low", "title": f"t{i}"}  # noqa: E731
    bare_port, node_port = free_port(), free_port()
    config = write_config(tmp / "node", port=node_port)
    bare = start_process(
        [sys.executable, "bench/bare_server.py", str(bare_port)],
        f"http://127.0.0.1:{bare_port}/api/v1/health",
    )
    node = start_process(
        [sys.executable, "-m", "node", "run", "--config", str(config)],
        f"http://127.0.0.1:{node_port}/api/v1/health",
    )
    targets = {
        "bare": (f"http://127.0.0.1:{bare_port}/api/v1/findings", None),
        "node": (f"http://127.0.0.1:{node_port}/api/v1/findings", auth(ADMIN_TOKEN)),
    }
    results: dict[str, list[dict]] = {"bare": [], "node": []}
    try:
        for url, headers in targets.values():  # warm-up
            await http_load(url, concurrency=64, requests=500, body=body, headers=headers)
        for i in range(rounds):
            for name in ("bare", "node") if i % 2 else ("node", "bare"):
                url, headers = targets[name]
                results[name].append(
                    await http_load(
                        url, concurrency=64, requests=requests, body=body, headers=headers
                    )
                )
    finally:
        stop_process(bare)
        stop_process(node)
    pairs = sorted(
        zip(results["node"], results["bare"], strict=True),
        key=lambda p: p[0]["requests_per_s"] / p[1]["requests_per_s"],
    )
    node_figures, bare_figures = pairs[len(pairs) // 2]
    return {"node": node_figures, "bare": bare_figures}


def paired_rounds(rounds: int, measure) -> tuple[float, float, float, list[float]]:
    """Median of (ours, peer, ratio) over rounds that alternate the two: noise hits both.
    Also every round's ratio, lowest first, so that a reader sees the spread."""
    results = sorted((measure(i) for i in range(rounds)), key=lambda r: r[0] / r[1])
    ours, peer = results[len(results) // 2]
    return ours, peer, ours / peer, [round(o / p, 2) for o, p in results]


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--events", type=int, default=30_000)
    parser.add_argument("--requests", type=int, default=6_000)
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    tmp = Path(tempfile.mkdtemp(prefix="bench-journal-"))
    try:

        def appends_round(i: int, producers: int, pynacl: bool = False) -> tuple[float, float]:
            # alternate which runs first: the first of a pair is measurably disadvantaged here
            tag = f"{i}-{producers}{'-pynacl' if pynacl else ''}"

            def ours() -> float:
                return asyncio.run(
                    group_commit_rate(tmp / f"store{tag}", args.events, producers, pynacl)
                )

            def limit() -> float:
                return raw_append_limit(tmp / f"raw{tag}", args.events, pynacl)

            if i % 2:
                peer = limit()
                return ours(), peer
            return ours(), limit()

        appends, limit, append_ratio, append_rounds = paired_rounds(
            args.rounds, lambda i: appends_round(i, 64)
        )
        print(f"(a) appends/s {appends:,.0f} vs raw limit {limit:,.0f}: {append_ratio:.2f}")
        print(f"    each round: {append_rounds}")
        # context, not the target: with more producers than one batch holds, batches grow
        wide, wide_limit, wide_ratio, _ = paired_rounds(
            args.rounds, lambda i: appends_round(i, 256)
        )
        print(f"    with 256 producers {wide:,.0f} vs {wide_limit:,.0f}: {wide_ratio:.2f}")
        # an install without the C extension (AGENT_NODE_SIGNER=pynacl, or no compiler)
        plain, plain_limit, plain_ratio, _ = paired_rounds(
            args.rounds, lambda i: appends_round(i, 64, pynacl=True)
        )
        print(f"    PyNaCl signer {plain:,.0f} vs {plain_limit:,.0f}: {plain_ratio:.2f}")

        def replay_round(i: int) -> tuple[float, float]:
            if i % 2:
                scan, _ = raw_scan_rate(tmp / "store0-64")
                return replay_rate(tmp / "store0-64"), scan
            replay = replay_rate(tmp / "store0-64")
            return replay, raw_scan_rate(tmp / "store0-64")[0]

        # a replay round takes about a tenth of a second, short enough for one hiccup of this
        # shared machine to decide it: three times the rounds, still a few seconds in all
        replay, scan, replay_ratio, replay_rounds = paired_rounds(3 * args.rounds, replay_round)
        print(f"(b) replay {replay:,.0f} events/s vs raw scan {scan:,.0f}/s: {replay_ratio:.2f}")
        print(f"    each round: {replay_rounds}")
        http = asyncio.run(findings_http(tmp, args.requests, args.rounds))
        node_rps, bare_rps = http["node"]["requests_per_s"], http["bare"]["requests_per_s"]
        findings_ratio = node_rps / bare_rps
        print(f"(c) POST findings {node_rps:,.0f} vs bare {bare_rps:,.0f}: {findings_ratio:.2f}")
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    report(
        {
            "bench": "journal",
            "events": args.events,
            "appends_per_s": round(appends),
            "limit_per_s": round(limit),
            "append_ratio": round(append_ratio, 2),
            "append_ratio_rounds": append_rounds,
            "signer": SIGNER,
            "appends_per_s_pynacl": round(plain),
            "limit_per_s_pynacl": round(plain_limit),
            "append_ratio_pynacl": round(plain_ratio, 2),
            "appends_256_per_s": round(wide),
            "limit_256_per_s": round(wide_limit),
            "append_ratio_256": round(wide_ratio, 2),
            "replay_per_s": round(replay),
            "raw_scan_per_s": round(scan),
            "replay_ratio": round(replay_ratio, 2),
            "replay_ratio_rounds": replay_rounds,
            "findings_rps": node_rps,
            "findings_p99_ms": http["node"]["p99_ms"],
            "bare_rps": bare_rps,
            "findings_ratio": round(findings_ratio, 2),
        }
    )


if __name__ == "__main__":
    main()
