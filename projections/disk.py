"""Read models that grow with history, kept in LMDB: logs, findings, tasks, approvals, the A2A
view and who owns each task and approval.

The journal's writer folds them inside the write transaction of the envelopes they fold
(`EventStore(indexer=...)`), so they are never behind the journal, after a `kill -9` too, and
a start needs no replay for them; the heap holds none of their entries, and pages and lookups
are served by LMDB read transactions. Each model names its databases (`rm.<model>.<db>`) and
keeps no state in Python, so an aborted transaction leaves nothing behind.

The same models fold into a scratch environment of their own (`DiskModels.scratch`) for a
rebuild that must not touch the node's: `agent-node replay` and the rebuild-equals-live tests.

Faults: the whole batch folds in a child transaction; if a model raises, that is undone and
the batch is folded again one (envelope, model) pair at a time, each in its own child
transaction, so only the pair that raised is skipped and reported (`on_fault`), never the
journal's write. The models' code is fingerprinted with their position: a change of code
empties them and they are folded again from position 0 before the node starts.
"""

from __future__ import annotations

import hashlib
import inspect
import shutil
import tempfile
from collections.abc import Callable, Container, Iterable, Iterator, Sequence
from contextlib import AbstractContextManager, contextmanager, suppress
from operator import attrgetter
from typing import TYPE_CHECKING, Any, Protocol, TypeVar

import lmdb

from eventstore.envelope import Envelope

if TYPE_CHECKING:  # the stubs' generic; every transaction here uses buffers=False
    Txn = lmdb.Transaction[bytes]
else:
    Txn = lmdb.Transaction
Read = Callable[[], AbstractContextManager[Txn]]
FaultHook = Callable[[str, Envelope, Exception], None]
_META = b"rm.meta"
_POSITION, _FINGERPRINT = b"position", b"fingerprint"
_MAX_KEY = 511
_SCRATCH_MAP_SIZE = 1 << 40  # address space only: the file grows with what is written
_BULK_ENVELOPES = 2048  # a rebuild commits its scratch transaction about this often
P = TypeVar("P")
_event_type = attrgetter("event.type")


def u64(n: int) -> bytes:
    """Keys that sort as the numbers do."""
    return n.to_bytes(8, "big")


def from_u64(raw: bytes) -> int:
    return int.from_bytes(raw, "big")


def key_of(value: str | bytes, room: int = 0) -> bytes:
    """`value` as (part of) a key that leaves `room` bytes for the rest of it: LMDB keys end at
    511 bytes, and a 128-character id of 4-byte characters is 512; a longer one becomes its
    digest, behind a byte that starts no UTF-8 text (nor a msgpack pair)."""
    raw = value.encode("utf-8", "surrogatepass") if isinstance(value, str) else value
    return raw if len(raw) + room <= _MAX_KEY else b"\xff" + hashlib.sha256(raw).digest()


class Space:
    """Where the models live: an LMDB environment and how to read it."""

    def __init__(self, env: lmdb.Environment, read: Read, scratch: bool = False) -> None:
        self.env = env
        self.read = read
        # a rebuild's copy: no reader asks it for what was just folded, so models keep no
        # cache of their newest entries here
        self.scratch = scratch
        self.opened: dict[str, Any] = {}  # "<model>.<db>" → its handle

    def db(self, model: str, name: str) -> Any:
        handle = self.env.open_db(f"rm.{model}.{name}".encode())
        self.opened[f"{model}.{name}"] = handle
        return handle


class DiskModel(Protocol):
    name: str
    # Optional class attribute `handles`: the event types it folds (absent: every envelope).

    def bind(self, space: Space) -> None:
        """Open its databases."""

    def fold(self, txn: Txn, envelope: Envelope) -> object:
        """Fold one envelope inside `txn`; deterministic, no state outside LMDB. What it
        returns is its own (the tasks model's changes); the writer ignores it.

        A model may have `parts`: objects that keep some of its tables and answer reads
        (`Projections.get` finds them by class); the model folds them itself.

        A model whose state depends on no other model (no ownership rule) may also have
        `fold_many(txn, envelopes)`, the same fold over a batch, which the writer prefers.

        A model may also keep a cache of what it folded, for readers that ask right after a
        commit, if it has `staged_forget()` (a fold, or its retry, starts: drop what the
        previous attempt staged) and `staged_commit()` (that fold's transaction committed)."""

    def snapshot(self) -> Any:
        """Plain data, equal for equal states (tests and `replay` compare them)."""


class Guard(Protocol):
    guarded: frozenset[str]  # the event types the rule applies to

    def allows(self, envelope: Envelope, txn: Txn | None = None) -> bool: ...


Fold = Callable[[Txn, Envelope], object]


class DiskModels:
    """The on-disk read models, folded together envelope by envelope (the ownership rule first,
    as `Projections` does for the in-memory ones). The event store's `Indexer`."""

    def __init__(self, models: Iterable[DiskModel]) -> None:
        self._models: dict[str, DiskModel] = {}
        self._by_class: dict[type, DiskModel] = {}
        for model in models:
            self._models[model.name] = model
            for part in (model, *getattr(model, "parts", ())):
                self._by_class[type(part)] = part
        self._folds_by_type: dict[str, tuple[tuple[str, Fold], ...]] = {}
        self._unbatched_by_type: dict[str, tuple[tuple[str, Fold], ...]] = {}
        self._batched: dict[str, Any] = {
            name: model
            for name, model in self._models.items()
            if hasattr(model, "fold_many") and not set(getattr(model, "guarded", ()))
        }
        self._guard: Guard | None = self._models.get("owners")  # type: ignore[assignment]
        self._staging: list[Any] = [m for m in self._models.values() if hasattr(m, "staged_commit")]
        self.on_fault: FaultHook = _ignore
        self._faults: list[tuple[str, Envelope, Exception]] = []
        self.space: Space | None = None
        self._meta: Any = None
        self._scratch_dir: tempfile.TemporaryDirectory[str] | None = None

    # ------------------------------------------------------------------ the Indexer protocol
    def attach(self, env: lmdb.Environment, read: Read, scratch: bool = False) -> None:
        self.space = Space(env, read, scratch)
        self._meta = env.open_db(_META)
        for model in self._models.values():
            model.bind(self.space)

    def prepare(self, txn: Txn) -> None:
        """Empty the models if they are new here or their code changed: they are folded
        again from position 0."""
        if txn.get(_FINGERPRINT, db=self._meta) == self.fingerprint().encode():
            return
        self.reset(txn)
        txn.put(_FINGERPRINT, self.fingerprint().encode(), db=self._meta)

    def reset(self, txn: Txn) -> None:
        """Empty every model (position 0): the journal was rewound, or their code changed."""
        env = self.space_env()
        for model in self._models.values():
            for name in _databases_of(txn, model.name):
                txn.drop(env.open_db(name, txn=txn), delete=False)
        txn.put(_POSITION, u64(0), db=self._meta)
        self._forget_staged()

    def position(self, txn: Txn) -> int:
        raw = txn.get(_POSITION, db=self._meta)
        return from_u64(raw) if raw else 0

    def fold(self, txn: Txn, envelopes: Sequence[Envelope]) -> None:
        self._faults = []
        fresh = _newer(envelopes, self.position(txn))
        if not fresh:
            return
        self._forget_staged()
        self._fold_isolated(txn, fresh)
        txn.put(_POSITION, u64(fresh[-1].position), db=self._meta)

    def _fold_isolated(self, txn: Txn, fresh: list[Envelope]) -> None:
        """Fold in a child transaction; if a model raises, undo it and fold again pair by
        pair, each in a child transaction of its own, skipping (and noting) what raises."""
        try:
            with self.space_env().begin(write=True, parent=txn) as child:
                self._fold_all(child, fresh)
        except Exception:  # some model raised: fold again pair by pair, skipping what raises
            self._forget_staged()
            for envelope in fresh:
                for name, fold in self._folds(envelope):
                    try:
                        with self.space_env().begin(write=True, parent=txn) as child:
                            fold(child, envelope)
                    except Exception as exc:
                        self._faults.append((name, envelope, exc))

    def _fold_all(self, txn: Txn, fresh: list[Envelope]) -> None:
        """Every model over `fresh`, in `txn`, with no isolation: the first raise ends it."""
        for model in self._batched.values():
            model.fold_many(txn, fresh)
        unbatched, by_type = self._unbatched, self._unbatched_by_type
        # one C-level pass: a batch of types that no model folds one by one (findings, logs:
        # most of a replay) skips the loop
        if not any(by_type.get(kind, True) for kind in set(map(_event_type, fresh))):
            return
        for envelope in fresh:
            folds = by_type.get(envelope.event.type)
            if folds is None:
                folds = unbatched(envelope)
            for _, fold in folds:
                fold(txn, envelope)

    def committed(self) -> None:
        for model in self._staging:
            model.staged_commit()
        faults, self._faults = self._faults, []
        for name, envelope, exc in faults:
            with suppress(Exception):  # the reporter failed: it logs its own faults
                self.on_fault(name, envelope, exc)

    def _forget_staged(self) -> None:
        for model in self._staging:
            model.staged_forget()

    # ------------------------------------------------------------------ use
    def get(self, kind: type[P]) -> P | None:
        return self._by_class.get(kind)  # type: ignore[return-value]

    def __iter__(self) -> Iterator[DiskModel]:
        return iter(self._models.values())

    def space_env(self) -> lmdb.Environment:
        if self.space is None:
            raise RuntimeError("the disk read models are not attached to an environment")
        return self.space.env

    def read(self) -> AbstractContextManager[Txn]:
        if self.space is None:
            raise RuntimeError("the disk read models are not attached to an environment")
        return self.space.read()

    def fingerprint(self) -> str:
        """Of the models' source code: a change means a fold from position 0."""
        digest = hashlib.sha256()
        for model in sorted(self._models.values(), key=lambda m: m.name):
            digest.update(model.name.encode() + b"\0")
            for part in (model, *getattr(model, "parts", ())):
                module = inspect.getmodule(type(part))
                if module is None:
                    raise TypeError(f"no module for {type(part).__qualname__}")
                digest.update(inspect.getsource(module).encode())
        return digest.hexdigest()

    def snapshot(self) -> dict[str, Any]:
        return {name: model.snapshot() for name, model in self._models.items()}

    def summary(self) -> dict[str, tuple[int, str]]:
        """Per database, its entries and a digest of its content, read in one transaction:
        what `replay` compares between the stored models and a rebuild, without holding
        either in memory."""
        out: dict[str, tuple[int, str]] = {}
        space = self.space
        if space is None:
            return out
        with space.read() as txn:
            for name, db in sorted(space.opened.items()):
                digest, count = hashlib.sha256(), 0
                for key, value in txn.cursor(db):
                    digest.update(len(key).to_bytes(4, "big") + key)
                    digest.update(len(value).to_bytes(4, "big") + value)
                    count += 1
                out[name] = (count, digest.hexdigest())
        return out

    # ------------------------------------------------------------------ scratch copies
    def fresh(self) -> DiskModels:
        """Empty instances of the same models in a scratch environment of their own."""
        copy = DiskModels(type(m)() for m in self._models.values())
        copy.on_fault = self.on_fault
        copy.scratch()
        return copy

    def scratch(self) -> DiskModels:
        """Attach to a new temporary environment (deleted with this object or by `close`)."""
        self._scratch_dir = tempfile.TemporaryDirectory(prefix="agent-node-rm-")
        env = lmdb.open(
            self._scratch_dir.name, map_size=_SCRATCH_MAP_SIZE, max_dbs=64, sync=False, lock=False
        )

        @contextmanager
        def read() -> Iterator[Txn]:
            with env.begin(buffers=False) as txn:
                yield txn

        self.attach(env, read, scratch=True)
        with env.begin(write=True) as txn:
            self.prepare(txn)
        return self

    @property
    def is_scratch(self) -> bool:
        return self._scratch_dir is not None

    def fold_own(self, envelopes: Sequence[Envelope]) -> None:
        """Fold in a write transaction of the scratch environment."""
        with self.space_env().begin(write=True) as txn:
            self.fold(txn, envelopes)
        self.committed()

    @contextmanager
    def bulk(self) -> Iterator[Callable[[Sequence[Envelope]], None]]:
        """A rebuild's fold into the scratch environment, chunk after chunk, committed every
        `_BULK_ENVELOPES` envelopes and at the end (see `_BulkFold`)."""
        if not self.is_scratch:
            raise RuntimeError("bulk folds are for a scratch environment only")
        folder = _BulkFold(self)
        try:
            yield folder
        finally:
            folder.close()

    def close(self) -> None:
        if self._scratch_dir is not None:
            self.space_env().close()
            shutil.rmtree(self._scratch_dir.name, ignore_errors=True)
            self._scratch_dir = None

    # ------------------------------------------------------------------ dispatch
    def _unbatched(self, envelope: Envelope) -> tuple[tuple[str, Fold], ...]:
        """The folds of that event type that `fold_many` does not cover, cached by type."""
        folds = tuple(f for f in self._folds(envelope) if f[0] not in self._batched)
        self._unbatched_by_type[envelope.event.type] = folds
        return folds

    def _folds(self, envelope: Envelope) -> tuple[tuple[str, Fold], ...]:
        kind = envelope.event.type
        folds = self._folds_by_type.get(kind)
        if folds is None:
            folds = tuple((m.name, m.fold) for m in self._models.values() if _handles(m, kind))
            guard = self._guard
            if guard is not None and kind in guard.guarded:
                # the ownership rule, as of this envelope: the fold's `txn` sees the creates of
                # earlier envelopes of the same batch
                folds = tuple((name, _guarded(guard, fold)) for name, fold in folds)
            self._folds_by_type[kind] = folds
        return folds


class _BulkFold:
    """Folds chunks into one write transaction of the scratch environment, committed every
    `_BULK_ENVELOPES` envelopes and at the end, instead of one write transaction per chunk.
    Each chunk still folds in a child transaction of its own, as `DiskModels.fold` does, so
    a model that raises is isolated the same way, with the same result. The scratch
    environment is a temporary directory, never reused after a crash, so a transaction that
    spans chunks changes no durability promise."""

    def __init__(self, models: DiskModels) -> None:
        self._models = models
        self._env = models.space_env()
        models._faults = []
        models._forget_staged()
        self._txn: Txn | None = self._env.begin(write=True)
        self._position = models.position(self._txn)
        self._count = 0  # envelopes folded in the open transaction

    def __call__(self, envelopes: Sequence[Envelope]) -> None:
        fresh = _newer(envelopes, self._position)
        if not fresh:
            return
        if self._txn is None:
            self._txn = self._env.begin(write=True)
        self._models._fold_isolated(self._txn, fresh)
        self._position = fresh[-1].position
        self._count += len(fresh)
        if self._count >= _BULK_ENVELOPES:
            self._commit()

    def _commit(self) -> None:
        txn, self._txn = self._txn, None
        if txn is None:
            return
        txn.put(_POSITION, u64(self._position), db=self._models._meta)
        txn.commit()
        self._count = 0
        self._models.committed()

    def close(self) -> None:
        """Commit what was folded (a chunk source that raised leaves the chunks before it
        folded, as a fold chunk by chunk would)."""
        if self._count:
            self._commit()
        elif self._txn is not None:
            self._txn.abort()
            self._txn = None


def _newer(envelopes: Sequence[Envelope], done: int) -> list[Envelope]:
    """The envelopes after position `done`; they come in position order (a commit, a
    replay's chunk), so usually all of them are new."""
    if envelopes and envelopes[0].position > done:
        return envelopes if isinstance(envelopes, list) else list(envelopes)
    return [e for e in envelopes if e.position > done]


def _guarded(guard: Guard, fold: Fold) -> Fold:
    def owned(txn: Txn, envelope: Envelope) -> None:
        if guard.allows(envelope, txn):
            fold(txn, envelope)

    return owned


def _handles(model: DiskModel, kind: str) -> bool:
    handles: Container[str] | None = getattr(model, "handles", None)
    return handles is None or kind in handles


def _databases_of(txn: Txn, model: str) -> list[bytes]:
    prefix = f"rm.{model}.".encode()
    cursor = txn.cursor()  # the main database lists the named ones
    names: list[bytes] = []
    if cursor.set_range(prefix):
        for key in cursor.iternext(keys=True, values=False):
            if not key.startswith(prefix):
                break
            names.append(key)
    return names


def _ignore(name: str, envelope: Envelope, exc: Exception) -> None:
    return None
