"""The writer: one thread that group-commits everything queued in one transaction, one fsync.

Appends from coroutines and threads queue up; the writer takes everything queued (up to
`max_batch` requests) and, in one write transaction, reads each stream's head, stages the
envelopes (seq, `prev`, one `ts`, hash), hands each message to the signing helper as it is
staged, lets the indexer fold the batch, writes the records, the total order and the heads, and
commits. Then `deliver` hands the envelopes to the listeners and releases the callers, and the
data file's zeros ahead are topped up (zeros.py). A full map grows and the batch is retried; any
other storage fault fails the whole batch, so nothing acknowledged is lost.

Fences (`EventStore.fence`): an append to a fenced journal is refused (`Fenced`) once the
fence's deadline (`time.monotonic()`) has passed, checked as the writer stages it inside the
commit's transaction and again just before that transaction commits: a write queued in time
but still uncommitted at the deadline (the process was stopped, say) fails instead. Imports
are never fenced (a fenced node still takes the new home's envelopes). With no fence set, the
cost is one truth test per append.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import math
import queue
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, NamedTuple

import lmdb
import msgspec

from eventstore.envelope import (
    Envelope,
    Event,
    digest_of,
    encode_event,
    signed_bytes,
    utc_now,
)
from eventstore.growth import MapGate
from eventstore.imports import Verified, stage_imports
from eventstore.indexing import Indexer
from eventstore.layout import (
    MAX_STREAM_BYTES,
    Head,
    JournalDbs,
    decode_head,
    encode_head,
    encode_record,
    event_key,
    position_key,
)
from eventstore.rewind import refold, rewind_in
from eventstore.signing import SharedSigner
from eventstore.zeros import ZerosAhead

SHARE_SIGNING_AT = 16  # appends in a batch; below, waking the helper costs more than it saves
_LONGEST_SIGNED = len(signed_bytes("x" * MAX_STREAM_BYTES, 0, bytes(32)))


class NewEvent(NamedTuple):
    stream: str
    type: str
    data: dict[str, Any]


@dataclass(slots=True)
class Request:
    """One caller's unit of work; all its events commit together or not at all."""

    future: asyncio.Future[Any] | concurrent.futures.Future[Any]
    appends: Sequence[NewEvent] = ()
    imports: Sequence[Verified] = ()
    result: list[Any] = field(default_factory=list)
    error: BaseException | None = None
    single: bool = False  # the caller wants the one envelope, not a list
    rewind: tuple[str, int] | None = None  # (stream, keep_through): rewind.py, alone
    seal: bool = False  # once staged, its streams refuse every later append (store.py)

    def finish(self) -> None:
        if self.future.done():  # the caller gave up waiting; the write stands
            return
        if self.error is not None:
            self.future.set_exception(self.error)
        else:
            self.future.set_result(self.result[0] if self.single else self.result)


_STOP = object()


class Fenced(RuntimeError):
    """An append to a journal whose fence deadline has passed (`EventStore.fence`)."""

    def __init__(self, stream: str) -> None:
        super().__init__(f"journal {stream!r} is fenced: this node may not write it now")
        self.stream = stream


class _FenceCrossed(Exception):
    """A deadline passed while the batch was staged: stage it again (those appends fail)."""


class Writer:
    """The only thread that writes the environment once the store has started."""

    def __init__(
        self,
        env: lmdb.Environment,
        dbs: JournalDbs,
        gate: MapGate,
        zeros: ZerosAhead,
        signer: SharedSigner,
        origin: str,
        indexer: Indexer | None,
        deliver: Callable[[list[Request], list[Envelope]], None],
        next_position: int,
        max_batch: int,
    ) -> None:
        self._env = env
        self._dbs = dbs
        self._gate = gate
        self._zeros = zeros
        self._signer = signer
        self._origin = origin
        self._indexer = indexer
        self._deliver = deliver
        self.next_position = next_position
        self.max_batch = max_batch
        self.queue: queue.SimpleQueue[Any] = queue.SimpleQueue()
        self._thread: threading.Thread | None = None
        self._share_signing = True
        # journal → deadline (monotonic seconds) after which its appends fail; set and lifted
        # from other threads (single dict operations, atomic under the GIL)
        self.fences: dict[str, float] = {}
        # journals written elsewhere now: refused whatever a fence says (store.py `disown`)
        self.disowned: set[str] = set()
        self.rewinds_pending = 0  # rewind requests queued: only then are batches split
        self.deliver_rewind: Callable[[Request, str, list[Envelope]], None] | None = None
        self._fence_due = math.inf  # the earliest deadline of a fenced append being staged

    @property
    def started(self) -> bool:
        return self._thread is not None

    def start(self, share_signing: bool) -> None:
        """`share_signing`: let a helper thread sign half of large batches (only worth it
        where the process has a core for it). Without it (one core), the writer lets the
        event loop run once before it commits what it took: the loop then queues what its
        ready connections send, and the commit takes them too. Under wrk's 64 connections a
        commit then holds 62 appends instead of 41, a third fewer commits that each cost the
        same fsyncs and page writes (issue 26: about 6 % less CPU per POST
        /api/v1/findings); an idle loop hands the GIL straight back."""
        self._share_signing = share_signing
        self._thread = threading.Thread(
            target=self._write_loop, name="eventstore-writer", daemon=True
        )
        self._thread.start()

    def stop(self) -> None:
        """Commit everything queued so far, then end the thread (blocks until it has)."""
        if self._thread is not None:
            self.queue.put(_STOP)
            self._thread.join()

    def _write_loop(self) -> None:
        stopping = False
        while not stopping:
            batch: list[Request] = []
            item = self.queue.get()
            yielded = False
            while True:
                if item is _STOP:
                    stopping = True
                else:
                    batch.append(item)
                if len(batch) >= self.max_batch:
                    break
                try:
                    item = self.queue.get_nowait()
                except queue.Empty:
                    if yielded or stopping or self._share_signing:
                        break
                    # one core: let the event loop take what is ready before this commit
                    yielded = True
                    time.sleep(0)
                    try:
                        item = self.queue.get_nowait()
                    except queue.Empty:
                        break
            if batch:
                self._commit(batch)

    def _commit(self, batch: list[Request]) -> None:
        if not self.rewinds_pending:
            self._commit_plain(batch)
            return
        plain: list[Request] = []
        for request in batch:  # a rewind commits alone, in its place in the queue
            if request.rewind is None:
                plain.append(request)
                continue
            if plain:
                self._commit_plain(plain)
                plain = []
            self._rewind(request)
        if plain:
            self._commit_plain(plain)

    def _rewind(self, request: Request) -> None:
        assert request.rewind is not None
        stream, keep_through = request.rewind
        removed: list[Envelope] = []

        def rewind(txn: lmdb.Transaction[bytes]) -> None:
            removed[:] = rewind_in(txn, self._dbs, stream, keep_through, self.next_position - 1)
            if removed and self._indexer is not None:
                refold(txn, self._dbs, self._indexer)

        try:
            self._gate.write_growing(rewind)
            if removed and self._indexer is not None:
                self._indexer.committed()
            request.result = removed
        except Exception as exc:
            request.error = exc
            removed = []
        finally:
            self.rewinds_pending -= 1
        if self.deliver_rewind is not None:
            self.deliver_rewind(request, stream, removed)
        else:
            request.finish()

    def _commit_plain(self, batch: list[Request]) -> None:
        while True:
            try:
                envelopes = self._write_batch(batch)
                if self._indexer is not None and envelopes:
                    self._indexer.committed()
                break
            except lmdb.MapFullError:
                self._gate.grow()
            except _FenceCrossed:  # staged again: the appends past their deadline now fail
                continue
            except Exception as exc:  # a storage fault: fail the whole batch, lose nothing acked
                for request in batch:
                    request.error = exc
                envelopes = []
                break
        self._deliver(batch, envelopes)
        self._zeros.keep()

    def _write_batch(self, batch: list[Request]) -> list[Envelope]:
        position = self.next_position
        ts = utc_now()  # one commit, one instant
        dbs = self._dbs
        self._fence_due = math.inf
        with self._env.begin(write=True) as txn:
            heads: dict[str, Head | None] = {}

            def head_of(stream: str) -> Head | None:
                if stream not in heads:
                    raw = txn.get(stream.encode(), db=dbs.heads)
                    heads[stream] = decode_head(raw) if raw else None
                return heads[stream]

            plan: list[tuple[Request, list[Envelope]]] = []
            imported: dict[bytes, bytes] = {}  # event key → digest of imports staged in this batch
            writers: dict[str, str] = {}  # journal → origin of its newest import in this batch
            signer = self._signer
            # each signed message goes to a helper thread (on another core) as soon as it is
            # staged; the messages it has not claimed when staging ends are signed here
            appends = sum(len(request.appends) for request in batch)
            helped = self._share_signing and appends >= SHARE_SIGNING_AT
            signer.begin(appends, _LONGEST_SIGNED, helped=helped)
            slots: list[tuple[list[Envelope], int]] = []
            for request in batch:
                request.result = []
                request.error = None
                try:
                    staged = (
                        self._stage_appends(request, head_of, ts, position)
                        if request.appends
                        else stage_imports(
                            request.imports,
                            request.result,
                            head_of,
                            txn,
                            dbs.events,
                            position,
                            imported,
                            writers,
                        )
                    )
                except Exception as exc:
                    request.error = exc
                    continue
                for envelope in staged:
                    heads[envelope.stream] = Head(envelope.seq, envelope.digest)
                position += len(staged)
                plan.append((request, staged))
                if request.appends:
                    for i, e in enumerate(staged):
                        signer.add(signed_bytes(e.stream, e.seq, e.digest))
                        slots.append((staged, i))
            if self._indexer is not None and plan:
                # read models need no signature: folding them now gives the helper thread
                # that long to sign more of this batch, instead of the writer after it
                self._indexer.fold(txn, [e for _, staged in plan for e in staged])
            _fill_signatures(slots, signer.finish())
            envelopes: list[Envelope] = []
            for request, staged in plan:
                envelopes.extend(staged)
                if request.appends:
                    request.result = staged
            rows = [
                (
                    event_key(e.stream, e.seq),
                    encode_record((e.position, e.payload, e.digest, e.signature)),
                )
                for e in envelopes
            ]
            _, added = txn.cursor(db=dbs.events).putmulti(rows, overwrite=False)
            if added != len(rows):
                raise RuntimeError("an envelope of this batch is already stored")
            txn.cursor(db=dbs.all).putmulti(
                (
                    (position_key(e.position), key)
                    for e, (key, _) in zip(envelopes, rows, strict=True)
                ),
                append=True,
            )
            for stream, head in heads.items():
                if head is not None:
                    txn.put(stream.encode(), encode_head(head), db=dbs.heads)
            if self._fence_due != math.inf and time.monotonic() > self._fence_due:
                raise _FenceCrossed  # aborts this transaction
        self.next_position = position
        return envelopes

    def _stage_appends(
        self,
        request: Request,
        head_of: Callable[[str], Head | None],
        ts: str,
        position: int,
    ) -> list[Envelope]:
        """Build the request's envelopes (signed later, together); all or none of them."""
        staged: list[Envelope] = []
        overlay: dict[str, Head] = {}
        fences = self.fences
        for stream, type_, data in request.appends:
            if fences:
                self._check_fence(stream)
            head = overlay.get(stream) or head_of(stream)
            seq = head.seq + 1 if head else 1
            prev = head.payload_hash if head else ""
            event = Event(type=type_, ts=ts, origin=self._origin, prev=prev, data=data)
            payload = encode_event(event)
            digest = digest_of(payload)
            staged.append(Envelope(stream, seq, payload, digest, b"", event, position))
            position += 1
            overlay[stream] = Head(seq, digest)
        if request.seal:  # nothing staged after it may follow it into a journal
            for stream in overlay:
                self.disowned.add(stream)
                self.fences[stream] = -math.inf
        return staged

    def _check_fence(self, stream: str) -> None:
        deadline = self.fences.get(stream)
        if deadline is not None:
            if time.monotonic() > deadline:
                raise Fenced(stream)
            self._fence_due = min(self._fence_due, deadline)


def _fill_signatures(slots: list[tuple[list[Envelope], int]], signatures: list[bytes]) -> None:
    for (staged, i), signature in zip(slots, signatures, strict=True):
        staged[i] = msgspec.structs.replace(staged[i], signature=signature)
