"""The package registry over HTTP: multipart publish, validation, storage, reads, resolution."""

from __future__ import annotations

import hashlib

import pytest
import wasmtime
from aiohttp import FormData

from node.app import build_app
from node.config.load import load_config
from node.context import CONTEXT
from node.services.registry import REGISTRY, RegistryError, registry_root
from projections.packages import is_semver, semver_key
from tests.support import (
    PUBLISH_TOKEN,
    READ_TOKEN,
    auth,
    make_config,
    tiny_component,
    write_config,
)

COMPONENT = tiny_component()
OTHER_COMPONENT = bytes(wasmtime.wat2wasm("(component)"))
CORE_MODULE = bytes(wasmtime.wat2wasm('(module (func (export "f")))'))


def form(wasm: bytes | None = COMPONENT, *, omit: tuple[str, ...] = (), **fields: str) -> FormData:
    values = {"id": "payer", "version": "1.0.0", "description": "Pays invoices", **fields}
    data = FormData(default_to_multipart=True)
    for name, value in values.items():
        if name not in omit:
            data.add_field(name, value)
    if wasm is not None and "wasm" not in omit:
        data.add_field("wasm", wasm, filename="agent.wasm", content_type="application/wasm")
    return data


async def publish(client, data: FormData, token: str = PUBLISH_TOKEN):
    return await client.post("/api/v1/registry/packages", data=data, headers=auth(token))


def disk_state(client) -> tuple[list[str], list[str], int]:
    """(blob names, files in tmp, events in $registry): what a publish leaves behind."""
    root = registry_root(client.app[CONTEXT].config)
    blobs = sorted(p.name for p in (root / "blobs" / "sha256").iterdir())
    tmp = sorted(p.name for p in (root / "tmp").iterdir())
    head = client.app[CONTEXT].store.head("$registry")
    return blobs, tmp, head.seq if head else 0


async def test_publish_stores_the_blob_then_the_event(client):
    response = await publish(client, form())
    assert response.status == 201, await response.text()
    body = await response.json()
    digest = hashlib.sha256(COMPONENT).hexdigest()
    assert body["id"] == "payer" and body["version"] == "1.0.0"
    assert body["checksum"] == f"sha256:{digest}"
    assert body["published_at"].endswith("Z")
    blob = registry_root(client.app[CONTEXT].config) / "blobs" / "sha256" / f"{digest}.wasm"
    assert blob.read_bytes() == COMPONENT
    [envelope] = client.app[CONTEXT].store.read_stream("$registry", 0, 10)
    assert envelope.event.type == "package.published"
    assert envelope.event.data == {
        "id": "payer",
        "version": "1.0.0",
        "description": "Pays invoices",
        "checksum": f"sha256:{digest}",
        "wasm_size_bytes": len(COMPONENT),
    }
    assert disk_state(client)[1] == []


async def test_list_and_read_with_semver_ordered_versions(client):
    for version in ("1.10.0", "1.2.0", "2.0.0-rc.1", "1.2.0-alpha", "1.9.9"):
        response = await publish(client, form(version=version, description=f"v{version}"))
        assert response.status == 201, await response.text()
    assert (await publish(client, form(id="other", version="0.1.0-beta"))).status == 201
    response = await client.get("/api/v1/registry/packages", headers=auth(READ_TOKEN))
    assert response.status == 200
    packages = await response.json()
    assert [(p["id"], p["version"]) for p in packages] == [
        ("other", "0.1.0-beta"),  # only pre-releases: the highest of them
        ("payer", "1.10.0"),  # the latest release; 2.0.0-rc.1 is a pre-release
    ]
    assert all("versions" not in p for p in packages)
    assert set(packages[1]) == {
        "id",
        "version",
        "description",
        "wasm_size_bytes",
        "published_at",
        "checksum",
    }
    one = await (await client.get("/api/v1/registry/packages/payer", headers=auth())).json()
    assert one["version"] == "1.10.0" and one["description"] == "v1.10.0"
    assert one["wasm_size_bytes"] == len(COMPONENT)
    assert one["versions"] == ["1.2.0-alpha", "1.2.0", "1.9.9", "1.10.0", "2.0.0-rc.1"]
    # the same bytes under five versions are stored once
    assert len(disk_state(client)[0]) == 1


async def test_unknown_package_is_404(client):
    response = await client.get("/api/v1/registry/packages/nope", headers=auth())
    assert response.status == 404
    assert response.content_type == "application/problem+json"


async def test_an_existing_version_is_409_and_changes_nothing(client):
    assert (await publish(client, form())).status == 201
    before = disk_state(client)
    response = await publish(client, form(OTHER_COMPONENT, description="different"))
    assert response.status == 409
    assert "payer@1.0.0" in (await response.json())["detail"]
    assert disk_state(client) == before
    one = await (await client.get("/api/v1/registry/packages/payer", headers=auth())).json()
    assert one["description"] == "Pays invoices"


@pytest.mark.parametrize(
    ("data", "needle"),
    [
        (form(omit=("id",)), "`id`"),
        (form(omit=("version",)), "`version`"),
        (form(None), "`wasm`"),
        (form(id="Payer"), "package id"),
        (form(id="-payer"), "package id"),
        (form(id="a" * 65), "package id"),
        (form(version="1.0"), "SemVer"),
        (form(version="v1.0.0"), "SemVer"),
        (form(version="01.0.0"), "SemVer"),
        (form(version="1.0.0-"), "SemVer"),
        (form(version="1.0.0-01"), "SemVer"),
        (form(version=" 1.0.0"), "SemVer"),
        (form(b""), "empty"),
        (form(b"hello world, not wasm"), "not a WebAssembly binary"),
        (form(CORE_MODULE), "core WebAssembly module"),
        (form(b"\0asm\x0e\x00\x01\x00"), "unsupported"),
        (form(COMPONENT[:8] + b"\x07garbage-after-a-component-header"), "wasmtime rejects"),
        (form(description="x" * 5000), "description"),
        (form(extra="1"), "unexpected multipart part"),
    ],
)
async def test_bad_publishes_are_400_and_leave_nothing(client, data, needle):
    response = await publish(client, data)
    assert response.status == 400, await response.text()
    problem = await response.json()
    assert problem["status"] == 400 and needle in problem["detail"], problem
    assert disk_state(client) == ([], [], 0)


async def test_a_repeated_part_is_400(client):
    data = form()
    data.add_field("version", "2.0.0")
    response = await publish(client, data)
    assert response.status == 400
    assert "more than one `version`" in (await response.json())["detail"]


async def test_not_multipart_is_415_and_broken_multipart_is_400(client):
    response = await client.post(
        "/api/v1/registry/packages", json={"id": "payer"}, headers=auth(PUBLISH_TOKEN)
    )
    assert response.status == 415
    broken = await client.post(
        "/api/v1/registry/packages",
        data=b'--xyz\r\nContent-Disposition: form-data; name="id"\r\n\r\npay',
        headers={**auth(PUBLISH_TOKEN), "Content-Type": "multipart/form-data; boundary=xyz"},
    )
    assert broken.status == 400
    no_boundary = await client.post(
        "/api/v1/registry/packages",
        data=b"x",
        headers={**auth(PUBLISH_TOKEN), "Content-Type": "multipart/form-data"},
    )
    assert no_boundary.status == 400
    # a part whose header line does not parse (found by tests/api/test_fuzz.py: was a 500)
    bad_header = await client.post(
        "/api/v1/registry/packages",
        data=b"--b\r\n-6.6e+16--b--\r\n",
        headers={**auth(PUBLISH_TOKEN), "Content-Type": "multipart/form-data; boundary=b"},
    )
    assert bad_header.status == 400
    assert "malformed multipart body" in (await bad_header.json())["detail"]
    assert disk_state(client) == ([], [], 0)


async def test_oversized_upload_is_413_and_leaves_nothing(tmp_path, aiohttp_client):
    client = await aiohttp_client(build_app(_small_limit_config(tmp_path)))
    big = COMPONENT[:8] + b"\0" * (1536 << 10)  # 1.5 MiB: past the 1 MiB limit
    response = await publish(client, form(big))
    assert response.status == 413
    assert "1 MiB" in (await response.json())["detail"]
    assert disk_state(client) == ([], [], 0)
    # a declared length far past the limit is refused before the body is read
    huge = await client.post(
        "/api/v1/registry/packages",
        data=b"x" * (3 << 20),
        headers={**auth(PUBLISH_TOKEN), "Content-Type": "multipart/form-data; boundary=b"},
    )
    assert huge.status == 413


def _small_limit_config(tmp_path):
    """A config whose [node] section sets max_upload_mb = 1."""
    path = write_config(tmp_path)
    path.write_text(path.read_text().replace("data_dir = ", "max_upload_mb = 1\ndata_dir = "))
    return load_config(path)


async def test_publishing_needs_the_publish_scope(client):
    assert (await client.post("/api/v1/registry/packages", data=form())).status == 401
    assert (await publish(client, form(), READ_TOKEN)).status == 403
    assert (await client.get("/api/v1/registry/packages")).status == 401
    assert disk_state(client) == ([], [], 0)


async def test_a_failed_append_removes_the_blob(client, monkeypatch):
    store = client.app[CONTEXT].store

    async def refuse(*args, **kwargs):
        raise RuntimeError("disk on fire")

    monkeypatch.setattr(store, "append", refuse)
    response = await publish(client, form())
    assert response.status == 500
    monkeypatch.undo()
    assert disk_state(client) == ([], [], 0)
    root = registry_root(client.app[CONTEXT].config)
    assert not (root / "refs" / "payer" / "1.0.0").exists()


async def test_resolve_reads_the_registry_read_model(client):
    await publish(client, form())
    registry = client.app[REGISTRY]
    path = registry.resolve("registry:payer@1.0.0")
    assert path.read_bytes() == COMPONENT
    for missing in ("registry:payer@2.0.0", "registry:ghost@1.0.0"):
        with pytest.raises(RegistryError):
            registry.resolve(missing)
    for malformed in ("payer@1.0.0", "registry:payer", "registry:payer@1.0", "registry:@1.0.0"):
        with pytest.raises(ValueError):
            registry.resolve(malformed)


async def test_restart_removes_unpublished_blobs_and_keeps_published_ones(tmp_path, aiohttp_client):
    config = make_config(tmp_path)
    first = await aiohttp_client(build_app(config))
    assert (await publish(first, form())).status == 201
    await first.close()
    root = registry_root(config)
    orphan = root / "blobs" / "sha256" / ("ab" * 32 + ".wasm")
    orphan.write_bytes(b"left by a crash between blob and event")
    (root / "refs" / "ghost").mkdir(parents=True)  # what earlier releases cached
    (root / "refs" / "ghost" / "1.0.0").write_text("sha256:" + "ab" * 32)
    (root / "tmp" / "upload-123").write_bytes(b"half an upload")
    second = await aiohttp_client(build_app(config))
    assert not orphan.exists()
    assert not (root / "refs").exists()
    assert list((root / "tmp").iterdir()) == []
    resolved = second.app[REGISTRY].resolve("registry:payer@1.0.0")
    assert resolved.read_bytes() == COMPONENT
    one = await (await second.get("/api/v1/registry/packages/payer", headers=auth())).json()
    assert one["versions"] == ["1.0.0"]


def test_semver_rules():
    for good in ("0.0.0", "1.2.3", "1.0.0-alpha.1", "1.0.0+build.5", "1.0.0-rc.1+b", "10.20.30"):
        assert is_semver(good), good
    for bad in ("1", "1.2", "1.2.3.4", "01.2.3", "1.2.3-", "1.2.3+", "1.2.3-a..b", "1.2.3\n"):
        assert not is_semver(bad), bad
    ordered = [
        "1.0.0-alpha",
        "1.0.0-alpha.1",
        "1.0.0-alpha.beta",
        "1.0.0-beta",
        "1.0.0-beta.2",
        "1.0.0-beta.11",
        "1.0.0-rc.1",
        "1.0.0",
        "2.0.0",
        "2.1.0",
        "2.1.1",
    ]
    assert sorted(reversed(ordered), key=semver_key) == ordered
