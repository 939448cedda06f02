"""Three real nodes on a real 3-server nats-server cluster, with placed agents (issue 36).

The tests and bench/failover.py share it: the mesh (harness/mesh.py's Mesh on a
NatsCluster of harness/nats.py), the counter agent deployed on node-a with a placement
set, and reads of what each node's copy of the agent's journal says (who wrote which tick).
"""

from __future__ import annotations

import base64
import threading
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import httpx

from eventstore.envelope import decode_event
from harness.mesh import SYNC_TUNING, Mesh
from harness.nats import MeshUsers, NatsCluster, nats_mesh_toml, use_nats_user
from harness.node import PUBLISH_TOKEN, NodeProcess, auth
from node.ops.polling import wait_until
from node.runtime.compiled_cache import COMPILED_CACHE_ENV

LEASE_TTL_SECS = 4.0
NODES = ("node-a", "node-b", "node-c")
AGENT = "counter"
# a secrets domain node-a and node-b serve and node-c does not (no grant domains: never chosen)
SECRETS = '\n[secrets.payments]\napi_key = "pay-0123456789abcdef"\n'
MAX_BODY = 200


def hosting_toml(grants: bool = True) -> str:
    """Every node's consent to host the agents the tests and the bench place (docs/mesh.md,
    "Consent"): the counter (with the payments domain where the node serves it), the task
    worker, the payer with its gated `spend`, and `billing` (docs/mesh.md's worked example:
    node-a's agent with the payments domain). The entries with a secret domain name their owner,
    node-a, which deploys them (issue 51)."""
    domains = '[hosting.grants]\ndomains = ["payments"]\n' if grants else ""
    billing = f'\n[[hosting]]\nagent = "billing"\nowner = "{NODES[0]}"\n{domains}' if grants else ""
    return (
        f'\n[[hosting]]\nagent = "{AGENT}"\nowner = "{NODES[0]}"\n{domains}{billing}'
        '\n[[hosting]]\nagent = "worker"\n'
        '\n[[hosting]]\nagent = "payer"\n[hosting.capabilities]\nspend = true\n'
        "[hosting.approval]\nspend = true\n"
    )


def failover_toml(urls: list[str], lease_ttl: float = LEASE_TTL_SECS, replicas: int = 3) -> str:
    return (
        SYNC_TUNING
        + SECRETS
        + nats_mesh_toml(urls, replicas=replicas, heads_interval=0.3)
        + f"lease_ttl_secs = {lease_ttl}\nadvert_interval_secs = 1.0\n"
    )


class FailoverMesh:
    """The cluster and the nodes of one test; everything SIGKILLed at the end.

    `members`: one nats-server with the mesh's generated permissions, each node on its own
    NATS user (as a real mesh runs; docs/mesh.md "Generated permissions"), instead of an open
    3-server cluster. `without_consent`: nodes whose operator consents to host nothing;
    `own_compile_cache`: nodes that do not share the run's compile cache (a cold node);
    `mesh_toml`: more `[mesh]` settings."""

    def __init__(
        self,
        root: Path,
        names: tuple[str, ...] = NODES,
        *,
        without_secrets: tuple[str, ...] = (),
        without_consent: tuple[str, ...] = (),
        lease_ttl: float = LEASE_TTL_SECS,
        extra_toml: str = "",
        members: bool = False,
        own_compile_cache: tuple[str, ...] = (),
        mesh_toml: str = "",
    ) -> None:
        self.users = MeshUsers(root / "users", list(names)) if members else None
        self.cluster = self.users.cluster if self.users else NatsCluster(root / "nats", 3)
        self.mesh = Mesh(
            root / "mesh",
            list(names),
            extra=failover_toml(self.cluster.urls, lease_ttl, 1 if members else 3) + mesh_toml,
        )
        for name in names:  # tables after every other (consent, actions)
            path = self.mesh.paths[name]
            text = path.read_text()
            if name in without_secrets:
                text = text.replace(SECRETS, "\n")
            consent = hosting_toml(name not in without_secrets)
            path.write_text(text + (consent if name not in without_consent else "") + extra_toml)
            if members:
                use_nats_user(path, name)
            self.mesh.nodes[name] = NodeProcess(path)
            if name in own_compile_cache:  # compiles for itself, in its data dir
                self.mesh.nodes[name].env_without = (COMPILED_CACHE_ENV,)
        self.names = names

    def __getitem__(self, name: str) -> NodeProcess:
        return self.mesh[name]

    def start(self) -> FailoverMesh:
        if self.users is not None:
            self.users.start()
        else:
            self.cluster.start()
        with ThreadPoolExecutor(len(self.names)) as pool:
            list(pool.map(lambda n: self.mesh[n].start(60), self.names))
        return self

    def kill(self) -> None:
        self.mesh.kill_all()
        if self.users is not None:
            self.users.kill()
        else:
            self.cluster.kill()

    def alive(self) -> list[str]:
        return [n for n in self.names if (p := self.mesh[n].proc) is not None and p.poll() is None]


def publish_component(
    node: NodeProcess, wasm: Path, package: str = AGENT, version: str = "1.0.0"
) -> str:
    with node.client() as client:
        published = client.post(
            "/api/v1/registry/packages",
            data={"id": package, "version": version},
            files={"wasm": ("a.wasm", wasm.read_bytes())},
            headers=auth(PUBLISH_TOKEN),
            timeout=120,
        )
    assert published.status_code == 201, published.text
    return f"registry:{package}@{version}"


def deploy(
    node: NodeProcess, component: str, placement: list[str], agent: str = AGENT, **body: Any
) -> httpx.Response:
    """The PUT's answer; asked again while the node's NATS link is still coming up (a 503:
    not connected, or a fresh cluster's store not answering yet), for up to 30 s, as a script
    deploying right after a start would."""
    answers: list[httpx.Response] = []

    def answered() -> bool:
        with node.client() as client:
            answers.append(
                client.put(
                    f"/api/v1/agents/{agent}",
                    json={"component": component, "tick_interval_ms": 200, "placement": placement}
                    | body,
                    timeout=120,
                )
            )
        last = answers[-1]
        return last.status_code != 503

    wait_until(answered, 30, f"{node.config.node.name} takes the deploy (its NATS link up)", 0.2)
    return answers[-1]


def agent_view(node: NodeProcess, agent: str = AGENT) -> dict[str, Any] | None:
    try:
        with node.client() as client:
            r = client.get(f"/api/v1/agents/{agent}", timeout=5)
    except httpx.HTTPError:
        return None
    return r.json() if r.status_code == 200 else None


def runner(fm: FailoverMesh, among: list[str] | None = None, agent: str = AGENT) -> str | None:
    """The node that runs the agent now, by its own word: it holds the lease and its
    instance is up. None when none does (or more than one: never expected)."""
    found = []
    for name in among or fm.alive():
        view = agent_view(fm[name], agent)
        placement = (view or {}).get("placement") or {}
        if view and placement.get("lease") and view["status"] in ("running", "idle"):
            found.append(name)
    return found[0] if len(found) == 1 else None


def wait_runner(
    fm: FailoverMesh, timeout: float, among: list[str] | None = None, agent: str = AGENT
) -> str:
    holder: list[str] = []

    def found() -> bool:
        name = runner(fm, among, agent)
        if name is not None:
            holder.append(name)
        return name is not None

    wait_until(found, timeout, "a node runs the agent")
    return holder[-1]


def move_to(fm: FailoverMesh, home: str, to: str, timeout: float = 60) -> None:
    """The agent moved from `home` to `to` once `to` is ready to take it (an upgrade is the
    owner's decision: a test that took the agent over moves it back to its owner first)."""
    wait_until(
        lambda: to in ((agent_view(fm[home]) or {}).get("placement") or {}).get("candidates", []),
        timeout,
        f"{to} ready to take it",
    )
    with fm[home].client() as client:
        answer = client.post(f"/api/v1/agents/{AGENT}/move", json={"to": to}, timeout=30)
    assert answer.status_code == 200, answer.text
    wait_runner(fm, 30, among=[to])


def events(node: NodeProcess, agent: str = AGENT) -> list[dict[str, Any]]:
    """Every envelope of the node's copy of the agent's journal: seq, type, origin, data."""
    out: list[dict[str, Any]] = []
    with node.client() as client:
        while True:
            r = client.get(
                "/api/v1/sync/envelopes/pushed",
                params={"agent": agent, "since": len(out), "limit": 1000},
            )
            assert r.status_code == 200, r.text
            page = r.json()["envelopes"]
            for e in page:
                event = decode_event(base64.b64decode(e["payload"]))
                out.append(
                    {
                        "seq": e["seq"],
                        "type": event.type,
                        "origin": event.origin,
                        "data": event.data,
                        "signature": e["signature"],
                    }
                )
            if len(page) < 1000:
                return out


def ticks(journal: list[dict[str, Any]]) -> list[tuple[int, str]]:
    """(count, node) of each `tick N` log line of the counter, in journal order."""
    out = []
    for e in journal:
        message = str(e["data"].get("message", "")) if e["type"] == "log" else ""
        if message.startswith("tick "):
            out.append((int(message.split()[1]), e["origin"]))
    return out


def first_tick_by(fm: FailoverMesh, node: str, after_seq: int, timeout: float) -> float:
    """Wait until `node`'s journal holds a tick it wrote after `after_seq`; monotonic then."""

    def ticked() -> bool:
        later = [e for e in events(fm[node]) if e["seq"] > after_seq]
        return any(origin == node for _, origin in ticks(later))

    wait_until(ticked, timeout, f"a tick by {node}", interval=0.05, retry_on=(Exception,))
    return time.monotonic()


def counts(journal: list[dict[str, Any]]) -> list[int]:
    """The counter's state, each value it set (`state.set` of `count`), in journal order: it
    goes on 1, 2, 3, ... across moves. (A `tick N` log line may be missing where a home died
    between the tick's two writes: never acknowledged, so not kept; the count itself is.)"""
    return [
        int(e["data"]["value"])
        for e in journal
        if e["type"] == "state.set" and e["data"].get("key") == "count"
    ]


def wait_for(check: Callable[[], Any], timeout: float, what: str) -> Any:
    result: list[Any] = []

    def done() -> bool:
        value = check()
        if value:
            result.append(value)
        return bool(value)

    wait_until(done, timeout, what, retry_on=(httpx.HTTPError,))
    return result[-1]


def same_journals(fm: FailoverMesh, nodes: list[str], timeout: float = 30) -> list[dict[str, Any]]:
    """Wait until every node in `nodes` holds at least as much of the agent's journal as the
    furthest of them held when asked, the same envelopes in the same order; the part all of them
    hold. An agent still running keeps writing meanwhile (the counter: two events a tick), so
    whole copies read one after the other rarely end at the same seq: the common part counts."""
    target = max(len(events(fm[n])) for n in nodes)

    def same() -> list[dict[str, Any]] | None:
        copies = [events(fm[n]) for n in nodes]
        held = min(len(c) for c in copies)
        if held < target:
            return None
        keys = [[(e["seq"], e["signature"]) for e in c[:held]] for c in copies]
        return copies[0][:held] if all(k == keys[0] for k in keys) else None

    try:
        journal: list[dict[str, Any]] = wait_for(same, timeout, f"identical journals on {nodes}")
        return journal
    except Exception:
        for n in nodes:  # what differs, for the failure's report
            copy = events(fm[n])
            print(n, len(copy), [(e["seq"], e["type"], e["origin"]) for e in copy[-5:]])
        raise


class FindingLoad:
    """Findings about the agent posted to whichever node runs it, in a thread: each one the
    API acknowledged (201) is counted, to be looked for in the journals afterwards."""

    def __init__(self, fm: FailoverMesh) -> None:
        self.fm = fm
        self.acknowledged: list[str] = []
        self.refused = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def __enter__(self) -> FindingLoad:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join(30)

    def _run(self) -> None:
        i, target = 0, None
        while not self._stop.is_set():
            if target is None:  # who runs it now (asked again after any refusal)
                target = next(
                    (
                        n
                        for n in self.fm.alive()
                        if ((agent_view(self.fm[n]) or {}).get("placement") or {}).get("lease")
                    ),
                    None,
                )
                if target is None:
                    self._stop.wait(0.05)
                    continue
            title = f"load {i}"
            i += 1
            try:
                with self.fm[target].client() as client:
                    r = client.post(
                        "/api/v1/findings",
                        json={"agent": AGENT, "severity": "low", "title": title},
                        timeout=10,
                    )
            except httpx.HTTPError:
                self.refused, target = self.refused + 1, None
                continue
            if r.status_code == 201 and r.json().get("note") is None:
                self.acknowledged.append(title)
            else:  # 503 (not acknowledged in time) or kept elsewhere: the agent moved
                self.refused, target = self.refused + 1, None
            self._stop.wait(0.02)
