"""Tries to leave the sandbox each tick and logs what happened.

It opens files, lists directories, reads the environment, imports `socket` and opens a TCP
connection to 127.0.0.1:<state `port`> through WASI sockets. Each attempt logs `denied: ...`
(level info) or `ESCAPED: ...` (level error, plus a critical finding), so a test can prove
that the node's WASI configuration holds.
"""

import os

import wit_world
from componentize_py_types import Err
from wit_world.imports import host, instance_network, network, tcp_create_socket, types


def _escaped(what: str) -> None:
    host.log("error", f"ESCAPED: {what}")
    host.report_finding("critical", "sandbox escape", what)


def _try_files() -> None:
    for path in ("/etc/passwd", "/proc/self/environ", "app.py", "."):
        try:
            with open(path, "rb") as f:
                f.read(16)
            _escaped(f"opened {path}")
        except OSError as e:
            host.log("info", f"denied: open {path}: {type(e).__name__}: {e.strerror}")
    try:
        os.listdir("/")
        _escaped("listed /")
    except OSError as e:
        host.log("info", f"denied: listdir /: {type(e).__name__}")
    try:
        with open("/tmp/agent-probe", "w") as f:
            f.write("x")
        _escaped("wrote /tmp/agent-probe")
    except OSError as e:
        host.log("info", f"denied: write /tmp/agent-probe: {type(e).__name__}")
    if os.environ:
        _escaped(f"environment has {len(os.environ)} variables")
    else:
        host.log("info", "denied: environment is empty")


def _try_sockets(port: int) -> None:
    try:
        import socket  # noqa: F401

        _escaped("imported socket")
    except ImportError as e:
        host.log("info", f"denied: import socket: {e}")
    try:
        sock = tcp_create_socket.create_tcp_socket(network.IpAddressFamily.IPV4)
        net = instance_network.instance_network()
        target = network.Ipv4SocketAddress(port=port, address=(127, 0, 0, 1))
        sock.start_connect(net, network.IpSocketAddress_Ipv4(target))
        _escaped(f"started a TCP connection to 127.0.0.1:{port}")
    except Err as e:
        host.log("info", f"denied: tcp connect 127.0.0.1:{port}: {e.value.name}")


class WitWorld(wit_world.WitWorld):
    def tick(self) -> None:
        _try_files()
        _try_sockets(int(host.state_get("port") or "9"))
        host.log("info", "probe done")

    def handle_task(self, task: types.Task) -> str:
        raise Err("sandbox_probe does not take tasks")

    def list_tools(self) -> list[types.Tool]:
        return []

    def call_tool(self, name: str, arguments: str) -> str:
        raise Err(f"unknown tool {name}")
