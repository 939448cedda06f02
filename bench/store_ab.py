"""The event store at two revisions, side by side: bench/journal.py (a), or (b), for each.

On this shared machine one run of bench/journal.py drifts by more than most changes to the store
gain or lose, so a change is judged here instead: `eventstore/store.py` at revision A and at
revision B (`WT`: the working tree) are loaded as two modules into one process, and every round
measures the raw peer (the raw append limit, or with `--replay` the raw scan) and then both
stores, alternating which goes first. Only store.py differs between the two; everything it
imports comes from the working tree. Since issue 28 split the store by job, store.py is only
the facade: a revision before the split brings its whole store, one after it only the facade
(the writer, reads and the rest come from the working tree), so compare such revisions with
`bench/journal.py --base COMMIT`, which runs each commit's own tree.

`--replay` needs revisions that have `EventStore.iter_chunks` (the reader bench/journal.py's
replay uses).

Run: .venv/bin/python bench/store_ab.py A B [--replay] [--rounds 12] [--events 30000]
  e.g. .venv/bin/python bench/store_ab.py HEAD WT
"""

from __future__ import annotations

import argparse
import asyncio
import importlib.util
import shutil
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path
from types import ModuleType

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench import journal
from bench.common import ROOT, report


def load_store(revision: str, name: str, directory: Path) -> ModuleType:
    path = ROOT / "eventstore" / "store.py"
    if revision == "WT":
        source = path.read_text()
    else:
        command = ["git", "-C", str(ROOT), "show", f"{revision}:eventstore/store.py"]
        source = subprocess.run(command, capture_output=True, text=True, check=True).stdout
    copy = directory / f"{name}.py"
    copy.write_text(source)
    spec = importlib.util.spec_from_file_location(f"eventstore.{name}", copy)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look their module up while the class is made
    spec.loader.exec_module(module)
    return module


def writer_rate(module: ModuleType, directory: Path, events: int) -> float:
    """(a) with this module's EventStore in place of the working tree's."""
    original = journal.EventStore
    journal.EventStore = module.EventStore
    try:
        return asyncio.run(journal.group_commit_rate(directory, events))
    finally:
        journal.EventStore = original


def replay_rate(module: ModuleType, directory: Path) -> float:
    """(b) with this module's EventStore reading the journal."""
    original = journal.EventStore
    journal.EventStore = module.EventStore
    try:
        return journal.replay_rate(directory)
    finally:
        journal.EventStore = original


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("a")
    parser.add_argument("b")
    parser.add_argument("--rounds", type=int, default=12)
    parser.add_argument("--events", type=int, default=30_000)
    parser.add_argument("--replay", action="store_true", help="compare (b), not (a)")
    args = parser.parse_args()
    tmp = Path(tempfile.mkdtemp(prefix="bench-store-ab-"))
    ratios: dict[str, list[float]] = {"a": [], "b": []}
    try:
        stores = {"a": load_store(args.a, "store_a", tmp), "b": load_store(args.b, "store_b", tmp)}
        journal_dir = tmp / "journal"
        if args.replay:  # one journal, written by the working tree's store, read by both
            asyncio.run(journal.group_commit_rate(journal_dir, args.events))
        for i in range(args.rounds):
            if args.replay:
                peer = journal.raw_scan_rate(journal_dir)[0]
            else:
                peer = journal.raw_append_limit(tmp / f"raw{i}", args.events)
            for side in ("a", "b") if i % 2 == 0 else ("b", "a"):
                if args.replay:
                    rate = replay_rate(stores[side], journal_dir)
                else:
                    rate = writer_rate(stores[side], tmp / f"{side}{i}", args.events)
                ratios[side].append(rate / peer)
            print(f"round {i}: A {ratios['a'][-1]:.3f}  B {ratios['b'][-1]:.3f}", flush=True)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    a, b = statistics.median(ratios["a"]), statistics.median(ratios["b"])
    wins = sum(rb > ra for ra, rb in zip(ratios["a"], ratios["b"], strict=True))
    peer = "raw scan" if args.replay else "raw limit"
    print(f"median ratio to the {peer}: A ({args.a}) {a:.3f}, B ({args.b}) {b:.3f}")
    report(
        {
            "bench": "store_ab",
            "measure": "replay" if args.replay else "appends",
            "a": args.a,
            "b": args.b,
            "rounds": args.rounds,
            "ratio_a": round(a, 3),
            "ratio_b": round(b, 3),
            "rounds_b_ahead": wins,
        }
    )


if __name__ == "__main__":
    main()
