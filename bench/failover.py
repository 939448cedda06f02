"""Failover of a placed agent (issue 36): kill -9 of its home under load, again and again.

Three real nodes on a real 3-server nats-server cluster (harness/failover.py), the
counter agent (agents/counter: a tick every 200 ms, its count in state) placed on all three, and
findings about it posted without pause to whichever node runs it (each one the API answered 201
is acknowledged). Then `--kills` times: the home is killed (SIGKILL), the time is taken from the
kill to the first tick the new home journals (its `tick N` log envelope, read from its journal),
and the killed node is started again (it must come back a replica). Last, a planned move of the
agent to another node, timed from the request to the first tick on the target.

Figures: the failover times (median, p95) next to the lease TTL of the run; acknowledged
findings missing from the final journal (must be 0); envelopes of the final journal written by
a node that was not its home at that seq (must be 0: a fenced node wrote nothing that stayed);
whether the counter's state went on 1, 2, 3, ... across every failover; the node copies equal at
the end; the planned move's time.

Run: .venv/bin/python bench/failover.py [--kills 10] [--lease-ttl 3]
The last line printed is one JSON object with the figures.
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

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from harness.failover import (  # noqa: E402
    AGENT,
    FailoverMesh,
    FindingLoad,
    agent_view,
    counts,
    deploy,
    events,
    publish_component,
    same_journals,
    ticks,
    wait_for,
    wait_runner,
)
from node.ops.polling import wait_until  # noqa: E402


def built_counter() -> Path:
    run = subprocess.run(
        [sys.executable, str(ROOT / "scripts" / "build-agents"), "--json", "counter"],
        capture_output=True,
        text=True,
        check=True,
        timeout=900,
    )
    return Path(json.loads(run.stdout)["counter"])


def first_tick_by(fm: FailoverMesh, node: str, after_seq: int, timeout: float) -> float:
    """Wait until `node`'s journal holds a tick it wrote after `after_seq`; monotonic then."""

    def ticked() -> bool:
        later = [e for e in events(fm[node]) if e["seq"] > after_seq]
        return any(origin == node for _, origin in ticks(later))

    wait_until(ticked, timeout, f"a tick by {node}", interval=0.05, retry_on=(Exception,))
    return time.monotonic()


def written_by_non_home(journal: list[dict]) -> int:
    """Envelopes whose origin is not the journal's home at their seq (handoffs and takeovers
    followed): what a fenced node would have got in."""
    home, wrong = journal[0]["origin"], 0
    for e in journal:
        if e["type"] == "journal.takeover":
            home = e["origin"]
        if e["origin"] != home:
            wrong += 1
        if e["type"] == "journal.handoff":
            home = e["data"]["to"]
    return wrong


def p95(values: list[float]) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(0.95 * (len(ordered) - 1)))]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--kills", type=int, default=10)
    parser.add_argument("--lease-ttl", type=float, default=3.0)
    args = parser.parse_args()
    os.environ.setdefault("AGENT_NODE_COMPILED_CACHE", str(ROOT / ".cache" / "wasmtime"))
    wasm = built_counter()
    root = Path(tempfile.mkdtemp(prefix="failover-bench-"))
    fm = FailoverMesh(root, lease_ttl=args.lease_ttl).start()
    failovers: list[float] = []
    back = ""
    try:
        component = publish_component(fm["node-a"], wasm)
        deployed = deploy(fm["node-a"], component, ["node-a", "node-b", "node-c"])
        assert deployed.status_code == 201, deployed.text
        home = wait_runner(fm, 30)
        with FindingLoad(fm) as load:
            wait_for(lambda: len(ticks(events(fm[home]))) >= 5, 30, "first ticks")
            for kill in range(args.kills):
                others = [n for n in fm.names if n != home]
                head = max(e["seq"] for e in events(fm[others[0]]))
                killed = time.monotonic()
                fm[home].kill()
                new_home = wait_runner(fm, args.lease_ttl + 30, among=others)
                ticked = first_tick_by(fm, new_home, head, 30)
                failovers.append(ticked - killed)
                print(
                    f"kill {kill + 1}: {home} -> {new_home} in {ticked - killed:.2f} s", flush=True
                )
                fm[home].start(60)  # back: a replica now
                back = home
                wait_for(
                    lambda b=back: (agent_view(fm[b]) or {}).get("status") == "replica",
                    60,
                    f"{back} a replica",
                )
                home = new_home
            # the node that was neither the home nor just started again (its advert is fresh)
            target = next(n for n in fm.names if n not in (home, back))
            head = max(e["seq"] for e in events(fm[target]))
            started = time.monotonic()
            with fm[home].client() as client:
                moved = client.post(f"/api/v1/agents/{AGENT}/move", json={"to": target})
            assert moved.status_code == 200, moved.text
            planned = first_tick_by(fm, target, head, 30) - started
            home = target
        with fm[home].client() as client:
            client.post(f"/api/v1/agents/{AGENT}/stop")
        journal = same_journals(fm, list(fm.names), timeout=60)
        titles = {e["data"].get("title") for e in journal if e["type"] == "finding"}
        counted = counts(journal)
        result = {
            "bench": "failover",
            "kills": len(failovers),
            "lease_ttl_s": args.lease_ttl,
            "failover_median_s": round(statistics.median(failovers), 2),
            "failover_p95_s": round(p95(failovers), 2),
            "failover_max_s": round(max(failovers), 2),
            "lost_acknowledged": len(set(load.acknowledged) - titles),
            "acknowledged": len(load.acknowledged),
            "refused_during_moves": load.refused,
            "fenced_writes": written_by_non_home(journal),
            "counter_contiguous": counted == list(range(1, len(counted) + 1)),
            "journals_equal": True,
            "planned_move_s": round(planned, 2),
        }
    finally:
        fm.kill()
    print(json.dumps(result))


if __name__ == "__main__":
    main()
