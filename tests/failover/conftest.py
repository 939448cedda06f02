"""The failover tests' meshes (`failover`), and a failed test shows its nodes' logs: its
failures are timed, and the logs say why."""

from __future__ import annotations

import pytest

from harness.failover import FailoverMesh
from node.runtime.compiled_cache import COMPILED_CACHE_ENV
from tests.runtime_support import COMPILED_CACHE


@pytest.fixture
def failover(request, tmp_path, monkeypatch):
    """Makes FailoverMesh(...)s on the test's shared compile cache, all killed at the end."""
    monkeypatch.setenv(COMPILED_CACHE_ENV, str(COMPILED_CACHE))
    meshes: list[FailoverMesh] = []

    def make(**kwargs) -> FailoverMesh:
        meshes.append(FailoverMesh(tmp_path / f"f{len(meshes)}", **kwargs).start())
        return meshes[-1]

    request.node.failover_meshes = meshes  # their logs join a failure's report (below)
    yield make
    for mesh in meshes:
        mesh.kill()


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(item, call):
    report = yield
    if report.when == "call" and report.failed:
        for mesh in getattr(item, "failover_meshes", ()):
            for name, node in mesh.mesh.nodes.items():
                if node.log_path.exists():
                    tail = node.log_path.read_text(errors="replace")[-5000:]
                    report.sections.append((f"log of {name}", tail))
    return report
