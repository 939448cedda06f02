"""Registry: GET packages, GET one package with its versions, POST a multipart publish."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

import msgspec
from aiohttp import BodyPartReader, web
from aiohttp.http_exceptions import HttpProcessingError

from node.context import CONTEXT
from node.services.registry import REGISTRY, RegistryService, StagedUpload
from node.web.auth import TOKEN_DIGEST
from node.web.body import BodyClock
from node.web.http import Problem, json_response
from node.web.inflight import UPLOADS
from node.web.pages import CURSOR, PAGED, page_response
from node.web.routes import Doc, add_route
from projections.packages import PACKAGE_ID, Package

TEXT_PARTS = ("id", "version", "description")
MAX_TEXT_PART = 8192
MULTIPART_SLACK = 1 << 20  # room for the text parts and the multipart framing


class PublishResult(msgspec.Struct):
    id: str
    version: str
    checksum: str
    published_at: str


PUBLISH_FORM = {
    "type": "object",
    "properties": {
        "id": {"type": "string", "pattern": PACKAGE_ID},
        "version": {"type": "string", "description": "strict SemVer 2.0"},
        "description": {"type": "string"},
        "wasm": {
            "type": "string",
            "contentMediaType": "application/wasm",
            "description": "a compiled WebAssembly component",
        },
    },
    "required": ["id", "version", "wasm"],
}


def registry_of(request: web.Request) -> RegistryService:
    return request.app[REGISTRY]


async def list_packages(request: web.Request) -> web.Response:
    return page_response(request, registry_of(request).projection.list())


async def read_package(request: web.Request) -> web.Response:
    package_id = request.match_info["package_id"]
    package = registry_of(request).projection.read(package_id)
    if package is None:
        raise Problem(404, f"no package with id {package_id!r}")
    return json_response(package)


async def publish(request: web.Request) -> web.Response:
    registry = registry_of(request)
    if request.content_type != "multipart/form-data":
        raise Problem(
            415,
            "publish with Content-Type multipart/form-data (parts: id, version, description, wasm)",
        )
    length = request.content_length
    if length is not None and length > registry.max_bytes + MULTIPART_SLACK:
        raise Problem(
            413,
            f"the upload is larger than this node's limit of {registry.max_bytes >> 20} MiB"
            " (node.max_upload_mb)",
        )
    ticket = request.app[UPLOADS].take(request.get(TOKEN_DIGEST, b""))  # 429 past the cap
    try:
        with registry.staging() as upload:
            return await _publish(request, registry, upload)
    finally:
        ticket.release()


async def _publish(
    request: web.Request, registry: RegistryService, upload: StagedUpload
) -> web.Response:
    fields = await _read_parts(request, upload)
    for name in ("id", "version"):
        if name not in fields:
            raise Problem(400, f"the multipart body has no `{name}` part")
    if "wasm" not in fields:
        raise Problem(400, "the multipart body has no `wasm` part (the component file)")
    published = await registry.publish(
        fields["id"], fields["version"], fields.get("description", ""), upload
    )
    return json_response(published, status=201)


async def _read_parts(request: web.Request, upload: StagedUpload) -> dict[str, str]:
    """Text parts into a dict; the `wasm` part streamed into `upload` (marked by "wasm": "").
    Every step has its deadlines (node/web/body.py)."""
    fields: dict[str, str] = {}
    clock = BodyClock(request)
    try:
        reader = await clock.step(request.multipart())
        while (part := await clock.step(reader.next())) is not None:
            if not isinstance(part, BodyPartReader):
                raise Problem(400, "nested multipart bodies are not accepted")
            name = part.name or ""
            if name in fields:
                raise Problem(400, f"the multipart body has more than one `{name}` part")
            if name == "wasm":
                while chunk := await clock.step(part.read_chunk(1 << 16)):
                    upload.write(chunk)
                fields[name] = ""
            elif name in TEXT_PARTS:
                fields[name] = await _read_text(part, name, clock)
            else:
                raise Problem(
                    400,
                    f"unexpected multipart part {name!r}; expected id, version, description, wasm",
                )
    except HttpProcessingError as exc:  # a part's headers that do not parse (found by fuzzing)
        raise Problem(400, f"malformed multipart body: {exc.message[:200]}") from None
    except (ValueError, AssertionError, LookupError) as exc:
        raise Problem(400, f"malformed multipart body: {exc or type(exc).__name__}") from None
    return fields


async def _read_text(part: BodyPartReader, name: str, clock: BodyClock) -> str:
    raw = bytearray()
    while chunk := await clock.step(part.read_chunk(4096)):
        raw += chunk
        if len(raw) > MAX_TEXT_PART:
            raise Problem(400, f"the `{name}` part is longer than {MAX_TEXT_PART} bytes")
    try:
        return raw.decode(part.get_charset("utf-8"))
    except UnicodeDecodeError:
        raise Problem(400, f"the `{name}` part is not valid UTF-8") from None


async def lifecycle(app: web.Application) -> AsyncIterator[None]:
    registry = app[REGISTRY]
    registry.start()
    yield
    # waits for a compile in progress: off the loop
    await asyncio.get_running_loop().run_in_executor(None, registry.close)


def setup(app: web.Application) -> None:
    ctx = app[CONTEXT]
    app[REGISTRY] = RegistryService(ctx)
    app.cleanup_ctx.append(lifecycle)
    add_route(
        app,
        "GET",
        "/api/v1/registry/packages",
        list_packages,
        "read",
        Doc(
            "Packages (latest version of each), a page at a time",
            "registry",
            list[Package],
            errors=(400,),
            query=(CURSOR,),
            description=PAGED,
        ),
    )
    add_route(
        app,
        "POST",
        "/api/v1/registry/packages",
        publish,
        "publish",
        Doc(
            "Publish a package version",
            "registry",
            PublishResult,
            status=201,
            errors=(400, 408, 409, 413, 415, 422, 429, 503),
            body_content={"multipart/form-data": PUBLISH_FORM},
        ),
    )
    add_route(
        app,
        "GET",
        "/api/v1/registry/packages/{package_id}",
        read_package,
        "read",
        Doc("One package with all its versions", "registry", Package, errors=(404,)),
    )
