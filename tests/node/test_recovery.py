"""Recovery that does not grow with history (real node processes, real LMDB):

- the on-disk read models are written with the journal, so after `kill -9` they hold every
  acknowledged entry with nothing to replay;
- the in-memory ones restart from the periodic checkpoint and fold only the tail;
- a data dir from before the on-disk read models gets them folded once at start.
"""

from __future__ import annotations

import asyncio
import pickle
import re
from pathlib import Path

from eventstore.keys import load_or_create_key
from eventstore.store import EventStore, NewEvent
from node.app import JOURNAL_DIR
from node.config.load import load_config
from node.ops import checkpoint
from tests.polling import wait_until
from tests.support import NodeProcess, run_cli, write_config


def config_with(tmp_path: Path, **node: object) -> Path:
    path = write_config(tmp_path)
    extra = "".join(f"{key} = {value}\n" for key, value in node.items())
    text = path.read_text().replace(
        "shutdown_drain_secs = 0.3\n", "shutdown_drain_secs = 0.3\n" + extra
    )
    path.write_text(text)
    return path


def post_findings(node: NodeProcess, titles: list[str]) -> None:
    with node.client() as client:
        for title in titles:
            response = client.post(
                "/api/v1/findings", json={"agent": "node-a", "severity": "low", "title": title}
            )
            assert response.status_code == 201, response.text


def titles_served(node: NodeProcess) -> list[str]:
    with node.client() as client:
        page = client.get("/api/v1/findings", params={"since": 0, "limit": 1000}).json()
    return [f["title"] for f in page["findings"]]


def checkpoint_position(data: Path) -> int:
    path = data / checkpoint.CHECKPOINT_FILE
    return pickle.loads(path.read_bytes())["position"] if path.exists() else 0


def test_after_kill_9_the_start_folds_only_what_came_after_the_periodic_checkpoint(tmp_path):
    path = config_with(tmp_path, checkpoint_events=20, checkpoint_secs=30)
    data = tmp_path / "data"
    node = NodeProcess(path).start()
    first = [f"before-{i}" for i in range(60)]
    post_findings(node, first)
    wait_until(lambda: checkpoint_position(data) >= 40, 20, "a checkpoint at position 40")
    covered = checkpoint_position(data)
    assert covered >= 40  # written by events, long before the 30 s timer
    tail = [f"after-{i}" for i in range(5)]
    post_findings(node, tail)
    node.kill()

    node = NodeProcess(path, ("--log-level", "info")).start()
    try:
        assert titles_served(node) == first + tail  # the on-disk read model lost nothing
        restored = re.findall(
            r"restored from checkpoint at position (\d+)", node.log_path.read_text()
        )
        assert restored and int(restored[-1]) >= covered  # only the tail was folded
    finally:
        node.terminate()


def test_the_timer_writes_a_checkpoint_when_few_envelopes_came(tmp_path):
    path = config_with(tmp_path, checkpoint_events=100_000, checkpoint_secs=0.5)
    data = tmp_path / "data"
    with NodeProcess(path) as node:
        post_findings(node, ["one", "two", "three"])
        wait_until(lambda: checkpoint_position(data) >= 3, 20, "a checkpoint at position 3")
        assert checkpoint_position(data) == 3


def test_a_data_dir_from_before_the_on_disk_read_models_gets_them_at_start(tmp_path):
    """Journals written by a store without read models (today's data dirs): the node folds
    them once, then serves every entry, and `replay` finds them equal to a rebuild."""
    path = write_config(tmp_path)
    config = load_config(path)

    async def write_old_journal() -> None:
        store = EventStore(
            config.data_path / JOURNAL_DIR, load_or_create_key(config.data_path), config.node.name
        )
        store.start()
        await store.append_many(
            [
                NewEvent(f"agent-{i % 3}", "log", {"level": "info", "message": f"m{i}"})
                for i in range(50)
            ]
            + [
                NewEvent("agent-0", "finding", {"severity": "low", "title": f"f{i}"})
                for i in range(7)
            ]
        )
        await store.close()

    asyncio.run(write_old_journal())
    with NodeProcess(path) as node, node.client() as client:
        logs = client.get("/api/v1/logs", params={"since": 0, "limit": 1000}).json()
        assert [entry["message"] for entry in logs["logs"]] == [f"m{i}" for i in range(50)]
        assert logs["next_seq"] == 50
        assert titles_served(node) == [f"f{i}" for i in range(7)]
    replay = run_cli("replay", "--config", str(path))
    assert replay.returncode == 0, replay.stdout + replay.stderr
    assert "stored read models equal the rebuild" in replay.stdout
