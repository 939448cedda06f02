"""One compile per component (issue 52 item 2): the publish's compile check is the compile a
deploy needs, kept by the component's sha256 and the engine's settings in the node's compiled
cache, so a deploy or an upgrade of a published component compiles nothing again."""

from __future__ import annotations

import hashlib

import wasmtime

from node.app import build_app
from node.config.load import load_config
from node.runtime.agents import AGENTS
from node.runtime.compiled_cache import COMPILED_CACHE_ENV, artifact_path
from tests.polling import until
from tests.runtime.test_lifecycle import get, publish, put
from tests.support import write_config


def ticking_component(reply: str) -> bytes:
    """A component whose every tick succeeds; `reply` only makes the bytes differ."""
    return bytes(
        wasmtime.wat2wasm(
            f"""(component
  (core module $m
    (memory (export "mem") 1)
    (data (i32.const 64) "{reply}")
    (func (export "tick") (result i32) (i32.const 0)))
  (core instance $i (instantiate $m))
  (func (export "tick") (result (result (error string)))
    (canon lift (core func $i "tick") (memory (core memory $i "mem")))))"""
        )
    )


async def test_a_deploy_and_an_upgrade_after_a_publish_compile_nothing(
    aiohttp_client, tmp_path, monkeypatch
):
    cache = tmp_path / "compiled"
    monkeypatch.setenv(COMPILED_CACHE_ENV, str(cache))  # nothing of these compiled yet
    app = build_app(load_config(write_config(tmp_path)))
    client = await aiohttp_client(app)
    engine = app[AGENTS].runtime.engine
    first, second = tmp_path / "v1.wasm", tmp_path / "v2.wasm"
    first.write_bytes(ticking_component("one"))
    second.write_bytes(ticking_component("two"))

    await publish(client, "steady", "1.0.0", first)
    artifact = artifact_path(cache, hashlib.sha256(first.read_bytes()).hexdigest())
    assert artifact.is_file()  # the check's compile is kept, with the engine's settings
    assert engine.compiles == 1
    body = {"component": "registry:steady@1.0.0", "tick_interval_ms": 100}
    deployed = await put(client, "steady", body)
    assert deployed.status == 201, await deployed.text()
    assert engine.compiles == 1  # loaded from the publish's artifact
    await until(lambda: _ran(client), 30, "the deployed agent ticks")

    await publish(client, "steady", "1.1.0", second)
    assert engine.compiles == 2
    upgraded = await put(client, "steady", {**body, "component": "registry:steady@1.1.0"})
    assert upgraded.status == 200, await upgraded.text()
    assert engine.compiles == 2
    assert sorted(p.name for p in cache.iterdir()) == sorted(
        artifact_path(cache, hashlib.sha256(w.read_bytes()).hexdigest()).name
        for w in (first, second)
    )


async def _ran(client) -> bool:
    return (await get(client, "steady")).get("status") in {"idle", "running"}
