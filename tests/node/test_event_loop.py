"""The serving event loop (`[node] event_loop`) and the collector settings of a serving node."""

from __future__ import annotations

import gc
import subprocess
import sys

import pytest

from node.ops.heap import YOUNG_THRESHOLD, settle_after_start
from tests.support import ROOT, NodeProcess, auth, logs_on_failure, write_config


def config_with_loop(tmp_path, choice: str):
    path = write_config(tmp_path)
    text = path.read_text().replace(
        "shutdown_drain_secs = 0.3\n", f'shutdown_drain_secs = 0.3\nevent_loop = "{choice}"\n'
    )
    path.write_text(text)
    return path


@pytest.mark.parametrize(("choice", "loop"), [("auto", "uvloop"), ("asyncio", "asyncio")])
def test_the_node_serves_writes_on_the_loop_it_was_given(tmp_path, choice, loop):
    node = NodeProcess(config_with_loop(tmp_path, choice))
    with logs_on_failure(node.log_path), node, node.client() as client:  # node: starts once
        finding = {"agent": "admin", "severity": "low", "title": "on " + loop}
        created = client.post("/api/v1/findings", json=finding, headers=auth())
        assert created.status_code == 201
        listed = client.get("/api/v1/findings", headers=auth()).json()["findings"]
        assert [f["title"] for f in listed] == ["on " + loop]
    assert f"event loop: {loop}" in node.log_path.read_text()


def test_a_node_told_to_use_uvloop_where_it_cannot_import_says_so(tmp_path):
    path = config_with_loop(tmp_path, "uvloop")
    blocked = (
        "import sys; sys.modules['uvloop'] = None; from node.cli.main import main; "
        f"sys.argv = ['agent-node', 'run', '--config', {str(path)!r}]; sys.exit(main())"
    )
    done = subprocess.run(
        [sys.executable, "-c", blocked], cwd=ROOT, capture_output=True, text=True, timeout=60
    )
    assert done.returncode != 0
    assert 'event_loop = "uvloop", but uvloop is not installed' in done.stderr


def test_settling_freezes_the_start_up_heap_and_raises_the_young_threshold():
    before = gc.get_threshold()
    try:
        settle_after_start()
        assert gc.get_freeze_count() > 0
        assert gc.get_threshold() == (YOUNG_THRESHOLD, before[1], before[2])
    finally:
        gc.unfreeze()
        gc.set_threshold(*before)
