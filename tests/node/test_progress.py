"""Progress bars with totals on a terminal (a real pseudo-terminal), silence otherwise."""

import asyncio
import fcntl
import os
import pty
import select
import signal
import struct
import subprocess
import sys
import termios
import threading
import time

import httpx

from eventstore.keys import load_or_create_key
from eventstore.store import NewEvent
from node.app import open_store
from node.config.load import load_config
from tests.support import ROOT, run_cli, write_config

JOURNALS, PER_JOURNAL = 3, 200
TOTAL = JOURNALS * PER_JOURNAL


def fill_journal(config_path) -> None:
    config = load_config(config_path)
    store = open_store(config, load_or_create_key(config.data_path))

    async def write() -> None:
        store.start()
        for j in range(JOURNALS):
            await store.append_many(
                [
                    NewEvent(f"agent{j}", "log", {"level": "info", "message": f"m{i}"})
                    for i in range(PER_JOURNAL)
                ]
            )
        await store.close()

    asyncio.run(write())


def open_terminal() -> tuple[int, int]:
    master, slave = pty.openpty()
    fcntl.ioctl(slave, termios.TIOCSWINSZ, struct.pack("HHHH", 40, 120, 0, 0))
    return master, slave


def read_available(master: int, until, timeout: float = 60.0) -> str:
    """Read the terminal until `until(text)` holds or the other side closes."""
    out = b""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline and not until(out.decode(errors="replace")):
        ready, _, _ = select.select([master], [], [], 0.2)
        if ready:
            try:
                data = os.read(master, 65536)
            except OSError:  # EIO: every writer closed the terminal
                break
            if not data:
                break
            out += data
    return out.decode(errors="replace")


def on_terminal(*args: str) -> tuple[int, str]:
    master, slave = open_terminal()
    proc = subprocess.Popen(
        [sys.executable, "-m", "node", *args],
        cwd=ROOT,
        stdin=subprocess.DEVNULL,
        stdout=subprocess.DEVNULL,
        stderr=slave,
    )
    os.close(slave)
    try:
        text = read_available(master, lambda _: proc.poll() is not None)
        text += read_available(master, lambda _: False, timeout=0.5)
        return proc.wait(60), text
    finally:
        os.close(master)


def test_offline_commands_show_totals_on_a_terminal_and_nothing_elsewhere(tmp_path):
    config = write_config(tmp_path)
    fill_journal(config)
    export = tmp_path / "export.jsonl"
    commands = {
        "replay": (["replay", "--config", str(config)], TOTAL),
        "audit verify": (["audit", "verify", "--config", str(config)], TOTAL),
        "export": (
            ["journal", "export", "--config", str(config), "--agent", "agent1", "-o", str(export)],
            PER_JOURNAL,
        ),
    }
    for label, (args, total) in commands.items():
        code, text = on_terminal(*args)
        assert code == 0, text
        assert label in text and f"{total}/{total}" in text and "100%" in text, text
        quiet = run_cli(*args)
        assert quiet.returncode == 0, quiet.stderr
        assert "%|" not in quiet.stderr and "envelopes/s" not in quiet.stderr, quiet.stderr
    assert len(export.read_text().splitlines()) == PER_JOURNAL


def test_start_up_rebuild_shows_progress_on_a_terminal(tmp_path):
    config = write_config(tmp_path)
    fill_journal(config)
    url = f"http://{load_config(config).node.listen}"
    master, slave = open_terminal()
    proc = subprocess.Popen(
        [sys.executable, "-m", "node", "run", "--config", str(config)],
        cwd=ROOT,
        stdin=subprocess.DEVNULL,
        stdout=slave,
        stderr=slave,
    )
    os.close(slave)
    try:
        text = read_available(master, lambda t: "listening on" in t)
        assert "rebuild" in text and f"{TOTAL}/{TOTAL}" in text and "100%" in text, text
        assert httpx.get(url + "/api/v1/health", timeout=10).status_code == 200
    finally:
        proc.send_signal(signal.SIGTERM)
        read_available(master, lambda _: proc.poll() is not None, timeout=30)
        proc.wait(30)
        os.close(master)


def test_a_call_that_waits_says_what_for_once_it_has_taken_its_while(capsys):
    """`while_waiting` (publish, deploy, move): nothing for a quick call; past `after`, each
    new step on stderr (the same step again only with its figures after REPEAT_SECS); the
    call's answer or its own exception."""
    from node.cli.progress import while_waiting

    assert while_waiting(lambda: "quick", lambda s: "never said", after=0.5) == "quick"
    assert capsys.readouterr().err == ""

    steps = iter(["uploading 1 of 2 MiB", "uploading 2 of 2 MiB", "checking"])
    last_step = threading.Event()

    def step(seconds: float) -> str:
        text = next(steps)
        if text == "checking":
            last_step.set()
        return text

    answer = while_waiting(lambda: last_step.wait(30) and "done", step, after=0.2)
    said = capsys.readouterr().err.splitlines()
    assert answer == "done"
    assert said == ["agent-node: uploading 1 of 2 MiB", "agent-node: checking"], said

    def fails() -> None:
        time.sleep(0.3)
        raise ValueError("refused")

    try:
        while_waiting(fails, lambda s: "waiting for \x1b[2J the node", after=0.1)
    except ValueError as exc:
        assert str(exc) == "refused"
    else:
        raise AssertionError("the call's exception is raised")
    assert capsys.readouterr().err == "agent-node: waiting for \\x1b[2J the node\n"
