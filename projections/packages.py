"""Registry packages from `package.published` events of the node-level `$registry` journal.

Versions are ordered by SemVer 2.0 precedence (ties, which differ only in build metadata, by
their text). The package's `version` is the latest release; a package with only
pre-releases shows its highest pre-release.
"""

from __future__ import annotations

import re
from typing import Any

import msgspec

from eventstore.envelope import Envelope
from projections.catalogue import PACKAGE_PUBLISHED

REGISTRY_STREAM = "$registry"
PACKAGE_ID = r"^[a-z0-9][a-z0-9._-]{0,63}$(?!\n)"  # whole: see node.config.model.AGENT_NAME
PACKAGE_ID_RE = re.compile(PACKAGE_ID)
_NUM = r"0|[1-9][0-9]*"
_PRE_ID = r"0|[1-9][0-9]*|[0-9]*[a-zA-Z-][0-9a-zA-Z-]*"
SEMVER_RE = re.compile(
    rf"({_NUM})\.({_NUM})\.({_NUM})"
    rf"(?:-((?:{_PRE_ID})(?:\.(?:{_PRE_ID}))*))?"
    r"(?:\+([0-9a-zA-Z-]+(?:\.[0-9a-zA-Z-]+)*))?"
)
MAX_VERSION_LENGTH = 128


def is_semver(text: str) -> bool:
    """Strict SemVer 2.0: no leading `v`, no leading zeros, no surrounding whitespace."""
    return len(text) <= MAX_VERSION_LENGTH and SEMVER_RE.fullmatch(text) is not None


SemverKey = tuple[tuple[int, ...], tuple[Any, ...], str]


def semver_key(text: str) -> SemverKey:
    """Sort key by SemVer precedence; a release sorts after its pre-releases."""
    match = SEMVER_RE.fullmatch(text)
    if match is None:
        return ((-1,), (), text)  # cannot happen for stored versions; keeps sorting total
    major, minor, patch, pre, _build = match.groups()
    if pre is None:
        pre_key: tuple[Any, ...] = (1,)
    else:
        pre_key = (
            0,
            tuple((0, int(p), "") if p.isdigit() else (1, 0, p) for p in pre.split(".")),
        )
    return ((int(major), int(minor), int(patch)), pre_key, text)


def is_prerelease(text: str) -> bool:
    match = SEMVER_RE.fullmatch(text)
    return match is not None and match.group(4) is not None


class Package(msgspec.Struct, frozen=True, kw_only=True):
    """One published version; `versions` is set only for the single-package read."""

    id: str
    version: str
    description: str
    wasm_size_bytes: int
    published_at: str
    checksum: str
    versions: list[str] | msgspec.UnsetType = msgspec.UNSET


class Registry:
    name = "registry"
    handles = frozenset({PACKAGE_PUBLISHED})

    def __init__(self) -> None:
        self.packages: dict[str, dict[str, Package]] = {}
        self._sorted: dict[str, list[str]] = {}

    def apply(self, envelope: Envelope) -> None:
        if envelope.stream != REGISTRY_STREAM or envelope.event.type != PACKAGE_PUBLISHED:
            return
        data = envelope.event.data
        package_id, version = data.get("id"), data.get("version")
        if not isinstance(package_id, str) or not isinstance(version, str):
            return
        versions = self.packages.setdefault(package_id, {})
        if version in versions:
            return
        versions[version] = Package(
            id=package_id,
            version=version,
            description=str(data.get("description", "")),
            wasm_size_bytes=size if isinstance(size := data.get("wasm_size_bytes"), int) else 0,
            published_at=envelope.event.ts,
            checksum=str(data.get("checksum", "")),
        )
        self._sorted[package_id] = sorted(versions, key=semver_key)

    def has(self, package_id: str, version: str) -> bool:
        return version in self.packages.get(package_id, {})

    def version(self, package_id: str, version: str) -> Package | None:
        return self.packages.get(package_id, {}).get(version)

    def versions(self, package_id: str) -> list[str]:
        """All versions of a package in ascending SemVer order."""
        return list(self._sorted.get(package_id, []))

    def latest(self, package_id: str) -> Package | None:
        ordered = self._sorted.get(package_id)
        if not ordered:
            return None
        releases = [v for v in ordered if not is_prerelease(v)]
        return self.packages[package_id][(releases or ordered)[-1]]

    def read(self, package_id: str) -> Package | None:
        """The latest version with every known version listed (the single-package read)."""
        latest = self.latest(package_id)
        if latest is None:
            return None
        return msgspec.structs.replace(latest, versions=self.versions(package_id))

    def list(self) -> list[Package]:
        """The latest version of every package, by id."""
        return [p for p in (self.latest(i) for i in sorted(self.packages)) if p is not None]

    def checksums(self) -> set[str]:
        return {p.checksum for versions in self.packages.values() for p in versions.values()}

    def snapshot(self) -> dict[str, Any]:
        return {
            pid: [msgspec.to_builtins(versions[v]) for v in self._sorted[pid]]
            for pid, versions in sorted(self.packages.items())
        }
