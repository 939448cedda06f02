"""Registry packages: `package.published` in `$registry`, versions in SemVer order."""

from __future__ import annotations

import random
from typing import Any

import msgspec
import pytest

from projections.packages import (
    REGISTRY_STREAM,
    Package,
    Registry,
    is_prerelease,
    is_semver,
    semver_key,
)
from tests.projections.envelopes import Journal, envelope, fold, refolded_snapshot, ts_at


def publish(j: Journal, package_id: str, version: str, **extra: Any) -> None:
    data = {
        "id": package_id,
        "version": version,
        "description": f"{package_id} {version}",
        "wasm_size_bytes": 100,
        "checksum": f"sha256:{package_id}-{version}",
        **extra,
    }
    j.add(REGISTRY_STREAM, "package.published", data)


def registry_of(*versions: str, package_id: str = "pkg") -> Registry:
    j = Journal()
    for version in versions:
        publish(j, package_id, version)
    return fold(Registry(), j.envelopes)


def test_a_published_version_is_a_package() -> None:
    j = Journal()
    publish(j, "echo", "1.0.0")
    registry = fold(Registry(), j.envelopes)
    package = Package(
        id="echo",
        version="1.0.0",
        description="echo 1.0.0",
        wasm_size_bytes=100,
        published_at=ts_at(1),
        checksum="sha256:echo-1.0.0",
    )
    assert registry.version("echo", "1.0.0") == package
    assert registry.has("echo", "1.0.0") and not registry.has("echo", "2.0.0")
    assert not registry.has("other", "1.0.0")
    assert registry.latest("echo") == package
    assert registry.list() == [package]
    assert registry.read("echo") == msgspec.structs.replace(package, versions=["1.0.0"])
    assert registry.checksums() == {"sha256:echo-1.0.0"}


def test_missing_fields_have_defaults() -> None:
    data = {"id": "p", "version": "1.0.0", "wasm_size_bytes": "big"}
    registry = fold(
        Registry(), [envelope(REGISTRY_STREAM, 1, "package.published", data, position=1)]
    )
    package = registry.version("p", "1.0.0")
    assert package is not None
    assert (package.description, package.wasm_size_bytes, package.checksum) == ("", 0, "")


def test_a_republished_version_keeps_the_first() -> None:
    j = Journal()
    publish(j, "p", "1.0.0", checksum="first")
    publish(j, "p", "1.0.0", checksum="second")
    registry = fold(Registry(), j.envelopes)
    assert registry.versions("p") == ["1.0.0"]
    package = registry.version("p", "1.0.0")
    assert package is not None
    assert (package.checksum, package.published_at) == ("first", ts_at(1))
    assert registry.checksums() == {"first"}


def test_only_the_registry_journal_and_well_formed_events_count() -> None:
    j = Journal()
    j.add("alice", "package.published", {"id": "p", "version": "1.0.0"})  # not `$registry`
    j.add(REGISTRY_STREAM, "package.published", {"id": 1, "version": "1.0.0"})
    j.add(REGISTRY_STREAM, "package.published", {"id": "p", "version": 1})
    j.add(REGISTRY_STREAM, "package.published", {"version": "1.0.0"})
    j.add(REGISTRY_STREAM, "log", {"id": "p", "version": "1.0.0"})  # another type
    registry = Registry()
    for one in j.envelopes:  # directly, past the registry's `handles` filter
        registry.apply(one)
    assert registry.packages == {} and registry.list() == []
    assert registry.latest("p") is None and registry.read("p") is None
    assert registry.versions("p") == [] and registry.version("p", "1.0.0") is None


def test_versions_are_in_semver_order_whatever_the_publishing_order() -> None:
    ordered = [
        "0.9.0",
        "1.0.0-0.3.7",
        "1.0.0-alpha",
        "1.0.0-alpha.1",
        "1.0.0-alpha.beta",
        "1.0.0-beta",
        "1.0.0-beta.2",
        "1.0.0-beta.11",
        "1.0.0-rc.1",
        "1.0.0",
        "1.0.1",
        "1.2.0",
        "1.10.0",
        "2.0.0",
    ]
    shuffled = ordered[:]
    random.Random(7).shuffle(shuffled)
    assert registry_of(*shuffled).versions("pkg") == ordered


def test_build_metadata_ties_are_ordered_by_text() -> None:
    registry = registry_of("1.0.0+b", "1.0.0", "1.0.0+a")
    assert registry.versions("pkg") == ["1.0.0", "1.0.0+a", "1.0.0+b"]
    latest = registry.latest("pkg")
    assert latest is not None and latest.version == "1.0.0+b"


def test_latest_is_the_highest_release_not_a_newer_prerelease() -> None:
    registry = registry_of("1.0.0", "2.0.0-rc.1", "1.1.0")
    latest = registry.latest("pkg")
    assert latest is not None and latest.version == "1.1.0"
    read = registry.read("pkg")
    assert read is not None
    assert (read.version, read.versions) == ("1.1.0", ["1.0.0", "1.1.0", "2.0.0-rc.1"])
    assert latest.versions is msgspec.UNSET  # only the single-package read lists them
    assert registry.list()[0].version == "1.1.0"


def test_a_package_with_only_prereleases_shows_its_highest() -> None:
    registry = registry_of("1.0.0-alpha", "1.0.0-beta", "0.1.0-rc.1")
    latest = registry.latest("pkg")
    assert latest is not None and latest.version == "1.0.0-beta"


def test_list_is_the_latest_of_every_package_by_id() -> None:
    j = Journal()
    publish(j, "zeta", "1.0.0")
    publish(j, "alpha", "0.1.0")
    publish(j, "alpha", "0.2.0")
    registry = fold(Registry(), j.envelopes)
    assert [(p.id, p.version) for p in registry.list()] == [("alpha", "0.2.0"), ("zeta", "1.0.0")]
    assert registry.checksums() == {
        "sha256:zeta-1.0.0",
        "sha256:alpha-0.1.0",
        "sha256:alpha-0.2.0",
    }


@pytest.mark.parametrize(
    ("text", "valid", "pre"),
    [
        ("1.0.0", True, False),
        ("1.0.0-rc.1+build.5", True, True),
        ("1.0.0+build", True, False),
        ("v1.0.0", False, False),
        ("01.0.0", False, False),
        ("1.0.0-01", False, False),  # a numeric pre-release identifier has no leading zero
        ("1.0", False, False),
        (" 1.0.0", False, False),
        ("1.0.0-" + "a" * 200, False, True),  # too long, though it matches the grammar
    ],
)
def test_semver_checks(text: str, valid: bool, pre: bool) -> None:
    assert is_semver(text) is valid
    assert is_prerelease(text) is pre


def test_a_non_semver_text_sorts_first() -> None:
    assert sorted(["1.0.0", "junk", "0.0.1"], key=semver_key) == ["junk", "0.0.1", "1.0.0"]


def test_snapshot_lists_each_packages_versions_in_order_and_refolds_equal() -> None:
    j = Journal()
    publish(j, "b", "1.0.0")
    publish(j, "a", "2.0.0")
    publish(j, "a", "1.0.0-rc.1")
    registry = fold(Registry(), j.envelopes)
    snapshot = registry.snapshot()
    assert list(snapshot) == ["a", "b"]
    assert [p["version"] for p in snapshot["a"]] == ["1.0.0-rc.1", "2.0.0"]
    assert "versions" not in snapshot["a"][0]
    assert refolded_snapshot(registry, j.envelopes) == snapshot
