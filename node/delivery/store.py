"""The outbox on disk: an LMDB environment of its own at `<data_dir>/outbox`.

Its own environment, not the journal's: the journal has one writer thread whose transactions
must not wait for the outbox's, and the outbox's writes (attempts, backoff) are not facts of
the journal. It holds only what the journal already implies plus the state of attempts, so it
is rebuilt from the journal if it is lost (a new one starts at the journal's end: see
docs/notifications.md, "Guarantees").

Databases (keys use 16-byte BLAKE2b digests of ids, which may be longer than LMDB keys allow):
  meta     cursor → u64 (the last journal position folded), format → the layout's version
  lanes    lane digest → Lane: one ordered queue of notifications to one destination
  entries  lane digest + seq (8 bytes) + n (1 byte) → Entry: the queue's notifications, in order
  configs  task digest + config digest → PushConfig: A2A push configs in force
  done     journal digest + entry digest → [journal, entry id]: ended, not yet journaled

Writes are ops (database, key, value or None) encoded on the loop and committed by one writer
thread in one transaction per batch (group commit, one fsync): `Writer`.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import hashlib
import logging
import struct
from collections.abc import Iterator
from pathlib import Path
from typing import Literal

import lmdb
import msgspec

log = logging.getLogger(__name__)
FORMAT = b"1"
MAP_SIZE = 1 << 30  # virtual: the file grows with what it holds
DbName = Literal["meta", "lanes", "entries", "configs", "done"]
Op = tuple[DbName, bytes, bytes | None]
_u64 = struct.Struct(">Q")


class Entry(msgspec.Struct, array_like=True):
    """One notification: what to send (`body`), to which lane, from which event."""

    id: str  # portable across nodes: "<seq>.<n>:<lane>" (delivery.progress names it)
    lane: str
    journal: str
    seq: int
    n: int
    kind: str  # push, webhook or apprise
    label: str  # what it says: the task's A2A state, or requested / escalated
    made_at: float  # the event's time (epoch seconds): latency is measured from it
    due: float  # not before (an escalation's time)
    deadline: float  # given up after
    body: bytes
    attempts: int = 0


class Lane(msgspec.Struct, kw_only=True):
    """One ordered queue (a push config of a task, or a channel of an approval request) and
    how its deliveries went; what the API shows."""

    id: str
    kind: str  # push or approval
    journal: str
    subject: str  # the task or approval id
    target: str  # the config id or the channel name
    client: str  # the token (push) or the channel (approval) whose limits it counts against
    pending: int = 0
    pending_bytes: int = 0
    due: float = 0.0  # when its head may next be tried (epoch seconds); 0 when empty
    delivered: int = 0
    attempts: int = 0
    failed_attempts: int = 0
    dropped: int = 0
    expired: int = 0
    last_status: int = 0
    last_error: str = ""
    last_attempt_at: str = ""
    last_delivered_at: str = ""
    closed: str = ""  # why nothing more comes: removed, final, resolved, gone
    touched: float = 0.0


class PushConfig(msgspec.Struct, kw_only=True):
    task: str
    id: str
    client: str
    journal: str
    seq: int  # of its push.configured: it applies to changes after it
    created_at: str
    sealed: dict[str, str] = {}


def digest(text: str) -> bytes:
    return hashlib.blake2b(text.encode("utf-8", "surrogatepass"), digest_size=16).digest()


def entry_key(lane: str, seq: int, n: int) -> bytes:
    return digest(lane) + _u64.pack(seq) + bytes((n,))


def config_key(task: str, config_id: str) -> bytes:
    return digest(task) + digest(config_id)


def done_key(journal: str, entry_id: str) -> bytes:
    return digest(journal) + digest(entry_id)


_encode = msgspec.msgpack.Encoder().encode
decode_entry = msgspec.msgpack.Decoder(Entry).decode
decode_lane = msgspec.msgpack.Decoder(Lane).decode
decode_config = msgspec.msgpack.Decoder(PushConfig).decode
_decode_done = msgspec.msgpack.Decoder(tuple[str, str]).decode


def put_entry(entry: Entry) -> Op:
    return ("entries", entry_key(entry.lane, entry.seq, entry.n), _encode(entry))


def delete_entry(entry: Entry) -> Op:
    return ("entries", entry_key(entry.lane, entry.seq, entry.n), None)


def put_lane(lane: Lane) -> Op:
    return ("lanes", digest(lane.id), _encode(lane))


def delete_lane(lane_id: str) -> Op:
    return ("lanes", digest(lane_id), None)


def put_config(config: PushConfig) -> Op:
    return ("configs", config_key(config.task, config.id), _encode(config))


def delete_config(task: str, config_id: str) -> Op:
    return ("configs", config_key(task, config_id), None)


def put_done(journal: str, entry_id: str) -> Op:
    return ("done", done_key(journal, entry_id), _encode((journal, entry_id)))


def delete_done(journal: str, entry_id: str) -> Op:
    return ("done", done_key(journal, entry_id), None)


def put_cursor(position: int) -> Op:
    return ("meta", b"cursor", _u64.pack(position))


class OutboxStore:
    """The environment, its reads (any thread) and its one writer thread."""

    def __init__(self, path: Path) -> None:
        path.mkdir(parents=True, exist_ok=True, mode=0o700)
        self.env = lmdb.open(str(path), map_size=MAP_SIZE, max_dbs=8, mode=0o600)
        self.dbs = {
            name: self.env.open_db(name.encode())
            for name in ("meta", "lanes", "entries", "configs", "done")
        }
        self.created = False
        with self.env.begin(write=True) as txn:
            found = txn.get(b"format", db=self.dbs["meta"])
            if found is None:
                txn.put(b"format", FORMAT, db=self.dbs["meta"])
                self.created = True
            elif found != FORMAT:
                raise RuntimeError(f"{path}: outbox format {found!r}, this node knows {FORMAT!r}")
        self._thread = concurrent.futures.ThreadPoolExecutor(1, thread_name_prefix="outbox")

    def close(self) -> None:
        self._thread.shutdown(wait=True)
        self.env.close()

    # ------------------------------------------------------------------ reads
    def cursor(self) -> int | None:
        with self.env.begin() as txn:
            raw = txn.get(b"cursor", db=self.dbs["meta"])
        return _u64.unpack(raw)[0] if raw is not None else None

    def head(self, lane: str) -> Entry | None:
        """The lane's first entry (the next to deliver)."""
        prefix = digest(lane)
        with self.env.begin(db=self.dbs["entries"]) as txn:
            cur = txn.cursor()
            if cur.set_range(prefix) and cur.key()[:16] == prefix:
                return decode_entry(cur.value())
        return None

    def entries(self, lane: str) -> list[Entry]:
        prefix = digest(lane)
        out = []
        with self.env.begin(db=self.dbs["entries"]) as txn:
            cur = txn.cursor()
            if cur.set_range(prefix):
                for key, value in cur:
                    if key[:16] != prefix:
                        break
                    out.append(decode_entry(value))
        return out

    def all_entries(self) -> Iterator[Entry]:
        with self.env.begin(db=self.dbs["entries"]) as txn:
            for _, value in txn.cursor():
                yield decode_entry(value)

    def all_lanes(self) -> list[Lane]:
        with self.env.begin(db=self.dbs["lanes"]) as txn:
            return [decode_lane(v) for _, v in txn.cursor()]

    def all_configs(self) -> list[PushConfig]:
        with self.env.begin(db=self.dbs["configs"]) as txn:
            return [decode_config(v) for _, v in txn.cursor()]

    def done(self) -> list[tuple[str, str]]:
        with self.env.begin(db=self.dbs["done"]) as txn:
            return [_decode_done(v) for _, v in txn.cursor()]

    # ------------------------------------------------------------------ writes
    def write(self, ops: list[Op]) -> None:
        """Commit `ops` in one transaction (on the writer thread)."""
        try:
            self._write(ops)
        except lmdb.MapFullError:
            self.env.set_mapsize(self.env.info()["map_size"] * 2)
            self._write(ops)

    def _write(self, ops: list[Op]) -> None:
        with self.env.begin(write=True) as txn:
            for name, key, value in ops:
                db = self.dbs[name]
                if value is None:
                    txn.delete(key, db=db)
                else:
                    txn.put(key, value, db=db)

    async def commit(self, ops: list[Op]) -> None:
        if ops:
            await asyncio.get_running_loop().run_in_executor(self._thread, self.write, ops)


class Writer:
    """Group commit: ops queued while a transaction commits go into the next one together."""

    def __init__(self, store: OutboxStore) -> None:
        self.store = store
        self._queued: list[Op] = []
        self._waiters: list[asyncio.Future[None]] = []
        self._running: asyncio.Task[None] | None = None

    def submit(self, ops: list[Op]) -> asyncio.Future[None]:
        future: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self._queued.extend(ops)
        self._waiters.append(future)
        if self._running is None or self._running.done():
            self._running = asyncio.ensure_future(self._drain())
        return future

    async def _drain(self) -> None:
        while self._waiters:
            ops, waiters = self._queued, self._waiters
            self._queued, self._waiters = [], []
            try:
                await self.store.commit(ops)
            except Exception as exc:  # the disk failed: every caller learns it
                log.exception("the outbox could not commit %d change(s)", len(ops))
                for waiter in waiters:
                    if not waiter.done():
                        waiter.set_exception(exc)
                continue
            for waiter in waiters:
                if not waiter.done():
                    waiter.set_result(None)

    async def idle(self) -> None:
        """Once everything submitted so far is committed."""
        while self._running is not None and not self._running.done():
            await asyncio.shield(self._running)
