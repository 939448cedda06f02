"""`agent-node`: run a node, manage its identity and tokens, and audit or replay its journal."""

from __future__ import annotations

import argparse
import base64
import errno
import json
import os
import sys
import time
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import TYPE_CHECKING

from node.authoring import cli as authoring
from node.cli import config as cli_config
from node.cli import docs as cli_docs
from node.cli import keyrotate, progress
from node.cli import mesh as cli_mesh
from node.cli import policy as cli_policy
from node.cli.client import add_client_commands
from node.config.names import SCOPES, ConfigError
from node.display.humanize import duration, visible
from node.ops import logflags
from node.ops.version import __version__

# CLI start-up time: the node's heavy modules (config model, journal, aiohttp) load in commands
if TYPE_CHECKING:
    from nacl.signing import SigningKey

    from eventstore.envelope import Envelope
    from eventstore.store import EventStore
    from node.config.model import Config

EPILOG = "documentation: `agent-node docs` (topics), e.g. `agent-node docs agents`"


def main(argv: Sequence[str] | None = None) -> int:
    parser = _parser()
    args = parser.parse_args(argv)
    if not hasattr(args, "func"):
        parser.print_help()
        return 2
    try:
        return int(args.func(args))
    except _reported() as exc:
        print(f"agent-node: {visible(str(exc))}", file=sys.stderr)
        return 2
    except BrokenPipeError:  # `agent-node journal export | head`: the reader left; end quietly
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())  # no second error when Python flushes at exit
        return 1


def _reported() -> tuple[type[Exception], ...]:
    """The errors main() reports as one line. Called only once a command raised (an `except`
    clause is evaluated then), so the key file's module loads only for commands that use it."""
    from eventstore.keys import KeyFileError

    return (ConfigError, KeyFileError)


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="agent-node", description=__doc__, epilog=EPILOG)
    parser.add_argument("--version", action="version", version=f"agent-node {__version__}")
    sub = parser.add_subparsers(metavar="COMMAND")

    def command(
        name: str, func: Callable[[argparse.Namespace], int], help: str, config: bool = True
    ) -> argparse.ArgumentParser:
        p = sub.add_parser(name, help=help, description=help)
        if config:
            p.add_argument("--config", default="runtime.toml", help="path of runtime.toml")
        p.set_defaults(func=func)
        return p

    logflags.add_arguments(command("run", cmd_run, "run the node until SIGTERM or SIGINT"))
    command("keygen", cmd_keygen, "create the node key in data_dir (if absent) and show it")

    token = sub.add_parser("token", help="manage API tokens").add_subparsers(metavar="ACTION")
    new = token.add_parser("new", help="make a token and print the config lines for it")
    new.add_argument("name", help="the identity recorded with this token's decisions")
    new.add_argument(
        "--scopes", nargs="+", default=["read"], help=f"any of {', '.join(SCOPES)} (default read)"
    )
    new.set_defaults(func=cmd_token_new)

    audit = sub.add_parser("audit", help="check the journals").add_subparsers(metavar="ACTION")
    verify = audit.add_parser("verify", help="verify hashes, chains and signatures")
    verify.add_argument("--config", default="runtime.toml")
    verify.add_argument("--agent", help="only this journal")
    verify.set_defaults(func=cmd_audit_verify)

    cli_config.register(sub)  # config check, config schema (node/cli/config.py)
    keyrotate.register(sub)  # key rotate (node/cli/keyrotate.py)
    cli_mesh.register(sub)  # mesh nats-permissions (node/cli/mesh.py)
    cli_policy.register(sub)  # policy test (node/cli/policy.py)
    command("replay", cmd_replay, "rebuild every projection from the journal and report counts")

    journal = sub.add_parser("journal", help="read journals").add_subparsers(metavar="ACTION")
    export = cli_docs.documented_parser(
        journal, "export", "write one journal as JSON Lines", EXPORT_FORMAT
    )
    export.add_argument("--config", default="runtime.toml")
    export.add_argument("--agent", required=True, help="journal (agent) name")
    export.add_argument("--output", "-o", help="file to write (default: standard output)")
    export.set_defaults(func=cmd_journal_export)
    compact = journal.add_parser(
        "compact",
        help="rewrite the journal without free pages (node stopped; after a bulk import)",
    )
    compact.add_argument("--config", default="runtime.toml")
    compact.set_defaults(func=cmd_journal_compact)
    add_client_commands(sub)  # approvals, status, tasks, logs, findings against a running node
    authoring.register(sub)  # agent new|build|test|publish (node/authoring/)
    cli_docs.register(sub)  # docs [TOPIC]: the documentation, from the install
    _describe(parser)
    return parser


EXPORT_FORMAT = """Write one journal as JSON Lines, one JSON object per envelope, oldest first:

  seq           the envelope's number in its journal (1, 2, ...)
  agent         the journal (agent) name
  payload_hash  "sha256:" and the hex SHA-256 of the payload bytes
  timestamp     when the event was written (RFC 3339, UTC)
  signature     "ed25519:" and the base64 Ed25519 signature of the writing node
  position      the envelope's place in the node's global order
  payload       the exact signed bytes, base64: MessagePack of the event below (kept so any tool
                can check hashes, the chain and the signatures)
  event         the payload decoded: {type, ts, origin, prev, data}

Read `event` for what happened; `payload` only to verify (`agent-node docs operations`)."""


def subcommands(
    parser: argparse.ArgumentParser,
) -> Iterator[tuple[str, argparse.ArgumentParser, str]]:
    """(name, parser, the help its parent lists) of every subcommand, depth first."""
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            listed = {choice.dest: choice.help or "" for choice in action._choices_actions}
            for name, child in action.choices.items():
                yield name, child, listed.get(name, "")
                yield from subcommands(child)


def _describe(parser: argparse.ArgumentParser) -> None:
    """Every `agent-node ... --help` opens with what the command does: the line its parent
    lists it with, where the command has no description of its own."""
    for _, child, listed in subcommands(parser):
        if not child.description:
            child.description = listed


def cmd_run(args: argparse.Namespace) -> int:
    import asyncio

    from node.config import exposure
    from node.config.load import load_config
    from node.ops import logsetup
    from node.ops.eventloop import loop_factory
    from node.ops.filemodes import make_private
    from node.runtime.engine_settings import compiler
    from node.server import serve

    config = load_config(args.config)
    try:
        compiler()
    except ValueError as exc:
        print(f"agent-node: {exc}", file=sys.stderr)
        return 2
    factory = loop_factory(config.node.event_loop)
    redactor = logsetup.configure_logging(
        args.log_level, args.log_format, logsetup.Redactor(logsetup.secrets_of(config))
    )
    make_private(config.data_path)  # before anything is written (node/ops/filemodes.py)
    exposure.warn_at_start(config, Path(args.config))
    keyrotate.check_no_pending_rotation(config)
    keyrotate.check_key_matches_journal(config)
    try:
        with asyncio.Runner(loop_factory=factory) as runner:
            runner.run(
                serve(
                    config,
                    access_log=args.access_log,
                    redactor=redactor,
                    config_path=Path(args.config),
                )
            )
    except OSError as exc:
        if exc.errno not in LISTEN_ERRORS:
            raise
        print(f"agent-node: {listen_problem(config, args.config, exc)}", file=sys.stderr)
        return 2
    return 0


# the errors only binding [node] listen raises: taken, or not an address of this machine
LISTEN_ERRORS = (errno.EADDRINUSE, errno.EADDRNOTAVAIL)


def listen_problem(config: Config, path: str, exc: OSError) -> str:
    """One line for an address the node cannot listen on, naming the key and the file."""
    why = {
        errno.EADDRINUSE: "the address is in use (another process listens there)",
        errno.EADDRNOTAVAIL: "no interface of this machine has that address",
    }.get(exc.errno or 0, exc.strerror or str(exc))
    return f"[node] listen = {config.node.listen!r} in {path}: {why}; change it or free the port"


def cmd_keygen(args: argparse.Namespace) -> int:
    from eventstore.keys import KEY_FILE, load_or_create_key, public_key_multibase
    from node.config.load import load_config
    from node.ops.filemodes import make_private

    config = load_config(args.config)
    make_private(config.data_path)
    existed = (config.data_path / KEY_FILE).exists()
    key = load_or_create_key(config.data_path)
    print(f"{'existing' if existed else 'new'} key: {config.data_path / KEY_FILE}")
    print(f'public_key = "{public_key_multibase(key.verify_key)}"')
    return 0


def cmd_token_new(args: argparse.Namespace) -> int:
    from node.web.auth import new_token, token_digest

    scopes = [s for value in args.scopes for s in value.split(",") if s]
    unknown = [s for s in scopes if s not in SCOPES]
    if unknown:
        print(
            f"agent-node: unknown scope(s) {', '.join(unknown)}; use {', '.join(SCOPES)}",
            file=sys.stderr,
        )
        return 2
    token = new_token()
    print(f"token: {token}")
    print("# add to runtime.toml (only the hash is stored):")
    print("[[auth.tokens]]")
    print(f'name = "{args.name}"')
    print(f'token_sha256 = "{token_digest(token).hex()}"')
    print(f"scopes = {json.dumps(scopes)}")
    return 0


def _open_offline(config: Config) -> tuple[SigningKey, EventStore]:
    from eventstore.keys import load_or_create_key
    from node.app import open_store
    from node.ops.filemodes import make_private

    make_private(config.data_path)
    key = load_or_create_key(config.data_path)
    return key, open_store(config, key)


def cmd_audit_verify(args: argparse.Namespace) -> int:
    from eventstore.audit import verify_journals
    from node.config.load import load_config
    from node.sync.keyring import key_resolver

    config = load_config(args.config)
    key, store = _open_offline(config)
    try:
        streams = [args.agent] if args.agent else None
        heads = store.heads()
        if args.agent and args.agent not in heads:
            print(f"agent-node: no journal named {args.agent!r}", file=sys.stderr)
            return 1
        total = sum(h.seq for name, h in heads.items() if streams is None or name in streams)
        with progress.bar(total, "audit verify") as shown:
            report = verify_journals(
                store,
                key_resolver(config, key, store),
                streams,
                lambda checked: shown.update(checked - shown.n),
            )
    finally:
        store.close_sync()
    if report.failure:
        print(f"audit FAILED at {visible(str(report.failure))}", file=sys.stderr)
        return 1
    print(f"audit ok: {report.streams} journal(s), {report.envelopes} envelope(s) verified")
    return 0


def cmd_replay(args: argparse.Namespace) -> int:
    """Rebuild every read model from position 0 in a scratch copy (the node's own are not
    touched, so this runs next to a running node), report their sizes, and compare the
    rebuilt on-disk read models with the node's stored ones, database by database."""
    from node.app import build_app
    from node.config.load import load_config
    from node.context import CONTEXT
    from node.ops.filemodes import make_private

    config = load_config(args.config)
    make_private(config.data_path)
    ctx = build_app(config)[CONTEXT]
    rebuilt = ctx.projections.fresh()
    started = time.monotonic()
    try:
        count = 0

        def counted() -> Iterator[Sequence[Envelope]]:
            nonlocal count
            for chunk in ctx.store.iter_chunks():
                count += len(chunk)
                yield chunk

        rebuilt.rebuild(progress.chunks(counted(), ctx.store.last_position, "replay"))
        stored = ctx.projections.disk.summary() if ctx.projections.disk else {}
        fresh = rebuilt.disk.summary() if rebuilt.disk else {}
    finally:
        ctx.store.close_sync()
        if rebuilt.disk is not None:
            rebuilt.disk.close()
    elapsed = time.monotonic() - started
    print(f"replayed {count} envelope(s) in {duration(elapsed)} up to position {rebuilt.position}")
    for projection in rebuilt:
        print(f"  {projection.name}: {_sizes(projection.snapshot())}")
    for name, (entries, _digest) in fresh.items():
        print(f"  {name}: {entries}")
    differ = sorted(name for name in fresh if stored.get(name) != fresh[name])
    if differ:
        print(f"stored read models differ from the rebuild: {', '.join(differ)}")
        return 1
    print("stored read models equal the rebuild")
    return 0


def _sizes(state: object) -> str:
    """A read model's size: its length, or the length of each of its parts."""
    if isinstance(state, dict) and all(isinstance(v, list | dict) for v in state.values()):
        return ", ".join(f"{part} {len(value)}" for part, value in state.items()) or "0"
    return str(len(state)) if isinstance(state, list | dict) else str(state)


def cmd_journal_export(args: argparse.Namespace) -> int:
    import msgspec

    from node.config.load import load_config

    config = load_config(args.config)
    _key, store = _open_offline(config)
    out = open(args.output, "w") if args.output else sys.stdout  # noqa: SIM115
    try:
        head = store.head(args.agent)
        if head is None:
            print(f"agent-node: no journal named {args.agent!r}", file=sys.stderr)
            return 1
        for envelope in progress.items(store.iter_stream(args.agent), head.seq, "export"):
            record = {
                **envelope.as_read(),
                "position": envelope.position,
                "payload": base64.b64encode(envelope.payload).decode(),
                "event": msgspec.to_builtins(envelope.event),
            }
            out.write(json.dumps(record, separators=(",", ":")) + "\n")
    finally:
        store.close_sync()
        if out is not sys.stdout:
            out.close()
    return 0


def cmd_journal_compact(args: argparse.Namespace) -> int:
    import lmdb

    from eventstore.compaction import compact
    from eventstore.store import StoreAlreadyOpenError
    from node.app import JOURNAL_DIR
    from node.config.load import load_config
    from node.ops.filemodes import make_private

    config = load_config(args.config)
    make_private(config.data_path)
    started = time.perf_counter()
    try:
        done = compact(config.data_path / JOURNAL_DIR)
    except (StoreAlreadyOpenError, OSError, lmdb.Error) as exc:  # OSError: a full disk, say
        print(f"agent-node: journal not compacted: {visible(str(exc))}", file=sys.stderr)
        return 1
    mib = 1 << 20
    print(
        f"compacted {config.data_path / JOURNAL_DIR}: {done.bytes_before / mib:,.1f} MiB → "
        f"{done.bytes_after / mib:,.1f} MiB ({done.unused_pages_before:,} unused pages before) "
        f"in {duration(time.perf_counter() - started)}"
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
