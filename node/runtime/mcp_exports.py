"""The agent world's optional MCP exports (wit/0.3.0/agent.wit): prompts, completion of prompt
arguments, the agent's own resources and tool results as content items, each run on the agent's
worker thread like `list-tools` and `call-tool` (node/runtime/runtime.py).

A component without an export (one built against 0.1.0 or 0.2.0) is answered as having none:
no prompts, no completions, no resources of its own, and its tools' results as text
(`call-tool-content` is called in `call-tool`'s place by the runtime's `call_tool`). What an
export returns is the agent's word, checked by the MCP layer (node/protocols/mcp_content.py)
before a client sees it.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from dataclasses import dataclass
from typing import TypeVar, cast

from node.runtime.instance import AgentInstance
from node.runtime.runtime import AgentRuntime

T = TypeVar("T")


@dataclass(frozen=True)
class PromptArgument:
    name: str
    description: str
    required: bool


@dataclass(frozen=True)
class Prompt:
    name: str
    description: str
    arguments: tuple[PromptArgument, ...]


@dataclass(frozen=True)
class AgentResource:
    """A resource or, from `list-resource-templates`, a template (`uri` is then one)."""

    uri: str
    name: str
    description: str
    mime_type: str


@dataclass(frozen=True)
class Outcome:
    """What an export with a `result<string, string>` said: ok with JSON text, or its error."""

    ok: bool
    text: str


class AgentExports:
    """The optional exports of the agents of one runtime."""

    def __init__(self, runtime: AgentRuntime) -> None:
        self.runtime = runtime

    async def _run(self, agent: str, detail: str, fn: Callable[[AgentInstance], T]) -> T:
        """`fn` on the agent's worker thread, as a read-only run (like `list-tools`)."""
        future = self.runtime.worker(agent).submit("list-tools", detail, fn)
        return cast(T, await asyncio.wrap_future(future))

    async def prompts(self, agent: str) -> list[Prompt]:
        def listed(instance: AgentInstance) -> list[Prompt]:
            if "list-prompts" not in instance.funcs:
                return []
            return [
                Prompt(
                    p.name,
                    p.description,
                    tuple(PromptArgument(a.name, a.description, a.required) for a in p.arguments),
                )
                for p in instance.call("list-prompts")
            ]

        return await self._run(agent, "prompts", listed)

    async def prompt(self, agent: str, name: str, arguments: str) -> Outcome | None:
        """None: the agent exports no `get-prompt`."""
        return await self._result(agent, "get-prompt", name, arguments)

    async def complete(self, agent: str, prompt: str, argument: str, value: str) -> list[str]:
        def completed(instance: AgentInstance) -> list[str]:
            if "complete-argument" not in instance.funcs:
                return []
            return list(instance.call("complete-argument", prompt, argument, value))

        return await self._run(agent, "complete", completed)

    async def resources(self, agent: str, templates: bool = False) -> list[AgentResource]:
        export = "list-resource-templates" if templates else "list-resources"

        def listed(instance: AgentInstance) -> list[AgentResource]:
            if export not in instance.funcs:
                return []
            return [
                AgentResource(r.uri, r.name, r.description, getattr(r, "mime-type"))
                for r in instance.call(export)
            ]

        return await self._run(agent, export, listed)

    async def read(self, agent: str, uri: str) -> Outcome | None:
        """None: the agent exports no `read-resource`."""
        return await self._result(agent, "read-resource", uri)

    async def has(self, agent: str, export: str) -> bool:
        return await self._run(agent, export, lambda instance: export in instance.funcs)

    async def _result(self, agent: str, export: str, *args: str) -> Outcome | None:
        def called(instance: AgentInstance) -> Outcome | None:
            if export not in instance.funcs:
                return None
            result = instance.call(export, *args)
            return Outcome(result.tag == "ok", result.payload)

        return await self._run(agent, export, called)
