"""`agent-node key rotate`: a new node key, announced by a rotation event signed by the old one.

Run on a stopped node (the journal takes one writing process; a running node makes this refuse).
Steps, each durable before the next, so a crash at any point is safe to retry:
  1. the new seed goes to `node.key.next` (0600);
  2. `node.key_rotated` {previous_public_key, new_public_key, heads} is appended to the node's
     key journal `@<name>`, signed by the old key; `heads` are the last seqs the old key signed
     in every journal this node writes (the key journal's own entry is this event's seq);
  3. `node.key.next` replaces `node.key`.
A crash after 1 leaves `node.key.next` without an event: the next `key rotate` discards it and
starts over. A crash after 2 leaves the event without the rename: the next `key rotate` (and
`run`, which refuses to start until then) finishes the rename. The old seed is not kept: old
envelopes verify with the old *public* key, which the signed event records.
"""

from __future__ import annotations

import argparse
import sys
from typing import TYPE_CHECKING

from node.display.humanize import visible, visible_lines

if TYPE_CHECKING:  # the journal, keys and the config load in the functions (CLI start-up time)
    from nacl.signing import SigningKey

    from eventstore.store import EventStore
    from node.config.model import Config

PENDING_KEY_FILE = "node.key.next"


def register(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """Add `key rotate` to the CLI's subcommands."""
    key = sub.add_parser("key", help="manage the node key").add_subparsers(metavar="ACTION")
    rotate = key.add_parser(
        "rotate", help="make a new node key; peers follow through a signed rotation event"
    )
    rotate.add_argument("--config", default="runtime.toml", help="path of runtime.toml")
    rotate.set_defaults(func=cmd_key_rotate)


def check_no_pending_rotation(config: Config) -> None:
    """At start: a rotation interrupted between its event and its rename must be finished first
    (the old key would otherwise sign what peers expect from the new one)."""
    from eventstore.keys import KeyFileError

    if (config.data_path / PENDING_KEY_FILE).exists():
        raise KeyFileError(
            f"{config.data_path / PENDING_KEY_FILE} exists: a key rotation was interrupted; "
            "run `agent-node key rotate` again to finish (or discard) it before starting"
        )


def check_key_matches_journal(config: Config) -> None:
    """At start: after a rotation, `node.key` must be the journal's newest key. An older key (a
    backup restored over it) would sign envelopes every peer rejects as `bad_signature`."""
    from eventstore.keys import KEY_FILE, KeyFileError, load_key, public_key_multibase
    from node.app import open_store
    from projections.keys import KeyHistory, key_journal

    key_path = config.data_path / KEY_FILE
    if not key_path.exists():
        return
    key = load_key(key_path)
    store = open_store(config, key)
    try:
        history = KeyHistory()
        for envelope in store.iter_stream(key_journal(config.node.name)):
            history.apply(envelope)
    finally:
        store.close_sync()
    current, ours = history.current(config.node.name), public_key_multibase(key.verify_key)
    if current is not None and current != ours:
        raise KeyFileError(
            f"{key_path} holds {ours}, but the journal says the node key is {current} since "
            "its last rotation: restore the right node.key (an older one signs nothing peers "
            "accept)"
        )


def cmd_key_rotate(args: argparse.Namespace) -> int:
    import asyncio

    from eventstore.keys import KEY_FILE, load_key
    from eventstore.store import StoreAlreadyOpenError
    from node.app import open_store
    from node.config.load import load_config
    from node.ops.filemodes import make_private

    config = load_config(args.config)
    make_private(config.data_path)
    key_path = config.data_path / KEY_FILE
    if not key_path.exists():
        print(f"agent-node: no node key at {key_path}: nothing to rotate", file=sys.stderr)
        return 1
    old_key = load_key(key_path)
    store = open_store(config, old_key)
    try:
        message = asyncio.run(rotate(config, store, old_key))
    except StoreAlreadyOpenError as exc:
        print(f"agent-node: stop the node first: {visible(str(exc))}", file=sys.stderr)
        store.close_sync()
        return 1
    print(visible_lines(message))
    return 0


async def rotate(config: Config, store: EventStore, old_key: SigningKey) -> str:
    """Rotate (or finish an interrupted rotation); closes the store. Returns what it did."""
    from nacl.signing import SigningKey

    from eventstore.durable import fsync_path
    from eventstore.keys import KEY_FILE, KeyFileError, load_key, public_key_multibase, write_key
    from node.ops.files import move_durably
    from projections.catalogue import KeyRotated, event_of
    from projections.keys import KeyHistory, key_journal

    me, data = config.node.name, config.data_path
    pending = data / PENDING_KEY_FILE
    store.start()  # takes the writer lock: refused while a node writes this journal
    try:
        history = KeyHistory()
        for envelope in store.iter_stream(key_journal(me)):
            history.apply(envelope)
        if pending.exists():
            new_key = load_key(pending)
            new_text = public_key_multibase(new_key.verify_key)
            if history.current(me) == new_text:
                move_durably(pending, data / KEY_FILE)
                return f"finished an interrupted rotation: the node key is now {new_text}"
            pending.unlink()  # never announced: discard it and rotate afresh
        previous_text = public_key_multibase(old_key.verify_key)
        if history.current(me) not in (None, previous_text):
            raise KeyFileError(
                f"{data / KEY_FILE} holds {previous_text}, but the journal says the node key is "
                f"{history.current(me)}: restore the right node.key before rotating"
            )
        new_key = SigningKey.generate()
        write_key(pending, new_key)
        fsync_path(data)
        stream = key_journal(me)
        heads = _own_heads(store, me)
        own_head = store.head(stream)
        heads[stream] = (own_head.seq if own_head else 0) + 1  # this event, the last old-key one
        new_text = public_key_multibase(new_key.verify_key)
        rotated = KeyRotated(
            previous_public_key=previous_text, new_public_key=new_text, heads=heads
        )
        await store.append(stream, *event_of(rotated))
    finally:
        await store.close()
    move_durably(pending, data / KEY_FILE)
    return (
        f"rotated the node key of {me}\n"
        f"  previous: {previous_text} (signed {sum(heads.values())} envelope(s) in "
        f"{len(heads)} journal(s); it stays valid for them only)\n"
        f"  new:      {new_text}\n"
        f'Start the node; peers follow through the signed event in journal "{stream}". '
        "Peers that configure public_key may keep the old one or change it to the new one."
    )


def _own_heads(store: EventStore, me: str) -> dict[str, int]:
    """Head seq of every journal this node writes (its origin wrote seq 1)."""
    heads: dict[str, int] = {}
    for stream, head in store.heads().items():
        first = store.get(stream, 1)
        if first is not None and first.event.origin == me:
            heads[stream] = head.seq
    return heads
