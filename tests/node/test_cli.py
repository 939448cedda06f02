"""The agent-node CLI against real data dirs: keys, tokens, audit, replay, export, compact."""

import asyncio
import json
import os
import stat

import lmdb

from eventstore.keys import load_or_create_key
from eventstore.writer_lock import WriterLock
from node.app import open_store
from node.config.load import load_config
from node.ops.version import __version__
from tests.support import run_cli, write_config


def seed_journal(config_path, streams=("a", "b"), per_stream=5):
    config = load_config(config_path)

    async def write():
        store = open_store(config, load_or_create_key(config.data_path))
        store.start()
        writes = []  # side by side, so that they share group commits (one fsync each batch)
        for i in range(per_stream):
            for stream in streams:
                finding = {"severity": "low", "title": f"title-{i}", "detail": ""}
                writes.append(store.append(stream, "finding", finding))
                writes.append(store.append(stream, "log", {"level": "info", "message": f"m{i}"}))
        await asyncio.gather(*writes)
        await store.close()

    asyncio.run(write())
    return config


def test_version():
    result = run_cli("--version")
    assert result.returncode == 0 and __version__ in result.stdout


def test_keygen_creates_a_private_key_once(tmp_path):
    path = write_config(tmp_path)
    first = run_cli("keygen", "--config", str(path))
    assert first.returncode == 0 and 'public_key = "z6Mk' in first.stdout
    key_file = tmp_path / "data" / "node.key"
    assert stat.S_IMODE(key_file.stat().st_mode) == 0o600
    second = run_cli("keygen", "--config", str(path))
    assert "existing" in second.stdout
    assert first.stdout.splitlines()[-1] == second.stdout.splitlines()[-1]
    os.chmod(key_file, 0o644)
    refused = run_cli("keygen", "--config", str(path))
    assert refused.returncode == 2 and "chmod 600" in refused.stderr


def test_run_refuses_a_compiler_it_does_not_know_in_one_line(tmp_path, monkeypatch):
    monkeypatch.setenv("AGENT_NODE_COMPILER", "llvm")
    refused = run_cli("run", "--config", str(write_config(tmp_path)), timeout=60)
    assert refused.returncode == 2
    assert refused.stderr == (
        "agent-node: AGENT_NODE_COMPILER='llvm': not a compiler this node knows "
        "(one of cranelift, winch)\n"
    )


def test_token_new_prints_a_working_config_entry(tmp_path):
    result = run_cli("token", "new", "carol", "--scopes", "read,operate")
    assert result.returncode == 0
    token = result.stdout.splitlines()[0].removeprefix("token: ")
    entry = "\n".join(result.stdout.splitlines()[2:])
    config = load_config(write_config(tmp_path, entry))
    from node.web.auth import TokenTable

    identity = TokenTable(config.auth).identify(token)
    assert identity.name == "carol" and identity.scopes == {"read", "operate"}
    assert token not in entry
    assert run_cli("token", "new", "x", "--scopes", "root").returncode == 2


def test_audit_verify_passes_then_finds_a_tampered_byte(tmp_path):
    path = write_config(tmp_path)
    config = seed_journal(path)
    ok = run_cli("audit", "verify", "--config", str(path))
    assert ok.returncode == 0, ok.stderr
    assert "2 journal(s), 20 envelope(s)" in ok.stdout

    env = lmdb.open(str(config.data_path / "journal"), max_dbs=4)
    events = env.open_db(b"events")
    key = b"b\0" + (5).to_bytes(8, "big")  # the third finding of journal b
    with env.begin(write=True, db=events) as txn:
        raw = txn.get(key)
        assert b"title-2" in raw
        txn.put(key, raw.replace(b"title-2", b"title-X"))
    env.close()

    bad = run_cli("audit", "verify", "--config", str(path))
    assert bad.returncode == 1
    assert "b#5" in bad.stderr and "sha256" in bad.stderr
    only_a = run_cli("audit", "verify", "--config", str(path), "--agent", "a")
    assert only_a.returncode == 0


def test_audit_verify_detects_a_forged_signature(tmp_path):
    path = write_config(tmp_path)
    config = seed_journal(path, streams=("a",), per_stream=2)
    env = lmdb.open(str(config.data_path / "journal"), max_dbs=4)
    events = env.open_db(b"events")
    key = b"a\0" + (3).to_bytes(8, "big")
    with env.begin(write=True, db=events) as txn:
        raw = bytearray(txn.get(key))
        raw[-1] ^= 0xFF  # the last byte of the signature
        txn.put(key, bytes(raw))
    env.close()
    bad = run_cli("audit", "verify", "--config", str(path))
    assert bad.returncode == 1 and "a#3: signature does not verify" in bad.stderr


def test_replay_reports_counts(tmp_path):
    path = write_config(tmp_path)
    seed_journal(path)
    result = run_cli("replay", "--config", str(path))
    assert result.returncode == 0, result.stderr
    assert "replayed 20 envelope(s)" in result.stdout
    assert "  logs.entries: 10" in result.stdout
    assert "  findings.entries: 10" in result.stdout
    assert "  findings.incidents: 0" in result.stdout
    assert "  journals: home 2, owner 2, head 2" in result.stdout
    assert "stored read models equal the rebuild" in result.stdout


def test_replay_finds_stored_read_models_that_differ_from_the_journal(tmp_path):
    path = write_config(tmp_path)
    config = seed_journal(path)
    env = lmdb.open(str(config.data_path / "journal"), max_dbs=64)
    entries = env.open_db(b"rm.logs.entries")
    with env.begin(write=True, db=entries) as txn:
        assert txn.delete((3).to_bytes(8, "big"))  # a log entry the journal still holds
    env.close()
    result = run_cli("replay", "--config", str(path))
    assert result.returncode == 1
    assert "stored read models differ from the rebuild: logs.entries" in result.stdout


def test_journal_compact_keeps_the_journal_and_refuses_next_to_a_writer(tmp_path):
    path = write_config(tmp_path)
    seed_journal(path, per_stream=40)
    result = run_cli("journal", "compact", "--config", str(path))
    assert result.returncode == 0, result.stderr
    assert "compacted " in result.stdout and "unused pages before" in result.stdout
    verified = run_cli("audit", "verify", "--config", str(path))
    assert verified.returncode == 0, verified.stderr
    export = run_cli("journal", "export", "--config", str(path), "--agent", "a")
    assert [json.loads(line)["seq"] for line in export.stdout.splitlines()] == list(range(1, 81))
    holder = WriterLock(load_config(path).data_path / "journal")  # as a running node holds it
    holder.acquire()
    try:
        refused = run_cli("journal", "compact", "--config", str(path))
    finally:
        holder.release()
    assert refused.returncode == 1 and "being written by another process" in refused.stderr


def test_journal_export_is_json_lines(tmp_path):
    path = write_config(tmp_path)
    seed_journal(path, streams=("a",), per_stream=3)
    out = tmp_path / "a.jsonl"
    result = run_cli("journal", "export", "--config", str(path), "--agent", "a", "-o", str(out))
    assert result.returncode == 0, result.stderr
    lines = [json.loads(line) for line in out.read_text().splitlines()]
    assert [r["seq"] for r in lines] == list(range(1, 7))
    assert lines[1]["event"]["prev"] == lines[0]["payload_hash"]
    assert lines[0]["signature"].startswith("ed25519:") and lines[0]["agent"] == "a"
    missing = run_cli("journal", "export", "--config", str(path), "--agent", "zzz")
    assert missing.returncode == 1 and "zzz" in missing.stderr


def test_journal_export_into_a_pipe_closed_early_ends_quietly(tmp_path):
    """`agent-node journal export | head -1`: the reader leaves; no traceback, store closed."""
    import subprocess
    import sys

    from tests.support import ROOT

    path = write_config(tmp_path)
    seed_journal(path, streams=("a",), per_stream=2000)
    export = subprocess.Popen(
        [sys.executable, "-m", "node", "journal", "export", "--config", str(path), "--agent", "a"],
        cwd=ROOT,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )
    assert export.stdout is not None and export.stderr is not None
    first = export.stdout.readline()
    export.stdout.close()  # as `head -1` exits
    stderr = export.stderr.read().decode()
    assert export.wait(timeout=60) == 1
    assert json.loads(first)["seq"] == 1
    assert "Traceback" not in stderr and "BrokenPipe" not in stderr, stderr


def test_audit_verify_of_an_unknown_journal_says_so(tmp_path):
    path = write_config(tmp_path)
    seed_journal(path, streams=("a",), per_stream=1)
    result = run_cli("audit", "verify", "--config", str(path), "--agent", "nosuch")
    assert result.returncode == 1
    assert "no journal named 'nosuch'" in result.stderr and "audit ok" not in result.stdout


def test_every_subcommand_help_says_what_it_does():
    from node.cli.main import _parser, subcommands

    seen = []
    for name, parser, listed in subcommands(_parser()):
        assert listed, f"{name} is listed without a help line"
        assert parser.description, f"`{parser.prog} --help` has no text"
        assert parser.description in parser.format_help()
        seen.append(name)
    assert {"token", "new", "audit", "verify", "journal", "export", "approvals"} <= set(seen)
    shown = run_cli("journal", "--help")
    assert shown.returncode == 0 and "read journals" in shown.stdout
