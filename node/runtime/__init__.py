"""The WASM agent runtime: wasmtime components, one worker thread and Store per agent."""

from node.runtime.hostapi import (
    AgentFault,
    AgentHooks,
    AgentHost,
    HostError,
    Run,
    RunResult,
    Task,
    Tool,
    ToolResult,
)
from node.runtime.runtime import AgentRuntime, HostFactory, UnknownAgentError
from node.runtime.spec import AgentSpec, RuntimeOptions
from node.runtime.status import AgentStatus
from node.runtime.worker import AgentUnavailableError

__all__ = [
    "AgentFault",
    "AgentHooks",
    "AgentHost",
    "AgentRuntime",
    "AgentSpec",
    "AgentStatus",
    "AgentUnavailableError",
    "HostError",
    "HostFactory",
    "Run",
    "RunResult",
    "RuntimeOptions",
    "Task",
    "Tool",
    "ToolResult",
    "UnknownAgentError",
]
