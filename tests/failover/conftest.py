"""A failed failover test shows its nodes' logs: its failures are timed, and the logs say why."""

from __future__ import annotations

import pytest


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
