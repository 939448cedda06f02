"""bench/failover.py's after-upgrade part (issue 52): kill -9 of the home within a second of an
upgrade answering, the replicas cold on the new version (bytes no node compiled before, and
node-b and node-c compile for themselves), timed from the kill to the first tick on the new
home; `--after-upgrade` times with the upgrade waiting for a standby (the default; up to
`[mesh] standby_wait_secs`, 120 s: on a busy machine the replicas' compile can take longer,
and the upgrade then switches without one) and `--after-upgrade-no-wait` times with
`?wait_standby=false` (the replicas then stand by on the version before it). After each
round the killed owner, node-a, starts again and the agent moves back to it (the owner
upgrades: docs/mesh.md).

Figures: `after_upgrade_failover_p95_s` (waiting) and `after_upgrade_no_wait_failover_p95_s`,
next to the goal, lease TTL + 5 s."""

from __future__ import annotations

import argparse
import os
import tempfile
import time
from pathlib import Path
from typing import Any

import httpx

from bench.common import p95
from harness.failover import (
    AGENT,
    NODES,
    FailoverMesh,
    agent_view,
    events,
    first_tick_by,
    move_to,
    publish_component,
    wait_for,
    wait_runner,
)
from harness.fresh_bytes import fresh_bytes
from node.ops.polling import wait_until

OWNER = NODES[0]
COLD = NODES[1:]


def _put(fm: FailoverMesh, component: str, wait: bool) -> httpx.Response:
    with fm[OWNER].client() as client:
        return client.put(
            f"/api/v1/agents/{AGENT}",
            params={} if wait else {"wait_standby": "false"},
            json={"component": component, "tick_interval_ms": 200, "placement": list(NODES)},
            timeout=600,
        )


def _upgrade(fm: FailoverMesh, wasm: Path, version: str, wait: bool) -> None:
    answer = _put(fm, publish_component(fm[OWNER], wasm, version=version), wait)
    assert answer.status_code == 200, answer.text


def _round(fm: FailoverMesh, wasm: Path, root: Path, n: int, wait: bool, ttl: float) -> float:

    version = f"{1 if wait else 2}.{n + 1}.0"
    _upgrade(fm, fresh_bytes(wasm, f"{version}-{os.getpid()}", root), version, wait)
    killed = time.monotonic()
    fm[OWNER].kill()  # at once: within a second of the answer
    held = max(e["seq"] for e in events(fm[COLD[0]]))  # the taker's ticks come after it
    taker = wait_runner(fm, ttl + 120, among=list(COLD))
    took = first_tick_by(fm, taker, held, 120) - killed
    print(
        f"after upgrade to {version} ({'waited' if wait else 'no wait'}): {taker} ticked "
        f"{took:.2f} s after the kill",
        flush=True,
    )
    wait_for(
        lambda: (agent_view(fm[taker]) or {}).get("current", {}).get("version") == version,
        900,
        f"{taker} runs {version}",
    )
    fm[OWNER].start(120)
    move_to(fm, taker, OWNER, 600)  # the owner upgrades (docs/mesh.md)
    return took


def after_upgrade_failovers(args: argparse.Namespace, wasm: Path) -> dict[str, Any]:
    """The rounds of each kind on one mesh whose replicas compile for themselves; their p95s."""

    root = Path(tempfile.mkdtemp(prefix="failover-upgrade-"))
    fm = FailoverMesh(root, lease_ttl=args.lease_ttl, own_compile_cache=COLD).start()
    try:
        component = publish_component(fm[OWNER], wasm)
        # not waiting for the replicas' own compile (minutes on a busy machine): waited below
        answers: list[httpx.Response] = []

        def answered() -> bool:
            answers.append(_put(fm, component, False))
            return answers[-1].status_code != 503

        wait_until(answered, 60, "the deploy (the NATS link up)", 0.5)
        assert answers[-1].status_code == 201, answers[-1].text
        wait_runner(fm, 60, among=[OWNER])
        wait_for(
            lambda: (
                set(((agent_view(fm[OWNER]) or {}).get("placement") or {}).get("candidates", []))
                == set(COLD)
            ),
            600,
            "node-b and node-c compiled 1.0.0",
        )
        waited = [
            _round(fm, wasm, root, n, True, args.lease_ttl) for n in range(args.after_upgrade)
        ]
        no_wait = [
            _round(fm, wasm, root, n, False, args.lease_ttl)
            for n in range(args.after_upgrade_no_wait)
        ]
    finally:
        fm.kill()
    result: dict[str, Any] = {"after_upgrade_goal_s": args.lease_ttl + 5}
    for key, times in (("after_upgrade", waited), ("after_upgrade_no_wait", no_wait)):
        if times:
            result[f"{key}_rounds"] = len(times)
            result[f"{key}_failover_p95_s"] = round(p95(times), 2)
            result[f"{key}_failover_max_s"] = round(max(times), 2)
    return result
