"""Cranelift next to Winch (AGENT_NODE_COMPILER, docs/operations.md "Compilers"), same run.

Each round runs bench/runtime.py's `cold` and `tick` parts in a child, once per compiler (the
order alternating between rounds): a cold start of `--agents` Python-built agents on an empty
compiled cache (every distinct component compiled in a child, as a node does), the same start
from the cache it filled, and hello's tick, bare and through the runtime. The figures are the
medians over the rounds; `compile_speedup` is Cranelift's cold start ÷ Winch's, `tick_slowdown`
Winch's bare tick ÷ Cranelift's (how much slower the code Winch made runs).

Run: .venv/bin/python bench/compilers.py [--agents 4] [--rounds 3] [--seconds 2]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
COMPILERS = ("cranelift", "winch")
FIGURES = ("cold_start_s", "cached_start_s", "bare_tick_us", "runtime_tick_us")


def one_run(compiler: str, agents: int, seconds: float) -> dict[str, float]:
    env = {**os.environ, "AGENT_NODE_COMPILER": compiler}
    command = [sys.executable, str(ROOT / "bench" / "runtime.py"), "--parts", "cold,tick"]
    command += ["--agents", str(agents), "--seconds", str(seconds)]
    run = subprocess.run(command, env=env, capture_output=True, text=True, check=True, cwd=ROOT)
    figures = json.loads(run.stdout.strip().splitlines()[-1])
    return {key: float(figures[key]) for key in FIGURES}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--agents", type=int, default=4)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--seconds", type=float, default=2.0)
    args = parser.parse_args()
    runs: dict[str, list[dict[str, float]]] = {name: [] for name in COMPILERS}
    for round_ in range(args.rounds):
        order = COMPILERS if round_ % 2 == 0 else COMPILERS[::-1]
        for name in order:
            runs[name].append(one_run(name, args.agents, args.seconds))
            print(f"round {round_ + 1} {name}: {runs[name][-1]}", flush=True)
    median = {
        name: {key: statistics.median(r[key] for r in runs[name]) for key in FIGURES}
        for name in COMPILERS
    }
    cranelift, winch = median["cranelift"], median["winch"]
    result: dict[str, object] = {"bench": "compilers", "agents": args.agents, "rounds": args.rounds}
    for name in COMPILERS:
        result.update({f"{name}_{key}": round(value, 2) for key, value in median[name].items()})
    result["compile_speedup"] = round(cranelift["cold_start_s"] / winch["cold_start_s"], 2)
    result["tick_slowdown"] = round(winch["bare_tick_us"] / cranelift["bare_tick_us"], 2)
    result["runtime_tick_slowdown"] = round(
        winch["runtime_tick_us"] / cranelift["runtime_tick_us"], 2
    )
    print(json.dumps(result))


if __name__ == "__main__":
    main()
