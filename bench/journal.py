"""Journal throughput and replay speed, each next to its raw limit measured in the same run.

(a) durable signed appends/s through the group-commit writer, 64 concurrent producers, vs the
    raw limit: msgspec encode + sha256 + ed25519 sign + LMDB put, 1000 per txn, one fsync each
    (and, for context, the same with 256 producers, whose batches are not capped at 64; and the
    same with the PyNaCl signer, an install without the C extension);
(b) rebuild of every read model from position 0 (the on-disk ones into a scratch environment,
    as `agent-node replay` does) in events/s vs a raw LMDB scan + decode of the same journal,
    both in CPU time of the one thread that runs them (load barely moves it);
(c) POST /api/v1/findings requests/s at concurrency 64 vs a bare aiohttp handler, loaded by
    wrk (bench/wrk.py): servers on CPU 0, wrk on CPU 1, the request and the bare peer of
    `../shared/tools/perf-guard`, so the two report the same ratio.

With `--base COMMIT` the same run also measures that commit side by side: (a) through each
tree's own code (`appends_of`: a child in that tree), (c) with a third server running the
commit; the figures gain `*_base` and `*_vs_base` (a slowdown shows as a `*_vs_base` below 1).
Any other figure of this bench against a commit: `bench/ab.py COMMIT bench/journal.py`.

Run: .venv/bin/python bench/journal.py [--events 30000] [--seconds 5] [--rounds 3] [--base COMMIT]
"""

from __future__ import annotations

import argparse
import asyncio
import hashlib
import json
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import lmdb
import msgspec
from nacl.signing import SigningKey

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.common import ROOT, export, report, start_process, stop_process
from bench.wrk import SERVER_CPU, pinned, post_rate
from eventstore.envelope import Event, encode_event, signed_bytes, utc_now
from eventstore.signing import (
    SIGNER,
    BatchSigner,
    PyNaClBatchSigner,
    PyNaClSharedSigner,
    SharedSigner,
)
from eventstore.store import EventStore
from harness.node import ADMIN_TOKEN, free_port, make_config, write_config
from node.app import build_app
from node.context import CONTEXT
from projections.base import Projections
from projections.models import disk_models

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


def replay_rate(directory: Path) -> float:
    """Every read model rebuilt from position 0, in events per CPU second, as `raw_scan_rate`
    times its scan (on a shared machine a tenth of a second of wall clock is mostly load)."""
    store = EventStore(directory, KEY, "bench")
    projections = node_projections()
    started = time.process_time()
    projections.rebuild(store.iter_chunks())
    elapsed = time.process_time() - started
    count = projections.position
    store.close_sync()
    if projections.disk is not None:
        projections.disk.close()
    return count / elapsed


# about the node itself (write_config's default name): a finding needs a journal that exists
FINDING = {"agent": "node-a", "severity": "low", "title": "load", "detail": "a finding under load"}


def findings_http(tmp: Path, seconds: int, rounds: int, base: Path | None) -> dict:
    """The servers run side by side, each on CPU 0; rounds load them in turn (the order
    alternating), and each ratio is the median of the rounds' ratios, as perf-guard's."""
    trees = {"node": ROOT, **({"base": base} if base is not None else {})}
    procs, urls = [], {}
    try:
        port = free_port()
        procs.append(
            start_process(
                [*pinned(SERVER_CPU), sys.executable, "bench/bare_server.py", str(port)],
                f"http://127.0.0.1:{port}/api/v1/health",
            )
        )
        urls["bare"] = f"http://127.0.0.1:{port}/api/v1/findings"
        for name, tree in trees.items():
            port = free_port()
            config = write_config(tmp / name, port=port)
            procs.append(
                start_process(
                    [
                        *pinned(SERVER_CPU),
                        sys.executable,
                        "-m",
                        "node",
                        "run",
                        "--config",
                        str(config),
                    ],
                    f"http://127.0.0.1:{port}/api/v1/health",
                    cwd=tree,
                )
            )
            urls[name] = f"http://127.0.0.1:{port}/api/v1/findings"
        headers = {"Authorization": f"Bearer {ADMIN_TOKEN}"}
        results: dict[str, list[dict]] = {name: [] for name in urls}
        for url in urls.values():  # warm-up
            post_rate(url, FINDING, headers, seconds=2)
        for i in range(rounds):
            order = list(urls) if i % 2 else list(reversed(urls))
            for name in order:
                results[name].append(post_rate(urls[name], FINDING, headers, seconds=seconds))
    finally:
        for proc in procs:
            stop_process(proc)

    def median_ratio(a: str, b: str) -> float:
        return statistics.median(
            x["requests_per_s"] / y["requests_per_s"]
            for x, y in zip(results[a], results[b], strict=True)
        )

    def median_of(name: str, key: str) -> float:
        return statistics.median(r[key] for r in results[name])

    figures = {
        "findings_rps": round(median_of("node", "requests_per_s")),
        "findings_p99_ms": median_of("node", "p99_ms"),
        "bare_rps": round(median_of("bare", "requests_per_s")),
        "findings_ratio": round(median_ratio("node", "bare"), 3),
    }
    if base is not None:
        figures |= {
            "findings_rps_base": round(median_of("base", "requests_per_s")),
            "findings_ratio_base": round(median_ratio("base", "bare"), 3),
            "findings_vs_base": round(median_ratio("node", "base"), 3),
        }
    return figures


# the child of (a) for another tree: that tree's own raw limit and group commit
CHILD = """
import asyncio, json, sys, tempfile
from pathlib import Path
sys.path.insert(0, ".")
from bench import journal
tmp = Path(tempfile.mkdtemp(prefix="bench-appends-ab-"))
raw = journal.raw_append_limit(tmp / "raw", {events})
rate = asyncio.run(journal.group_commit_rate(tmp / "store", {events}))
print(json.dumps({{"raw": raw, "rate": rate}}))
"""


def appends_of(tree: Path, events: int) -> dict[str, float]:
    """(a) of `tree` through its own bench/journal.py, in a child: {raw, rate}."""
    done = subprocess.run(
        [sys.executable, "-c", CHILD.format(events=events)],
        cwd=tree,
        capture_output=True,
        text=True,
        check=True,
    )
    return json.loads(done.stdout.strip().splitlines()[-1])


def raw_scan_rate(journal: Path) -> float:
    """The raw limit of (b): every stored record read in global order (one get each) and
    decoded, in records per CPU second."""
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


def appends_vs_base(base: Path, events: int, rounds: int) -> dict:
    """(a) of both trees, each through its own code in a child, the order alternating."""
    ratios: dict[str, list[float]] = {"node": [], "base": []}
    for i in range(rounds):
        for name, tree in (
            (("node", ROOT), ("base", base)) if i % 2 else (("base", base), ("node", ROOT))
        ):
            result = appends_of(tree, events)
            ratios[name].append(result["rate"] / result["raw"])
    node, base_ratio = (statistics.median(ratios[n]) for n in ("node", "base"))
    return {
        "append_ratio_same_run": round(node, 3),
        "append_ratio_base": round(base_ratio, 3),
        "append_vs_base": round(node / base_ratio, 3),
    }


def paired_rounds(rounds: int, measure) -> tuple[float, float, float, list[float]]:
    """Median of (ours, peer, ratio) over rounds that alternate the two: noise hits both.
    Also every round's ratio, lowest first, so that a reader sees the spread."""
    results = sorted((measure(i) for i in range(rounds)), key=lambda r: r[0] / r[1])
    ours, peer = results[len(results) // 2]
    return ours, peer, ours / peer, [round(o / p, 2) for o, p in results]


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--events", type=int, default=30_000)
    parser.add_argument("--seconds", type=int, default=5, help="of each (c) round")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--base", help="a commit to measure side by side ((a) and (c))")
    args = parser.parse_args()
    tmp = Path(tempfile.mkdtemp(prefix="bench-journal-"))
    base = export(args.base, tmp) if args.base else None
    against_base: dict = {}
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
                scan = raw_scan_rate(tmp / "store0-64")
                return replay_rate(tmp / "store0-64"), scan
            replay = replay_rate(tmp / "store0-64")
            return replay, raw_scan_rate(tmp / "store0-64")

        # a replay round takes about a tenth of a second, short enough for one hiccup of this
        # shared machine to decide it: CPU time, and five times the rounds, a few seconds in all
        replay, scan, replay_ratio, replay_rounds = paired_rounds(5 * args.rounds, replay_round)
        print(f"(b) replay {replay:,.0f} events/s vs raw scan {scan:,.0f}/s: {replay_ratio:.2f}")
        print(f"    each round: {replay_rounds}")
        http = findings_http(tmp, args.seconds, args.rounds, base)
        print(
            f"(c) POST findings {http['findings_rps']:,} vs bare {http['bare_rps']:,}: "
            f"{http['findings_ratio']:.3f}"
        )
        if base is not None:
            print(f"    base {args.base}: {http['findings_ratio_base']:.3f} of bare")
            against_base = appends_vs_base(base, args.events, args.rounds)
            print(f"(a) against {args.base}: {against_base}")
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
            **http,
            **({"base": args.base, **against_base} if args.base else {}),
        }
    )


if __name__ == "__main__":
    main()
