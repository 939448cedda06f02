"""Any bench, this tree against a commit: both run alternately, the figures set side by side.

On this shared machine two runs of one bench minutes apart differ by more than most changes,
so a change is judged by running the bench of this working tree and the same bench of COMMIT
(its files exported into a temporary folder, this tree's built C signer copied in) in
alternating order, `--rounds` times each, and comparing the medians. Each run is the bench
script as it is in each tree (`bench/journal.py` of COMMIT measures COMMIT's code), with the
same arguments; its last line is its JSON object of figures. Every number in it (nested ones
as `outer.inner`) gets `this`, `base` (medians over the rounds) and `ratio` = this ÷ base: a
rate that fell, or a latency that grew, shows as its ratio moving away from 1. Booleans,
strings and lists are left out.

Run: .venv/bin/python bench/ab.py COMMIT bench/SCRIPT.py [--rounds 3] [-- SCRIPT'S ARGS]
  e.g. .venv/bin/python bench/ab.py 6a3aa05 bench/hostile.py --rounds 4 -- --n 5000
The last line printed is one JSON object.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.common import ROOT, export, report


def numbers(figures: dict[str, Any], prefix: str = "") -> dict[str, float]:
    """Every number of a bench's JSON object, nested keys joined with dots."""
    found: dict[str, float] = {}
    for key, value in figures.items():
        name = f"{prefix}{key}"
        if isinstance(value, dict):
            found.update(numbers(value, f"{name}."))
        elif isinstance(value, int | float) and not isinstance(value, bool):
            found[name] = float(value)
    return found


def run(tree: Path, script: str, args: list[str], timeout: float) -> dict[str, Any]:
    """The bench `script` of `tree`, run with that tree's code; its last line, decoded."""
    if not (tree / script).exists():
        raise SystemExit(f"ab: {script} is not in {tree}")
    started = time.monotonic()
    done = subprocess.run(
        [sys.executable, script, *args],
        cwd=tree,
        env={**os.environ, "PYTHONPATH": str(tree)},
        capture_output=True,
        text=True,
        timeout=timeout,
    )
    lines = done.stdout.strip().splitlines()
    try:
        figures = json.loads(lines[-1]) if lines else None
    except ValueError:
        figures = None
    if done.returncode != 0 or not isinstance(figures, dict):
        raise SystemExit(
            f"ab: {script} in {tree} failed (exit {done.returncode}), its output's end:\n"
            + "\n".join([*lines[-10:], *done.stderr.strip().splitlines()[-20:]])
        )
    figures["wall_secs"] = round(time.monotonic() - started, 1)
    return figures


def compare(this: list[dict[str, float]], base: list[dict[str, float]]) -> dict[str, Any]:
    """Per figure both sides' medians and their ratio, for the figures both sides printed."""
    out: dict[str, Any] = {}
    for name in sorted(set(this[0]) & set(base[0])):
        mine = statistics.median(r[name] for r in this if name in r)
        theirs = statistics.median(r[name] for r in base if name in r)
        ratio = round(mine / theirs, 3) if theirs else None
        out[name] = {"this": round(mine, 4), "base": round(theirs, 4), "ratio": ratio}
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("commit", help="the base: a commit, branch or tag of this repository")
    parser.add_argument("script", help="the bench, as its path in both trees: bench/NAME.py")
    parser.add_argument("--rounds", type=int, default=3, help="runs of each side (default 3)")
    parser.add_argument("--timeout", type=float, default=3600, help="seconds per run")
    argv = sys.argv[1:]
    split = argv.index("--") if "--" in argv else len(argv)
    args = parser.parse_args(argv[:split])
    args.args = argv[split + 1 :]  # the bench's own arguments, after --
    head = subprocess.run(
        ["git", "rev-parse", "--short", "HEAD"], cwd=ROOT, capture_output=True, text=True
    ).stdout.strip()
    base_commit = subprocess.run(
        ["git", "rev-parse", "--short", args.commit],
        cwd=ROOT,
        capture_output=True,
        text=True,
        check=True,
    ).stdout.strip()
    runs: dict[str, list[dict[str, float]]] = {"this": [], "base": []}
    with tempfile.TemporaryDirectory(prefix="bench-ab-") as tmp:
        trees = {"this": ROOT, "base": export(base_commit, Path(tmp))}
        for i in range(args.rounds):
            order = ("this", "base") if i % 2 == 0 else ("base", "this")  # the first is handicapped
            for side in order:
                figures = run(trees[side], args.script, args.args, args.timeout)
                runs[side].append(numbers(figures))
                print(f"round {i + 1} {side}: {json.dumps(figures)[:300]}", flush=True)
    report(
        {
            "bench": "ab",
            "script": args.script,
            "args": args.args,
            "this": f"{head} (working tree)",
            "base": base_commit,
            "rounds": args.rounds,
            "figures": compare(runs["this"], runs["base"]),
        }
    )


if __name__ == "__main__":
    main()
