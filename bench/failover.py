"""Failover of a placed agent: kill -9 of its home under load, again and again; planned moves;
takeovers on nodes that never ran the component; the same with a hostile member attacking the
leases throughout (issues 36, 43, 44); a deploy right after a publish (issue 52).

Three real nodes (harness/failover.py), every one consenting to host the counter agent
(agents/counter: a tick every 200 ms, its count in state) placed on all three, and findings about
it posted without pause to whichever node runs it (each one the API answered 201 is
acknowledged). Then `--kills` times: the home is killed (SIGKILL), the time is taken from the
kill to the first tick the new home journals, and the killed node is started again (it must
come back a replica). Then `--moves` planned moves in a row, each to the next node, timed from
the request to the first tick on the target; a move "bounced" when a takeover follows it.
`--cold` times, on a fresh mesh whose nodes share no compile cache: the replicas compile the
component when they learn of the placement, the home is killed, and the first tick on the new
home is timed; so are the publish on the fresh mesh (its one compile) and the deploy right after
it (`deploy_after_publish_s`: it compiles nothing again). Last, with `--hostile-kills`, the kills
again on one nats-server with the generated permissions, while node-x (a member with its own
NATS user and key, outside the agent's set) deletes and writes junk on the home's lease key and
junk and claims on its own every 0.5 s throughout: `attack_takeovers` counts takeovers beyond one
per kill (must be 0). With `--after-upgrade`, kill -9 of the home within a second of an upgrade
answering, the replicas cold on the new version (bench/failover_upgrade.py). With `--attack-kills`
(issue 51), the kills again with node-x in the agent's placement set, sending every 0.5 s double
takeovers at the head with an `agent.placed` of its own after them, a takeover with an
`agent.retired`, an `agent.placed` with its own component, a secret domain and a set without the
owner, and the pair at seq 2 with an `agent.halted` (harness/hostile.py `MoveAttack`):
`attack_takeovers` (node-x's moves that took effect, and takeovers beyond one per kill) and
`attack_definitions` (definition, set or run changes signed by another than the owner, node-a, that
took effect) must be 0. `--attack-moves N` adds a planned move after each of the first N
kills (or rounds), to a node other than the one just restarted, and `--attack-flood` has node-x
also keep a claim of a later epoch live in the lease log throughout (harness/hostile.py
`ClaimFlood`): the soak of kills, moves, double takeovers, definition changes and the claim
flood together; a move's target waits about a TTL for the claim, and nothing more may follow.

Figures: the failover times (median, p95) next to the lease TTL; acknowledged findings missing
from the final journal (must be 0); envelopes written by a node that was not the home at that
seq (must be 0: a fenced node wrote nothing that stayed); whether the counter went on 1, 2, 3,
...; the planned moves' median and the bounced ones (must be 0); the cold takeovers' p95 (must
be within the lease TTL + 5 s).

Run: .venv/bin/python bench/failover.py [--kills 10] [--moves 20] [--cold 3] [--hostile-kills 10]
     [--after-upgrade 5] [--after-upgrade-no-wait 5] [--attack-kills 10] [--attack-moves N]
     [--attack-flood]
The last line printed is one JSON object with the figures.
"""

from __future__ import annotations

import argparse
import base64
import contextlib
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import httpx

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from bench.common import p95  # noqa: E402
from eventstore.envelope import digest_of  # noqa: E402
from harness.failover import (  # noqa: E402
    AGENT,
    NODES,
    FailoverMesh,
    FindingLoad,
    agent_view,
    counts,
    deploy,
    events,
    first_tick_by,
    publish_component,
    same_journals,
    ticks,
    wait_for,
    wait_runner,
)
from harness.hostile import (  # noqa: E402
    ClaimFlood,
    Head,
    HostileMember,
    LeaseAttack,
    MoveAttack,
)
from node.ops.polling import DeadlineExceeded  # noqa: E402
from node.runtime.compiled_cache import COMPILED_CACHE_ENV  # noqa: E402

# node-x's claims (--attack-flood): an epoch no journal here reaches, live in the lease log
# throughout, never followed by a takeover; each handoff's target waits about a TTL for it
FLOOD_EPOCH = 1000


def built_counter() -> Path:
    run = subprocess.run(
        [sys.executable, str(ROOT / "scripts" / "build-agents"), "--json", "counter"],
        capture_output=True,
        text=True,
        check=True,
        timeout=900,
    )
    return Path(json.loads(run.stdout)["counter"])


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


def kills_and_moves(args: argparse.Namespace, hostile: bool) -> dict[str, Any]:
    wasm = built_counter()
    root = Path(tempfile.mkdtemp(prefix="failover-bench-"))
    names = (*NODES, "node-x") if hostile else NODES
    fm = FailoverMesh(
        root, names, lease_ttl=args.lease_ttl, members=hostile, without_consent=("node-x",)
    ).start()
    kills = args.hostile_kills if hostile else args.kills
    failovers: list[float] = []
    moves: list[float] = []
    home, back = "node-a", ""
    attack = contextlib.nullcontext()
    if hostile:
        member = HostileMember(fm.cluster.urls[0], root / "mesh" / "node-x" / "data")
        attack = LeaseAttack(member, AGENT, lambda: home, lambda: epoch_of(fm, home))
    try:
        component = publish_component(fm["node-a"], wasm)
        deployed = deploy(fm["node-a"], component, list(NODES))
        assert deployed.status_code == 201, deployed.text
        home = wait_runner(fm, 30, among=list(NODES))
        with attack, FindingLoad(fm) as load:
            wait_for(lambda: len(ticks(events(fm[home]))) >= 5, 30, "first ticks")
            for kill in range(kills):
                new_home, took = kill_home(fm, home, args.lease_ttl)
                failovers.append(took)
                print(f"kill {kill + 1}: {home} -> {new_home} in {took:.2f} s", flush=True)
                fm[home].start(60)  # back: a replica now
                back = home
                wait_for(
                    lambda b=back: (agent_view(fm[b]) or {}).get("status") == "replica",
                    60,
                    f"{back} a replica",
                )
                home = new_home
            for move in range(0 if hostile else args.moves):
                # the next node, never the one just started again on the first move
                target = next(n for n in NODES if n not in (home, back))
                back = ""
                moves.append(planned_move(fm, home, target))
                print(f"move {move + 1}: {home} -> {target} in {moves[-1]:.2f} s", flush=True)
                home = target
        journal = same_journals(fm, list(NODES), timeout=60)  # the common part: it still runs
    finally:
        fm.kill()
    titles = {e["data"].get("title") for e in journal if e["type"] == "finding"}
    counted = counts(journal)
    takeovers = [i for i, e in enumerate(journal) if e["type"] == "journal.takeover"]
    handoffs = [i for i, e in enumerate(journal) if e["type"] == "journal.handoff"]
    result: dict[str, Any] = {
        "kills": len(failovers),
        "failover_median_s": round(statistics.median(failovers), 2),
        "failover_p95_s": round(p95(failovers), 2),
        "failover_max_s": round(max(failovers), 2),
        "lost_acknowledged": len(set(load.acknowledged) - titles),
        "acknowledged": len(load.acknowledged),
        "refused_during_moves": load.refused,
        "fenced_writes": written_by_non_home(journal),
        "counter_contiguous": counted == list(range(1, len(counted) + 1)),
        "journals_equal": True,
    }
    if hostile:
        result["attack_takeovers"] = len(takeovers) - len(failovers)
        result["attack_rounds"] = attack.rounds  # type: ignore[union-attr]
    else:
        first_move = handoffs[0] if handoffs else len(journal)
        result |= {
            "moves": len(moves),
            "planned_move_median_s": round(statistics.median(moves), 2) if moves else None,
            "bounced_moves": len([i for i in takeovers if i > first_move]),
        }
    return result


def kill_home(fm: FailoverMesh, home: str, lease_ttl: float) -> tuple[str, float]:
    """Kill -9 of `home`: the node that takes the agent over, and the time from the kill to
    the first tick it journals."""
    others = [n for n in NODES if n != home]
    head = max(e["seq"] for e in events(fm[others[0]]))
    killed = time.monotonic()
    fm[home].kill()
    new_home = wait_runner(fm, lease_ttl + 30, among=others)
    return new_home, first_tick_by(fm, new_home, head, 30) - killed


def planned_move(fm: FailoverMesh, home: str, target: str) -> float:
    """A move of the agent from `home` to `target` once the target is ready to take it (what
    the console's Move offers: its advert), timed from the request to its first tick there."""
    wait_for(
        lambda: target in (agent_view(fm[home])["placement"] or {}).get("candidates", []),
        30,
        f"{target} ready to take it",
    )
    head = max(e["seq"] for e in events(fm[target]))
    started = time.monotonic()
    with fm[home].client() as client:
        moved = client.post(f"/api/v1/agents/{AGENT}/move", json={"to": target})
    assert moved.status_code == 200, moved.text
    return first_tick_by(fm, target, head, 30) - started


def cold_failover(args: argparse.Namespace) -> tuple[float, float, float]:
    """One fresh mesh whose nodes compile for themselves: the time from the home's kill to the
    first tick on a node that never ran the component; also how long the publish (its one
    compile) and the deploy right after it took: (takeover, publish, deploy) seconds."""
    saved = os.environ.pop(COMPILED_CACHE_ENV, None)
    root = Path(tempfile.mkdtemp(prefix="failover-cold-"))
    fm = FailoverMesh(root, lease_ttl=args.lease_ttl).start()
    try:
        started = time.monotonic()
        component = publish_component(fm["node-a"], built_counter())
        published = time.monotonic()
        deployed = deploy(fm["node-a"], component, list(NODES))
        deploy_s = time.monotonic() - published
        assert deployed.status_code == 201, deployed.text
        print(
            f"cold publish in {published - started:.2f} s, the deploy after it in {deploy_s:.2f} s",
            flush=True,
        )
        assert wait_runner(fm, 120) == "node-a"
        wait_for(
            lambda: (
                set((agent_view(fm["node-a"])["placement"] or {}).get("candidates", []))
                == set(NODES[1:])
            ),
            300,
            "node-b and node-c compiled it",
        )
        head = max(e["seq"] for e in events(fm["node-b"]))
        killed = time.monotonic()
        fm["node-a"].kill()
        new_home = wait_runner(fm, args.lease_ttl + 60, among=list(NODES[1:]))
        took = first_tick_by(fm, new_home, head, 60) - killed
        print(f"cold takeover by {new_home} in {took:.2f} s", flush=True)
        return took, published - started, deploy_s
    finally:
        fm.kill()
        if saved is not None:
            os.environ[COMPILED_CACHE_ENV] = saved


OWNER_DECISIONS = frozenset(
    {"agent.placed", "agent.retired", "agent.halted", "agent.unhalted", "agent.owner_handed"}
)


def journal_head(fm: FailoverMesh, known: dict[str, int]) -> Head | None:
    """The agent's journal head as the first honest node that answers holds it (the member
    reads the stream anyway; this is quicker); `known`: each node's head seen last."""
    for name in NODES:
        view = agent_view(fm[name])
        placement = (view or {}).get("placement") or {}
        if not placement.get("home"):
            continue
        try:
            with fm[name].client() as client:
                since = max(0, known.get(name, 1) - 1)
                got = client.get(
                    "/api/v1/sync/envelopes/pushed",
                    params={"agent": AGENT, "since": since, "limit": 1000},
                    timeout=5,
                ).json()["envelopes"]
                first = client.get(
                    "/api/v1/sync/envelopes/pushed",
                    params={"agent": AGENT, "since": 0, "limit": 1},
                    timeout=5,
                ).json()["envelopes"]
        except (httpx.HTTPError, KeyError, ValueError):
            continue
        if not got or not first:
            continue
        known[name] = got[-1]["seq"]
        return (
            got[-1]["seq"],
            payload_hash(got[-1]),
            int(placement.get("epoch", 0)),
            str(placement["home"]),
            payload_hash(first[0]),
        )
    return None


def payload_hash(envelope: dict[str, Any]) -> str:
    return "sha256:" + digest_of(base64.b64decode(envelope["payload"])).hex()


def diverging_nodes(fm: FailoverMesh) -> list[str]:
    """The honest nodes whose copy does not reach the furthest one's within 60 s (their copy
    holds an envelope the others refused: they stop there), reported instead of waited for."""
    try:
        same_journals(fm, list(NODES), timeout=60)
        return []
    except DeadlineExceeded:
        lengths = {n: len(events(fm[n])) for n in NODES}
        furthest = max(lengths.values())
        return sorted(n for n, held in lengths.items() if held < furthest // 2)


def wait_replica(fm: FailoverMesh, node: str) -> None:
    def replica() -> bool:
        return (agent_view(fm[node]) or {}).get("status") == "replica"

    wait_for(replica, 60, f"{node} a replica")


def move_attack(args: argparse.Namespace) -> dict[str, Any]:
    """`--attack-kills` kills of the home while node-x, a member of the agent's set, sends
    double takeovers and definition changes throughout (MoveAttack): what took effect."""
    member_name = "node-x"
    root = Path(tempfile.mkdtemp(prefix="failover-attack-"))
    fm = FailoverMesh(
        root,
        (*NODES, member_name),
        lease_ttl=args.lease_ttl,
        members=True,
        without_consent=(member_name,),
    ).start()
    member = HostileMember(fm.cluster.urls[0], root / "mesh" / member_name / "data")
    known: dict[str, int] = {}
    attack = MoveAttack(member, AGENT, lambda: journal_head(fm, known))
    flood: ClaimFlood | contextlib.nullcontext[None] = contextlib.nullcontext()
    if args.attack_flood:
        flood = ClaimFlood(member, AGENT, FLOOD_EPOCH)
    failovers: list[float] = []
    moves: list[float] = []
    try:
        component = publish_component(fm["node-a"], built_counter())
        deployed = deploy(fm["node-a"], component, [*NODES, member_name])
        assert deployed.status_code == 201, deployed.text
        home = wait_runner(fm, 30, among=list(NODES))
        with attack, flood, FindingLoad(fm) as load:
            wait_for(lambda: len(ticks(events(fm[home]))) >= 5, 30, "first ticks")
            for round_ in range(max(args.attack_kills, args.attack_moves)):
                back = ""
                if round_ < args.attack_kills:
                    new_home, took = kill_home(fm, home, args.lease_ttl)
                    failovers.append(took)
                    print(
                        f"attacked kill {round_ + 1}: {home} -> {new_home} in {took:.2f} s "
                        f"({attack.sent} attack messages so far)",
                        flush=True,
                    )
                    fm[home].start(60)
                    wait_replica(fm, home)
                    home, back = new_home, home
                if round_ < args.attack_moves:
                    target = next(n for n in NODES if n not in (home, back))
                    moves.append(planned_move(fm, home, target))
                    print(
                        f"attacked move {round_ + 1}: {home} -> {target} in {moves[-1]:.2f} s",
                        flush=True,
                    )
                    home = target
        diverged = diverging_nodes(fm)
        journal = same_journals(fm, [n for n in NODES if n not in diverged], timeout=60)
    finally:
        fm.kill()
    titles = {e["data"].get("title") for e in journal if e["type"] == "finding"}
    journal_moves = [e for e in journal if e["type"] in ("journal.takeover", "journal.handoff")]
    takeovers = [e for e in journal_moves if e["type"] == "journal.takeover"]
    decisions = [e for e in journal if e["type"] in OWNER_DECISIONS]
    handoffs = [e for e in journal_moves if e["type"] == "journal.handoff"]
    return {
        "kills": len(failovers),
        "failover_median_s": round(statistics.median(failovers), 2) if failovers else None,
        "failover_p95_s": round(p95(failovers), 2) if failovers else None,
        "failover_max_s": round(max(failovers), 2) if failovers else None,
        "within_ttl_plus_5": not failovers or p95(failovers) <= args.lease_ttl + 5,
        "moves": len(moves),
        "planned_move_median_s": round(statistics.median(moves), 2) if moves else None,
        "planned_move_p95_s": round(p95(moves), 2) if moves else None,
        "handoffs": len(handoffs),
        "claims": flood.sent if isinstance(flood, ClaimFlood) else 0,
        "lost_acknowledged": len(set(load.acknowledged) - titles),
        "acknowledged": len(load.acknowledged),
        "fenced_writes": written_by_non_home(journal),
        "attack_messages": attack.sent,
        "attack_takeovers": len([e for e in journal_moves if e["origin"] == member_name])
        + max(0, len(takeovers) - len(failovers)),
        "attack_definitions": len([e for e in decisions if e["origin"] != "node-a"]),
        "journals_equal": not diverged,
        "diverged": diverged,  # honest nodes whose copy stopped short of the others'
    }


def epoch_of(fm: FailoverMesh, node: str) -> int:
    view = agent_view(fm[node]) or {}
    return int((view.get("placement") or {}).get("epoch", 0))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--kills", type=int, default=10)
    parser.add_argument("--moves", type=int, default=20)
    parser.add_argument("--cold", type=int, default=3)
    parser.add_argument("--hostile-kills", type=int, default=10)
    parser.add_argument("--attack-kills", type=int, default=10)
    parser.add_argument("--attack-moves", type=int, default=0)  # planned moves, between kills
    parser.add_argument("--attack-flood", action="store_true")  # and node-x's claim flood
    parser.add_argument("--lease-ttl", type=float, default=3.0)
    parser.add_argument("--after-upgrade", type=int, default=5)  # bench/failover_upgrade.py
    parser.add_argument("--after-upgrade-no-wait", type=int, default=5)
    args = parser.parse_args()
    os.environ.setdefault(COMPILED_CACHE_ENV, str(ROOT / ".cache" / "wasmtime"))
    result: dict[str, Any] = {"bench": "failover", "lease_ttl_s": args.lease_ttl}
    if args.kills or args.moves:
        result |= kills_and_moves(args, hostile=False)
    colds = [cold_failover(args) for _ in range(args.cold)]
    if colds:
        result["cold_failovers"] = len(colds)
        result["cold_failover_p95_s"] = round(p95([c[0] for c in colds]), 2)
        result["publish_cold_s"] = round(statistics.median(c[1] for c in colds), 2)
        result["deploy_after_publish_s"] = round(statistics.median(c[2] for c in colds), 2)
    if args.hostile_kills:
        result["hostile"] = kills_and_moves(args, hostile=True)
    if args.after_upgrade or args.after_upgrade_no_wait:
        from bench.failover_upgrade import after_upgrade_failovers

        result |= after_upgrade_failovers(args, built_counter())
    if args.attack_kills or args.attack_moves:
        result["attack"] = move_attack(args)
    print(json.dumps(result))


if __name__ == "__main__":
    main()
