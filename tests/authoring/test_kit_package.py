"""The kit works from a pip install, not only from the repo: the WIT world and the templates
are package data of the wheel."""

from __future__ import annotations

import subprocess
import sys
import zipfile

from node.authoring.project import TEMPLATE_FILES, wit_text
from tests.support import ROOT


def test_the_shipped_wit_is_the_repos():
    """One contract: the world the kit gives authors is the newest one the node hosts."""
    assert wit_text() == (ROOT / "wit" / "0.3.0" / "agent.wit").read_text()


def test_a_wheel_carries_the_wit_and_the_templates_and_agent_new_works_from_it(
    pure_wheel, tmp_path
):
    names = set(zipfile.ZipFile(pure_wheel.wheel).namelist())
    assert "node/authoring/wit/agent.wit" in names
    for folder, files in TEMPLATE_FILES.items():
        for template in files:
            assert f"node/authoring/templates/{folder}/{template}" in names
    target, env = pure_wheel.site, pure_wheel.env
    code = (
        "import sys, node\n"
        f"assert node.__file__.startswith({str(target)!r}), node.__file__\n"
        "from node.cli.main import main\n"
        "sys.exit(main(['agent', 'new', 'from-wheel', '--lang', sys.argv[1],"
        " '--template', sys.argv[2]]))\n"
    )
    # -S: no .pth files, so the dev install's editable finder cannot supply `node`
    path = pure_wheel.python_path
    for folder, files in TEMPLATE_FILES.items():  # templates/<language>[_<template>]
        language, _, template = folder.partition("_")
        where = tmp_path / folder
        where.mkdir()
        ran = subprocess.run(
            [sys.executable, "-S", "-c", code, language, template or "words"],
            capture_output=True,
            text=True,
            env={**env, "PYTHONPATH": path},
            cwd=where,
            timeout=60,
        )
        assert ran.returncode == 0, ran.stderr
        project = where / "from-wheel"
        assert (project / "wit" / "agent.wit").read_text() == wit_text()
        assert sorted(p.name for p in project.iterdir()) == sorted(
            [*files.values(), "agent.toml", "wit"]
        )
        assert "__AGENT_NAME__" not in "".join(
            (project / name).read_text() for name in files.values()
        )
