"""What the engine needs to know about an agent and about itself.

Kept apart from node.config.model so the engine stays testable on its own; the node builds
`AgentSpec`s from runtime.toml's [[agents]].
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

from node.runtime.compiler import CompileLimits

if TYPE_CHECKING:
    from node.config.model import AgentConfig, Config


REGISTRY_PREFIX = "registry:"


@dataclass(frozen=True)
class AgentSpec:
    name: str
    component: Path | str  # a file, or "registry:ID@VERSION" for the runtime's resolver
    tick_interval_ms: int = 1000
    fuel_per_tick: int | None = None  # None: unlimited, fuel_remaining reported as null
    memory_limit_mb: int | None = None  # None: no limit beyond wasm32's 4 GiB
    tick_timeout_ms: int = 10_000  # wall-clock time per run, excluding approval waits only
    mcp: bool = False


@dataclass(frozen=True)
class RuntimeOptions:
    cache_dir: Path | None = None  # compiled components; None disables the disk cache
    output_dir: Path | None = None  # agents' stdout/stderr files; None: a temporary folder
    epoch_interval_ms: int = 10
    restart_backoff_ms: int = 1000
    restart_backoff_max_ms: int = 60_000
    max_output_line: int = 4096  # longer stdout/stderr lines are cut
    max_output_lines_per_run: int = 200  # more are dropped, with one note saying so
    max_output_bytes_per_run: int = 1 << 20  # more are skipped, likewise
    compile_limits: CompileLimits = field(default_factory=CompileLimits)  # per compile child


def spec_from_config(agent: AgentConfig, config: Config) -> AgentSpec:
    """An [[agents]] entry of runtime.toml as the engine sees it."""
    component: Path | str = agent.component
    if not agent.component.startswith(REGISTRY_PREFIX):
        component = config.path(agent.component)
    return AgentSpec(name=agent.name, component=component, mcp=agent.mcp, **agent.limits())


def compile_limits(config: Config) -> CompileLimits:
    """The limits of one compile child, from [node] (the same for agents and uploads)."""
    return CompileLimits(config.node.compile_timeout_secs, config.node.compile_memory_mb)
