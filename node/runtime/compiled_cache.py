"""Where a node keeps its compiled components: one file per component's sha256, for this
wasmtime version and engine settings (the engine writes them; the registry reads whether one
is there: those bytes compiled here once, so an upload of them again needs no compile check)."""

from __future__ import annotations

import hashlib
import os
from importlib.metadata import version
from pathlib import Path

from node.runtime.engine_settings import settings

WASMTIME_VERSION = version("wasmtime")
COMPILED_DIR = "compiled"  # under data_dir
# Another folder for that cache, e.g. one shared by several nodes (or test runs) on a host.
COMPILED_CACHE_ENV = "AGENT_NODE_COMPILED_CACHE"


def compiled_cache_dir(data_path: Path) -> Path:
    override = os.environ.get(COMPILED_CACHE_ENV)
    return Path(override) if override else data_path / COMPILED_DIR


def artifact_path(cache_dir: Path, sha256_hex: str) -> Path:
    tag = hashlib.sha256(settings().encode()).hexdigest()[:8]
    return cache_dir / f"{sha256_hex}-wasmtime{WASMTIME_VERSION}-{tag}.cwasm"
