"""Helpers for the protocol tests: a node hosting real agents on a real port, journal reads.

The node listens on the port its config names, so the URLs its agent cards advertise are
the ones the official clients then call.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from aiohttp import web

from node.app import build_app
from node.context import CONTEXT
from tests.polling import until
from tests.support import free_port, make_config


def agent_toml(name: str, component: Path, extra: str = "") -> str:
    return f"""
[[agents]]
name = "{name}"
component = "{component}"
tick_interval_ms = 60000
{extra}
"""


CASHIER_POLICY = """[agents.capabilities]
spend = true
[agents.approval]
spend = true
timeout_secs = {timeout}
"""


def cashier_toml(name: str, component: Path, timeout: int = 300) -> str:
    return agent_toml(name, component, CASHIER_POLICY.format(timeout=timeout))


class Node:
    def __init__(self, app: web.Application, url: str) -> None:
        self.app = app
        self.url = url

    @property
    def ctx(self):
        return self.app[CONTEXT]

    def journal(self, agent: str, type_: str | None = None) -> list[dict[str, Any]]:
        return [
            {"type": e.event.type, **e.event.data}
            for e in self.ctx.store.iter_stream(agent)
            if type_ is None or e.event.type == type_
        ]


async def start_node(aiohttp_server, tmp_path: Path, toml: str, node: str = "") -> Node:
    """`node`: more keys of its [node] table."""
    port = free_port()
    app = build_app(make_config(tmp_path, toml, port=port, node=node))
    server = await aiohttp_server(app, port=port)
    node = Node(app, str(server.make_url("")).rstrip("/"))
    return node


async def started(node: Node, *agents: str) -> None:
    for agent in agents:
        await until(lambda a=agent: node.journal(a, "agent.started"))
