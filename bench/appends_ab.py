"""(a) of bench/journal.py for two source trees, side by side: whole trees, not one module.

`bench/store_ab.py` swaps only `eventstore/store.py`; a change that also moves work into the
store from elsewhere (issue 16: the read models the writer now folds) has to be judged with each
tree's own code throughout. Each round runs, for each tree in a child process of its own (the
order alternating between rounds), that tree's raw append limit and its 64-producer group
commit through its own `bench/journal.py`; the median ratio (group / raw) of each is reported.

Run: .venv/bin/python bench/appends_ab.py BASE_TREE NEW_TREE [--rounds 6] [--events 20000]
  e.g. git worktree add /tmp/base 44c8a17 && .venv/bin/python bench/appends_ab.py /tmp/base .
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
from pathlib import Path

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


def one(tree: Path, events: int) -> dict[str, float]:
    done = subprocess.run(
        [sys.executable, "-c", CHILD.format(events=events)],
        cwd=tree,
        capture_output=True,
        text=True,
        check=True,
    )
    return json.loads(done.stdout.strip().splitlines()[-1])


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("base", type=Path)
    parser.add_argument("new", type=Path)
    parser.add_argument("--rounds", type=int, default=6)
    parser.add_argument("--events", type=int, default=20_000)
    args = parser.parse_args()
    runs: dict[str, list[dict[str, float]]] = {"base": [], "new": []}
    for i in range(args.rounds):
        for name in ("base", "new") if i % 2 == 0 else ("new", "base"):
            result = one(getattr(args, name).resolve(), args.events)
            runs[name].append(result)
            ratio = result["rate"] / result["raw"]
            print(
                f"round {i + 1} {name}: {result['rate']:,.0f}/s, raw {result['raw']:,.0f}/s, "
                f"ratio {ratio:.3f}",
                flush=True,
            )
    out: dict[str, object] = {"bench": "appends_ab", "events": args.events, "rounds": args.rounds}
    for name, results in runs.items():
        out[name] = {
            "tree": str(getattr(args, name)),
            "rate_per_s": round(statistics.median(r["rate"] for r in results)),
            "raw_per_s": round(statistics.median(r["raw"] for r in results)),
            "ratio": round(statistics.median(r["rate"] / r["raw"] for r in results), 3),
            "ratios": sorted(round(r["rate"] / r["raw"], 3) for r in results),
        }
    base, new = out["base"], out["new"]
    assert isinstance(base, dict) and isinstance(new, dict)
    out["new_ratio_over_base"] = round(new["ratio"] / base["ratio"], 3)
    out["new_rate_over_base"] = round(new["rate_per_s"] / base["rate_per_s"], 3)
    print(json.dumps(out))


if __name__ == "__main__":
    main()
