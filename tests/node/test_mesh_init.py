"""`agent-node mesh init` and `mesh nats-config` (issue 44 items 5, 9 and 10): the configs one
command writes start a real nats-server and three real nodes that form a mesh, and the CLI
places, re-places and moves an agent on them, saying what its long waits wait for."""

from __future__ import annotations

import json
import re
import stat
import subprocess
import sys
import threading
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import httpx
import pytest

from harness.nats import nats_server_binary
from node.cli.main import main
from tests.nats_support import can_connect
from tests.polling import wait_until
from tests.support import ROOT, NodeProcess, free_port, run_cli

NODES = ("node-a", "node-b", "node-c")
AGENT = "thinker"  # agents/inference: asks the node's inference route on every tick
HOLD_SECS = 8.0  # a held run is let go by then anyway (its tick_timeout_ms is 10 s)


class Model:
    """An OpenAI-style endpoint for node-a that holds each completion while `held`: a run of
    the agent is then in progress, and a deploy or a move waits for it, as long as the test
    likes. `asked` is set when a request arrives."""

    def __init__(self) -> None:
        self.asked = threading.Event()
        self.released = threading.Event()
        self.released.set()
        model = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                self.rfile.read(int(self.headers.get("Content-Length") or 0))
                model.asked.set()
                model.released.wait(HOLD_SECS)
                chunk = {"choices": [{"index": 0, "delta": {"content": "ok"}}]}
                body = f"data: {json.dumps(chunk)}\n\ndata: [DONE]\n\n".encode()
                self.send_response(200)
                self.send_header("Content-Type", "text/event-stream")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, *args: Any) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}/v1"

    def hold(self) -> None:
        self.asked.clear()
        self.released.clear()

    def __enter__(self) -> Model:
        threading.Thread(target=self.server.serve_forever, daemon=True).start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.released.set()
        self.server.shutdown()
        self.server.server_close()


def said_while_waiting(
    args: list[str], said: str, then: Callable[[], None]
) -> subprocess.CompletedProcess[str]:
    """The CLI command `args`; once its stderr has `said`, `then()` lets what it waits for go
    on (it must say it while it waits, or this fails)."""
    proc = subprocess.Popen(
        [sys.executable, "-m", "node", *args],
        cwd=ROOT,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    assert proc.stderr is not None and proc.stdout is not None
    lines: list[str] = []
    reader = threading.Thread(target=lambda: lines.extend(proc.stderr), daemon=True)
    reader.start()
    try:  # (or the command ends first: refused, say)
        wait_until(
            lambda: proc.poll() is not None or any(said in line for line in lines),
            30,
            f"the CLI says {said!r}",
        )
    finally:
        then()
    stdout = proc.stdout.read()
    code = proc.wait(60)
    reader.join(10)
    return subprocess.CompletedProcess(args, code, stdout, "".join(lines))


def agents_cli(node: NodeProcess, token: str, *args: str) -> subprocess.CompletedProcess[str]:
    return run_cli("agents", *args, "--url", node.url, "--token", token)


def view(node: NodeProcess, token: str) -> dict[str, Any] | None:
    answer = httpx.get(
        f"{node.url}/api/v1/agents/{AGENT}", headers={"Authorization": f"Bearer {token}"}
    )
    return answer.json() if answer.status_code == 200 else None


def test_mesh_init_wires_three_nodes_that_place_and_move_an_agent(tmp_path, built_agents):
    out = tmp_path / "mesh"
    addresses = {name: f"127.0.0.1:{free_port()}" for name in NODES}
    nats_url = f"nats://127.0.0.1:{free_port()}"
    made = run_cli(
        "mesh",
        "init",
        "--out",
        str(out),
        *(f"{n}={a}" for n, a in addresses.items()),
        "--nats",
        nats_url,
        "--host",
        AGENT,
    )
    assert made.returncode == 0, made.stderr
    shown = re.search(r"keep its hash\): (\S+)", made.stdout)
    assert shown, made.stdout
    token = shown.group(1)
    for path in [*out.rglob("*")]:  # every secret is its owner's only
        mode = stat.S_IMODE(path.stat().st_mode)
        assert mode == (0o700 if path.is_dir() else 0o600), (path, oct(mode))
    assert token not in "".join(p.read_text() for p in out.rglob("*.toml"))
    # a second run never writes over the first
    again = run_cli("mesh", "init", "--out", str(out), "a=127.0.0.1:1", "b=127.0.0.1:2")
    assert again.returncode == 2 and "not an empty folder" in again.stderr

    with Model() as model:
        node_a = out / "node-a" / "runtime.toml"  # node-a's model answers when the test says
        node_a.write_text(node_a.read_text() + f'\n[inference]\nlocal_url = "{model.url}"\n')
        server = subprocess.Popen(
            [nats_server_binary(), "-c", str(out / "nats" / "nats-server.conf")],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.STDOUT,
        )
        nodes = {n: NodeProcess(out / n / "runtime.toml") for n in NODES}
        try:
            password = (out / "node-a" / "credentials" / "nats-password").read_text().strip()
            wait_until(
                lambda: can_connect(nats_url, "node-a", password),
                20,
                "nats-server answers",
                retry_on=(Exception,),
            )
            with ThreadPoolExecutor(3) as pool:
                list(pool.map(lambda node: node.start(60), nodes.values()))
            placed_and_moved(nodes, token, built_agents["inference"], model)
        finally:
            for node in nodes.values():
                node.kill()
            server.kill()
            server.wait(10)


def placed_and_moved(nodes: dict[str, NodeProcess], token: str, wasm: Path, model: Model) -> None:
    a, b, c = (nodes[n] for n in NODES)
    published = httpx.post(
        f"{a.url}/api/v1/registry/packages",
        data={"id": AGENT, "version": "1.0.0"},
        files={"wasm": ("a.wasm", wasm.read_bytes())},
        headers={"Authorization": f"Bearer {token}"},
        timeout=120,
    )
    assert published.status_code == 201, published.text

    # --placement on deploy; its first run waits for the model, and the CLI says so
    deploys: list[subprocess.CompletedProcess[str]] = []

    def deployed() -> bool:
        model.hold()
        deploys.append(
            said_while_waiting(
                [
                    *("agents", "deploy", AGENT, f"registry:{AGENT}@1.0.0"),
                    *("--placement", "node-a,node-b", "--tick-interval-ms", "100"),
                    *("--capability", "inference"),  # its model is node-a's to give
                    *("--url", a.url, "--token", token),
                ],
                "deploy: waiting for its first run",
                model.released.set,
            )
        )
        return "not connected" not in deploys[-1].stderr  # the NATS link still coming up

    wait_until(deployed, 30, "node-a takes the deploy", 0.2)
    deploy = deploys[-1]
    assert deploy.returncode == 0, deploy.stderr
    assert f"{AGENT}: deployed as revision 1" in deploy.stdout
    assert "agent-node: deploy: waiting for its first run (" in deploy.stderr, deploy.stderr

    replica = wait_until(lambda: view(b, token), 20, "node-b lists the agent")
    assert replica["status"] == "replica" and replica["placement"]["home"] == "node-a"
    assert replica["placement"]["placement"] == ["node-a", "node-b"]
    assert view(c, token) is None  # not in its set

    # a move outside the set: the set in words, not a Python tuple
    refused = agents_cli(a, token, "move", AGENT, "--to", "node-c")
    assert refused.returncode == 1
    assert (
        f"node 'node-c' is not in the placement set of '{AGENT}' (node-a, node-b) (HTTP 422)"
        in refused.stderr
    ), refused.stderr

    # --placement on upgrade: a PATCH of the set alone
    widened = agents_cli(a, token, "upgrade", AGENT, "--placement", "node-a,node-b,node-c")
    assert widened.returncode == 0, widened.stderr
    assert f"agent '{AGENT}' may now run on node-a, node-b, node-c" in widened.stdout
    on_c = wait_until(lambda: view(c, token), 20, "node-c lists the agent")
    assert on_c["placement"]["placement"] == ["node-a", "node-b", "node-c"]
    # node-c (whose [[hosting]] `mesh init --host` wrote) fetches and compiles it: then ready
    wait_until(
        lambda: "node-c" in (view(a, token)["placement"] or {}).get("candidates", []),
        60,
        "node-c ready to host the agent",
    )
    bad = agents_cli(a, token, "upgrade", AGENT, "--placement", "node-b")
    assert bad.returncode == 1
    assert "--placement: must include this node ('node-a')" in bad.stderr, bad.stderr

    # a move while a run waits for the model: the CLI says what the move waits for
    model.hold()
    assert model.asked.wait(10), "node-a's agent asks its model"
    moved = said_while_waiting(
        ["agents", "move", AGENT, "--to", "node-c", "--url", a.url, "--token", token],
        f"move: waiting for the home to drain {AGENT}",
        model.released.set,
    )
    assert moved.returncode == 0, moved.stderr
    assert f"{AGENT}: handed over to node-c (epoch 1" in moved.stdout
    assert f"agent-node: move: waiting for the home to drain {AGENT}" in moved.stderr

    def moved_everywhere() -> bool:
        views = [view(n, token) for n in (a, b, c)]
        return all(v and v["placement"]["home"] == "node-c" for v in views)

    wait_until(moved_everywhere, 20, "every node has the handoff")
    wait_until(lambda: (view(c, token) or {}).get("status") in ("running", "idle"), 20, "c runs it")
    shown = agents_cli(b, token, "show", AGENT)
    assert shown.returncode == 0, shown.stderr
    assert "\\n" not in shown.stdout, shown.stdout  # the moves are rows, not escapes
    rows = shown.stdout.split("moves (newest first):\n")[1].splitlines()
    assert rows[0].split() == ["SEQ", "EPOCH", "FROM", "TO", "REASON", "AT"]
    assert rows[1].split()[1:5] == ["1", "node-a", "node-c", "handoff"]


def test_nats_config_is_a_config_nats_server_takes(tmp_path, capsys):
    """`mesh nats-config` for a node of a three-server cluster: nats-server's own check
    (`-t`) accepts it, with the generated users and JetStream; bad input is refused."""
    argv = ["mesh", "nats-config", "--node", "node-a", "--node", "node-b=user-b"]
    cluster = ["--cluster-listen", "127.0.0.1:6222", "--store-dir", str(tmp_path / "js")]
    routes = [f"--route=nats://127.0.0.1:{port}" for port in (6222, 6223, 6224)]
    assert main([*argv, *cluster, *routes]) == 0
    config = capsys.readouterr().out
    assert 'user: "user-b", password: $USER_B_PASSWORD' in config
    assert "sync_interval: always" in config and '"nats://127.0.0.1:6223"' in config
    path = tmp_path / "nats.conf"
    path.write_text(config)
    checked = subprocess.run(
        [nats_server_binary(), "-c", str(path), "-t"],
        capture_output=True,
        text=True,
        env={"NODE_A_PASSWORD": "pw-a-0123456789", "USER_B_PASSWORD": "pw-b-0123456789"},
    )
    assert checked.returncode == 0, checked.stdout + checked.stderr
    for wrong, said in (
        (["--listen", "nowhere"], "--listen nowhere: not HOST:PORT"),
        (["--route", "http://x:1"], "--route http://x:1: not a nats://HOST:PORT route URL"),
        (["--route", "nats://x:1"], "--route needs --cluster-listen"),
        (["--store-dir", 'a"b'], "--store-dir"),
    ):
        assert main([*argv, *wrong]) == 2
        assert said in capsys.readouterr().err


@pytest.mark.parametrize(
    ("nodes", "said"),
    [
        (["node-a=127.0.0.1:1"], "a mesh needs at least two nodes"),
        (["node-a=127.0.0.1:1", "node-a=127.0.0.1:2"], "two nodes share the name node-a"),
        (["node-a=127.0.0.1:1", "node-b=127.0.0.1:1"], "share the address 127.0.0.1:1"),
        (["node-a=0.0.0.0:1", "node-b=127.0.0.1:2"], "not a wildcard"),
        (["node a=127.0.0.1:1", "node-b=127.0.0.1:2"], "give NAME=HOST:PORT"),
        (["node-a=127.0.0.1", "node-b=127.0.0.1:2"], "not HOST:PORT"),
    ],
)
def test_mesh_init_refuses_what_it_cannot_wire_and_writes_nothing(tmp_path, capsys, nodes, said):
    assert main(["mesh", "init", "--out", str(tmp_path / "m"), *nodes]) == 2
    assert said in capsys.readouterr().err
    assert not (tmp_path / "m").exists()
