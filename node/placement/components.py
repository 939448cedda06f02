"""Agents' components by checksum, in a JetStream object store every node of a mesh can read.

The bucket `MESH_<mesh>_COMPONENTS` is an object store in the layout of nats-py and the `nats`
CLI (stream `OBJ_<bucket>`: chunks on `$O.<bucket>.C.<nuid>`, the object's meta on
`$O.<bucket>.M.<base64url(name)>`), one object per component named by the lower-case hex of
its sha256. The node that deploys a placed agent puts its component; a node that takes it over
fetches it by the checksum its journal names (`agent.placed`).

Anything read is a member's claim: `fetch` refuses a meta that names another object, another
digest or a size over the bound (the registry's, `node.max_upload_mb`) before reading a chunk,
stops at the size the meta announced, and hands over the file (renamed into place) only when
its sha256 is the one asked for. A meta whose chunks are not those bytes (a member's forgery)
does not hide the component: `fetch` goes back through the object's earlier metas (up to
MAX_METAS_TRIED) to a sound one, and `put` checks the latest meta against the bytes before it
skips the upload, so a re-put heals a forged meta for good. Reads go to the stream's leader.
The stream allows no purge, delete or roll-up (a member's `Nats-Rollup: all` would empty it):
a failed put leaves its chunks behind, a later put of the same object adds a meta (the last
one counts for the `nats` CLI), and a put of what is already there (its latest meta sound and
its chunks these bytes) does nothing.

A meta's chunk count is held to what a sane writer produces: at least `size / max_chunk_size`
(its `options`, at most MAX_CHUNK_BYTES) and at most `size / MIN_CHUNK_BYTES`, so a forged meta
cannot make a reader take one round trip per byte. Not exactly `size / CHUNK_BYTES`, though
this node always writes that: the clients let a writer choose the chunk size (nats-py's
`max_chunk_size`, the Go client's `ChunkSize`), and the Go client (the `nats` CLI's) cuts a
chunk at whatever one `Read` returns, so an object piped into `nats object put` has chunks of
the pipe's reads (at most 64 KiB on Linux). 16 KiB on average keeps those readable (a put
through a pipe that trickles in smaller reads is refused, as any meta that does not fit) and
bounds the count at 64 per MiB (4096 for a 64 MiB component).

Every call has one deadline, and its expiry is never a refusal (ComponentError: the store was
slow, the bytes were not judged): `call_timeout` to find a meta, plus `call_timeout + size /
MIN_RATE` for each meta whose chunks are read (or, for `put`, written), so neither a meta
pointing at many small chunks nor a server that answers each call just in time holds the
caller (the serve loop, the one preparation at a time) for longer than the object justifies.
Each call keeps its own `call_timeout` too. Hashing a whole component (`put`, up to
`node.max_upload_mb`) runs on a worker thread (30 MiB took 22 ms of sha256 on the dev box, more
on a loaded one); the chunks of a read are hashed as they come, on the loop: a chunk is at most
MAX_CHUNK_BYTES (11 ms), and a 128 KiB one 0.1 ms, less than the round trip that fetched it.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import hashlib
import os
import re
import secrets
from collections.abc import AsyncIterator, Callable
from datetime import UTC, datetime
from pathlib import Path

import msgspec
from nats.errors import Error as NatsError
from nats.js import JetStreamContext
from nats.js.api import DiscardPolicy, StorageType, StreamConfig
from nats.js.errors import NotFoundError

from node.config.model import MeshSection
from node.placement.buckets import check_settings, info_or_create
from node.sync.nats.subjects import Bucket, bucket_name, object_stream

CHUNK_BYTES = 128 * 1024  # nats-py's and the CLI's default chunk size, the one this node writes
MIN_CHUNK_BYTES = 16 * 1024  # a meta's chunks are this large on average, at least
MAX_CHUNK_BYTES = 8 * 1024 * 1024  # a meta's max_chunk_size (NATS's largest sane max_payload)
MIN_RATE = 1024 * 1024  # bytes a second a read or write must keep up, on top of call_timeout
MAX_META_BYTES = 64 * 1024
SHA256_HEX = re.compile(r"[0-9a-f]{64}")
MAX_METAS_TRIED = 8  # a fetch goes back this many metas of an object for a sound one
_NUID = re.compile(r"[A-Za-z0-9_-]{1,64}")


class ComponentError(Exception):
    """The object store did not answer in time, or a put failed half-way."""


class ComponentMissing(ComponentError):
    """No component with this checksum in the bucket."""


class ComponentRefused(ComponentError):
    """What the bucket holds under this checksum is not it (or is too large): not used."""


class ObjectOptions(msgspec.Struct, omit_defaults=True):
    max_chunk_size: int = CHUNK_BYTES


class ObjectRecord(msgspec.Struct, omit_defaults=True):
    """An object's meta (the fields this node writes and reads; others are ignored)."""

    name: str
    bucket: str
    nuid: str
    size: int
    chunks: int
    digest: str
    mtime: str = ""
    deleted: bool = False
    options: ObjectOptions | None = None


_decoder = msgspec.json.Decoder(ObjectRecord)


def digest_of(sha256: str) -> str:
    """The object store's digest text of a sha256 given in hex."""
    return "SHA-256=" + base64.urlsafe_b64encode(bytes.fromhex(sha256)).decode()


def _checked_sha(sha256: str) -> str:
    if not SHA256_HEX.fullmatch(sha256):
        raise ValueError(f"not a sha256 in lower-case hex: {sha256[:80]!r}")
    return sha256


class ComponentStore:
    def __init__(self, mesh: MeshSection, max_bytes: int, *, call_timeout: float = 10.0) -> None:
        self._mesh = mesh
        self.bucket = bucket_name(mesh.name, Bucket.COMPONENTS)
        self._stream = object_stream(self.bucket)
        self.max_bytes = max_bytes  # the registry's: node.max_upload_mb << 20
        self.call_timeout = call_timeout
        self._js: JetStreamContext | None = None

    async def attach(self, js: JetStreamContext) -> None:
        """Use this JetStream context (again after a reconnect); creates the bucket, or checks
        the one found keeps what is put there (BucketError otherwise)."""
        wanted = StreamConfig(
            name=self._stream,
            subjects=[f"$O.{self.bucket}.C.>", f"$O.{self.bucket}.M.>"],
            storage=StorageType.FILE,
            num_replicas=self._mesh.stream_replicas,
            discard=DiscardPolicy.NEW,
            # no roll-ups (a member's `Nats-Rollup: all` would empty the bucket): an
            # object's metas pile up, one per put, and the last one counts
            allow_rollup_hdrs=False,
            deny_delete=True,
            deny_purge=True,
            allow_direct=True,  # for the `nats` CLI; this node reads from the leader
            max_consumers=0,
        )
        info = await info_or_create(js, wanted, max(self.call_timeout, 5.0))
        check_settings(self._stream, info, None, None, wanted)
        self._js = js

    def detach(self) -> None:
        self._js = None

    def _jetstream(self) -> JetStreamContext:
        if self._js is None:
            raise ComponentError("not connected to NATS")
        return self._js

    def _meta_subject(self, sha256: str) -> str:
        return f"$O.{self.bucket}.M.{base64.urlsafe_b64encode(sha256.encode()).decode()}"

    async def _meta_msg(self, sha256: str, before: int | None) -> tuple[bytes, int] | None:
        """The data and stream sequence of the object's last meta (before stream sequence
        `before`, if given), or None when there is none."""
        js, subject = self._jetstream(), self._meta_subject(sha256)
        try:
            async with asyncio.timeout(self.call_timeout):
                if before is None:
                    msg = await js.get_msg(self._stream, subject=subject)
                    return msg.data or b"", msg.seq or 0
                return await self._last_before(js, subject, before)
        except NotFoundError:
            return None
        except (TimeoutError, NatsError) as exc:
            raise ComponentError(f"the component store did not answer: {exc!r}") from exc

    async def _last_before(
        self, js: JetStreamContext, subject: str, before: int
    ) -> tuple[bytes, int] | None:
        """The last message on `subject` with a stream sequence below `before`: a binary
        search with next-by-subject reads (JetStream has no previous-by-subject)."""
        low, high, found = 1, before - 1, None
        while low <= high:
            middle = (low + high) // 2
            try:
                msg = await js.get_msg(self._stream, seq=middle, subject=subject, next=True)
            except NotFoundError:
                msg = None
            if msg is None or (msg.seq or 0) >= before:
                high = middle - 1
            else:
                found = msg
                low = (msg.seq or middle) + 1
        return (found.data or b"", found.seq or 0) if found is not None else None

    def _checked_meta(
        self, sha256: str, data: bytes, size: int | None = None
    ) -> ObjectRecord | None:
        """The meta in `data`; None when deleted; ComponentRefused when it is not the meta
        of this checksum (of `size` bytes, when known) within the bounds."""
        if len(data) > MAX_META_BYTES:
            raise ComponentRefused(f"the meta of {sha256} is {len(data)} bytes")
        try:
            meta = _decoder.decode(data)
        except (msgspec.DecodeError, msgspec.ValidationError) as exc:
            raise ComponentRefused(f"the meta of {sha256} is not an object's meta") from exc
        if meta.deleted:
            return None
        problem = None
        if meta.name != sha256 or meta.digest != digest_of(sha256):
            problem = "names another object or digest"
        elif not 0 <= meta.size <= self.max_bytes:
            problem = f"is {meta.size} bytes, over the bound of {self.max_bytes}"
        elif not 1 <= _max_chunk(meta) <= MAX_CHUNK_BYTES:
            problem = f"claims chunks of up to {_max_chunk(meta)} bytes"
        elif not _chunks_fit(meta):
            problem = f"claims {meta.chunks} chunks for {meta.size} bytes"
        elif size is not None and meta.size != size:
            problem = f"is {meta.size} bytes, not {size}"
        elif not _NUID.fullmatch(meta.nuid):
            problem = "has a bad chunk subject"
        if problem is not None:
            raise ComponentRefused(f"the component {sha256} in the bucket {problem}")
        return meta

    def _budget(self, size: int) -> float:
        """Seconds to read or write `size` bytes of chunks: slower than MIN_RATE is stuck."""
        return self.call_timeout + size / MIN_RATE

    @contextlib.asynccontextmanager
    async def _deadline(self, seconds: float, what: str) -> AsyncIterator[asyncio.Timeout]:
        """One deadline for a whole call (extended as metas justify more work); on expiry a
        ComponentError, never a refusal: nothing was judged."""
        try:
            async with asyncio.timeout(seconds) as deadline:
                yield deadline
        except TimeoutError as exc:
            raise ComponentError(f"{what}: the component store was too slow") from exc

    async def has(self, sha256: str, size: int | None = None) -> bool:
        """The bucket's latest meta for this checksum is sound (of `size` bytes, when known)
        and its chunks are the bytes."""
        async with self._deadline(self.call_timeout, f"checking {sha256}") as deadline:
            found = await self._meta_msg(_checked_sha(sha256), None)
            if found is None:
                return False
            try:
                meta = self._checked_meta(sha256, found[0], size)
                if meta is None:
                    return False
                _extend(deadline, self._budget(meta.size))
                await self._read_chunks(sha256, meta, None)
            except ComponentRefused:
                return False
            return True

    async def put(self, source: Path | bytes, sha256: str) -> bool:
        """Store a component under its checksum: True when stored now, False when the bucket
        held it already. ComponentRefused when the bytes are not `sha256` or too large."""
        _checked_sha(sha256)
        if isinstance(source, Path):
            size = await asyncio.to_thread(lambda: source.stat().st_size)
            if size > self.max_bytes:
                raise ComponentRefused(f"{source} is {size} bytes, over {self.max_bytes}")
            data = await asyncio.to_thread(source.read_bytes)
        else:
            data = source
        if len(data) > self.max_bytes:
            raise ComponentRefused(f"the component is {len(data)} bytes, over {self.max_bytes}")
        if await asyncio.to_thread(lambda: hashlib.sha256(data).hexdigest()) != sha256:
            raise ComponentRefused(f"the bytes given are not the component {sha256}")
        if await self.has(sha256, len(data)):
            return False
        js = self._jetstream()
        nuid = secrets.token_hex(11)
        chunk_subject = f"$O.{self.bucket}.C.{nuid}"
        chunks = 0
        meta = ObjectRecord(
            name=sha256,
            bucket=self.bucket,
            nuid=nuid,
            size=len(data),
            chunks=-(-len(data) // CHUNK_BYTES),
            digest=digest_of(sha256),
            mtime=datetime.now(UTC).isoformat(),
            options=ObjectOptions(),
        )
        try:
            async with self._deadline(self._budget(len(data)), f"storing {sha256}"):
                for start in range(0, len(data), CHUNK_BYTES):
                    async with asyncio.timeout(self.call_timeout):
                        await js.publish(chunk_subject, data[start : start + CHUNK_BYTES])
                    chunks += 1
                async with asyncio.timeout(self.call_timeout):
                    await js.publish(self._meta_subject(sha256), msgspec.json.encode(meta))
        except (TimeoutError, NatsError, ComponentError) as exc:
            raise ComponentError(
                f"storing {sha256} failed after {chunks} of {meta.chunks} chunks: {exc!r}"
            ) from exc
        return True

    async def fetch(self, sha256: str, dest: Path) -> Path:
        """Write the component into `dest` (replaced atomically) once its sha256 and size are
        checked, from the latest sound meta (up to MAX_METAS_TRIED back); ComponentMissing,
        ComponentRefused (naming what was wrong with the newest) or ComponentError otherwise
        (`dest` is then left as it was)."""
        _checked_sha(sha256)
        before: int | None = None
        first_refusal: ComponentRefused | None = None
        async with self._deadline(self.call_timeout, f"fetching {sha256}") as deadline:
            for _ in range(MAX_METAS_TRIED):
                if before is not None:  # one more meta to find
                    _extend(deadline, self.call_timeout)
                found = await self._meta_msg(sha256, before)
                if found is None:
                    break
                data, before = found
                try:
                    meta = self._checked_meta(sha256, data)
                    if meta is None:
                        break
                    _extend(deadline, self._budget(meta.size))
                    return await self._fetch_from(sha256, meta, dest)
                except ComponentRefused as exc:
                    first_refusal = first_refusal or exc
        if first_refusal is not None:
            raise first_refusal
        raise ComponentMissing(f"no component {sha256} in {self.bucket}")

    async def _fetch_from(self, sha256: str, meta: ObjectRecord, dest: Path) -> Path:
        part = dest.with_name(f".{dest.name}.{secrets.token_hex(4)}.part")
        dest.parent.mkdir(parents=True, exist_ok=True)
        try:
            with open(part, "wb") as out:
                await self._read_chunks(sha256, meta, out.write)
            os.replace(part, dest)
        finally:
            with contextlib.suppress(FileNotFoundError):
                part.unlink()
        return dest

    async def _read_chunks(
        self, sha256: str, meta: ObjectRecord, write: Callable[[bytes], object] | None
    ) -> None:
        """Read the meta's chunks in order (to `write`, if given) within the caller's deadline;
        ComponentRefused unless they are exactly the component's bytes."""
        js = self._jetstream()
        chunk_subject = f"$O.{self.bucket}.C.{meta.nuid}"
        hasher, size, seq, max_chunk = hashlib.sha256(), 0, 1, _max_chunk(meta)
        for _ in range(meta.chunks):
            try:
                async with asyncio.timeout(self.call_timeout):
                    msg = await js.get_msg(self._stream, seq=seq, subject=chunk_subject, next=True)
            except NotFoundError as exc:
                raise ComponentRefused(f"the chunks of {sha256} are missing") from exc
            except (TimeoutError, NatsError) as exc:
                raise ComponentError(f"reading {sha256}: {exc!r}") from exc
            chunk = msg.data or b""
            size += len(chunk)
            if size > meta.size or len(chunk) > max_chunk:
                raise ComponentRefused(f"the chunks of {sha256} exceed what its meta announced")
            hasher.update(chunk)
            if write is not None:
                write(chunk)
            seq = (msg.seq or seq) + 1
        if size != meta.size or hasher.hexdigest() != sha256:
            raise ComponentRefused(f"what the bucket holds as {sha256} is not it")


def _chunks_fit(meta: ObjectRecord) -> bool:
    """The meta's chunk count is one a sane writer produces for its size (module docstring)."""
    return -(-meta.size // _max_chunk(meta)) <= meta.chunks <= -(-meta.size // MIN_CHUNK_BYTES)


def _max_chunk(meta: ObjectRecord) -> int:
    return meta.options.max_chunk_size if meta.options is not None else CHUNK_BYTES


def _extend(deadline: asyncio.Timeout, seconds: float) -> None:
    """Move a running deadline later by `seconds`."""
    when = deadline.when()
    if when is not None:
        deadline.reschedule(when + seconds)
