"""The package registry: validated WASM components stored by content, published as events.

On disk, under `data_dir/registry/`:
  tmp/                       uploads being received (emptied at start)
  blobs/sha256/<hex>.wasm    the exact uploaded bytes, named by their sha256

Which version is which blob is the journal's `package.published` events (the registry read
model). A publish writes (and fsyncs) the blob before it appends the event, and removes it if
the append fails; at start, blobs no event refers to (left by a crash between the two) are
removed, so nothing half-written outlives a restart.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import logging
import os
import shutil
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any, BinaryIO

from aiohttp import web

from eventstore.envelope import Envelope
from node.config.model import Config
from node.context import NodeContext
from node.ops.files import move_durably
from node.runtime.compiled_cache import artifact_path, compiled_cache_dir
from node.runtime.compiler import CompileError, Compiler
from node.runtime.engine import AgentEngine
from node.runtime.spec import compile_limits
from node.web.http import Problem
from projections import catalogue as c
from projections.packages import (
    PACKAGE_ID,
    PACKAGE_ID_RE,
    REGISTRY_STREAM,
    Registry,
    is_semver,
)

log = logging.getLogger(__name__)
REGISTRY_DIR = "registry"
REF_PREFIX = "registry:"
WASM_MAGIC = b"\0asm"
CORE_MODULE_VERSION = b"\x01\x00\x00\x00"
COMPONENT_VERSION = b"\x0d\x00\x01\x00"  # version 0x0d, layer 1: the component model
MAX_DESCRIPTION = 4096


class RegistryError(LookupError):
    """A `registry:` reference that cannot be resolved to a stored component."""


class StagedUpload:
    """A WASM upload streamed to a temporary file, hashed on the way, refused past the limit.
    The file is opened with the component's first byte: a client that never sends one holds
    no file."""

    def __init__(self, path: Path, limit: int) -> None:
        self.path = path
        self.limit = limit
        self.size = 0
        self.head = b""
        self._hash = hashlib.sha256()
        self._file: BinaryIO | None = None  # closed by close()/finish()

    def write(self, chunk: bytes) -> None:
        self.size += len(chunk)
        if self.size > self.limit:
            raise Problem(
                413,
                f"the wasm part is larger than this node's limit of {self.limit >> 20} MiB"
                " (node.max_upload_mb)",
            )
        if len(self.head) < 8:
            self.head += chunk[: 8 - len(self.head)]
        self._hash.update(chunk)
        if self._file is None:
            self._file = open(self.path, "wb")  # noqa: SIM115
        self._file.write(chunk)

    @property
    def hex_digest(self) -> str:
        return self._hash.hexdigest()

    def finish(self) -> None:
        """Flush and fsync the bytes (blocking: run in a thread)."""
        if self._file is None:
            self._file = open(self.path, "wb")  # noqa: SIM115
        self._file.flush()
        os.fsync(self._file.fileno())
        self._file.close()

    def close(self) -> None:
        if self._file is not None and not self._file.closed:
            self._file.close()


class RegistryService:
    def __init__(self, ctx: NodeContext) -> None:
        self.ctx = ctx
        self.root = registry_root(ctx.config)
        self.blobs = self.root / "blobs" / "sha256"
        self.tmp = self.root / "tmp"
        self.max_bytes = ctx.config.node.max_upload_mb << 20
        self._lock = asyncio.Lock()
        # compiling a component is heavy (seconds, all cores): one check at a time, each in a
        # child process bounded in time and memory, so an upload cannot grow or crash the node
        self._checks = ThreadPoolExecutor(1, thread_name_prefix="registry-validate")
        self._compiler = Compiler(compile_limits(ctx.config), parallel=1)
        # the runtime's engine once it runs (node/api/runtime.py): an upload is then compiled
        # into the compiled-component cache, so a deploy of it compiles nothing again
        self.engine: AgentEngine | None = None

    @property
    def projection(self) -> Registry:
        return self.ctx.projections.get(Registry)

    # ------------------------------------------------------------------ lifecycle
    def start(self) -> None:
        """Create the folders and remove whatever no `package.published` event refers to."""
        for folder in (self.blobs, self.tmp):
            folder.mkdir(parents=True, exist_ok=True)
        _remove(self.root / "refs")  # a cache of the journal that earlier releases kept
        for leftover in self.tmp.iterdir():
            _remove(leftover)
        referenced = self.projection.checksums()
        for blob in self.blobs.iterdir():
            if f"sha256:{blob.name.removesuffix('.wasm')}" not in referenced:
                log.warning("removing unpublished registry blob %s", blob.name)
                _remove(blob)
        for package_id, versions in self.projection.packages.items():
            for version, package in versions.items():
                if not self.blob_path(package.checksum).is_file():
                    log.error("registry blob of %s@%s is missing", package_id, version)

    def close(self) -> None:
        self._compiler.close()
        self._checks.shutdown(wait=True, cancel_futures=True)

    # ------------------------------------------------------------------ publish
    @contextlib.contextmanager
    def staging(self) -> Iterator[StagedUpload]:
        """A temporary file for one upload, removed on exit unless `publish` moved it away."""
        self.tmp.mkdir(parents=True, exist_ok=True)
        path = self.tmp / f"upload-{os.urandom(8).hex()}"
        upload = StagedUpload(path, self.max_bytes)
        try:
            yield upload
        finally:
            upload.close()
            path.unlink(missing_ok=True)

    async def publish(
        self, package_id: str, version: str, description: str, upload: StagedUpload
    ) -> dict[str, Any]:
        """Validate, store the blob, then journal `package.published` (201 body)."""
        if not PACKAGE_ID_RE.fullmatch(package_id):
            raise Problem(400, f"package id {package_id!r} must match {PACKAGE_ID}")
        if not is_semver(version):
            raise Problem(400, f"version {version!r} is not a SemVer 2.0 version (like 1.2.3)")
        if len(description) > MAX_DESCRIPTION:
            raise Problem(400, f"description is longer than {MAX_DESCRIPTION} characters")
        check_component_header(upload.head, upload.size)
        self._refuse_existing(package_id, version)
        loop = asyncio.get_running_loop()
        await loop.run_in_executor(None, upload.finish)
        digest = upload.hex_digest
        # these exact bytes compiled on this node once (with the engine's settings, keyed by
        # their sha256): the verdict is kept, no compile child for them again
        if not artifact_path(compiled_cache_dir(self.ctx.config.data_path), digest).exists():
            await loop.run_in_executor(self._checks, self._validate, upload.path)
        checksum = f"sha256:{digest}"
        async with self._lock:
            self._refuse_existing(package_id, version)
            blob = self.blob_path(checksum)
            created = not blob.exists()
            try:
                if created:
                    await loop.run_in_executor(None, move_durably, upload.path, blob)
                envelope = await self._journal_published(
                    package_id, version, description, checksum, upload.size
                )
            except BaseException:
                if created:
                    blob.unlink(missing_ok=True)
                raise
        return {
            "id": package_id,
            "version": version,
            "checksum": checksum,
            "published_at": envelope.event.ts,
        }

    async def adopt(self, reference: str, checksum: str, fetched: Path, description: str) -> Path:
        """Publish here a component another node of its placement set published (a placed
        agent moving in, node/placement/resume.py): `fetched` was verified against `checksum`
        already, and the home compiled it before deploying, so it is not checked again. The
        blob's path; a LookupError when this registry holds that version with other bytes."""
        package_id, version = parse_reference(reference)
        async with self._lock:
            package = self.projection.version(package_id, version)
            if package is not None:
                if package.checksum != checksum:
                    raise RegistryError(
                        f"{package_id}@{version} is published here as {package.checksum}, "
                        f"the agent runs {checksum}"
                    )
                return self.resolve(reference)
            blob = self.blob_path(checksum)
            if not blob.exists():
                await asyncio.to_thread(move_durably, fetched, blob)
            await self._journal_published(
                package_id, version, description, checksum, blob.stat().st_size
            )
            return blob

    async def _journal_published(
        self, package_id: str, version: str, description: str, checksum: str, size: int
    ) -> Envelope:
        """Append `package.published` for a blob already in place."""
        published = c.PackagePublished(
            id=package_id,
            version=version,
            description=description,
            checksum=checksum,
            wasm_size_bytes=size,
        )
        return await self.ctx.store.append(REGISTRY_STREAM, *c.event_of(published))

    def _refuse_existing(self, package_id: str, version: str) -> None:
        if self.projection.has(package_id, version):
            raise Problem(409, f"{package_id}@{version} is already published")

    def _validate(self, path: Path) -> None:
        """Compile the component in a child (blocking: the check thread runs it); 400 when
        wasmtime refuses it, 422 when compiling it exceeds this node's limits or crashes.

        With the runtime's engine, the compile is the one a deploy would do (its settings,
        into its cache by sha256): the check and the deploy's compile are one, and a deploy
        or upgrade after the publish only loads the artifact (milliseconds). Without it (the
        runtime not started yet) the check compiles fast and keeps nothing."""
        try:
            engine = self.engine
            if engine is not None:
                engine.prepare(path)
            else:
                self._compiler.compile(path, None)
        except CompileError as exc:
            if exc.failure == "rejected":
                raise Problem(400, f"wasmtime rejects the component: {exc}") from None
            if exc.failure == "cancelled":
                raise Problem(503, "the node is stopping; publish again later") from None
            raise Problem(422, f"the component cannot be compiled on this node: {exc}") from None

    # ------------------------------------------------------------------ reads
    def blob_path(self, checksum: str) -> Path:
        return self.blobs / f"{checksum.removeprefix('sha256:')}.wasm"

    def resolve(self, reference: str) -> Path:
        package_id, version = parse_reference(reference)
        package = self.projection.version(package_id, version)
        if package is None:
            raise RegistryError(f"{package_id}@{version} is not published in this registry")
        return _existing(self.blob_path(package.checksum), reference)


def check_component_header(head: bytes, size: int) -> None:
    """A component starts with `\\0asm` and version 0x0d, layer 1; anything else is a 400."""
    if size == 0:
        raise Problem(400, "the wasm part is empty")
    if len(head) < 8 or head[:4] != WASM_MAGIC:
        raise Problem(400, "the wasm part is not a WebAssembly binary (no \\0asm header)")
    if head[4:8] == CORE_MODULE_VERSION:
        raise Problem(
            400, "the wasm part is a core WebAssembly module; publish a component instead"
        )
    if head[4:8] != COMPONENT_VERSION:
        raise Problem(
            400, f"the wasm part has an unsupported WebAssembly version/layer {head[4:8].hex()}"
        )


def registry_root(config: Config) -> Path:
    return config.data_path / REGISTRY_DIR


def parse_reference(reference: str) -> tuple[str, str]:
    """`registry:ID@VERSION` → (ID, VERSION); ValueError when it is not of that form."""
    if not reference.startswith(REF_PREFIX):
        raise ValueError(f"{reference!r} is not a registry reference (registry:ID@VERSION)")
    package_id, sep, version = reference[len(REF_PREFIX) :].partition("@")
    if not sep or not PACKAGE_ID_RE.fullmatch(package_id) or not is_semver(version):
        raise ValueError(f"{reference!r} is not of the form registry:ID@VERSION")
    return package_id, version


def _existing(path: Path, reference: str) -> Path:
    if not path.is_file():
        raise RegistryError(f"the stored component of {reference} is missing ({path})")
    return path


def _remove(path: Path) -> None:
    if path.is_dir():
        shutil.rmtree(path, ignore_errors=True)
    else:
        path.unlink(missing_ok=True)


REGISTRY = web.AppKey("registry", RegistryService)
