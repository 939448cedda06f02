"""Building an agent project into a component: componentize-py or componentize-js.

Python agents are built with componentize-py from the same environment as agent-node (the
`agents` extra). JavaScript agents are built with componentize-js from npm, installed into
the project's own node_modules (pinned by its package.json/package-lock.json; npm's cache
makes later installs work offline). The node offers WASI without wasi:http, so a JS agent is
built without fetch(): it reaches the network through `invoke("http_fetch", ...)`.
"""

from __future__ import annotations

import hashlib
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

from node.authoring.project import WORLD, Project

COMPONENTIZE_JS = Path("node_modules") / ".bin" / "componentize-js"
JS_DISABLED_FEATURES = ("http", "fetch-event")  # no wasi:http in the node's linker
INSTALL_STAMP = ".agent-node-installed-"
ERROR_LINES = 25


class BuildError(Exception):
    """The build could not run or failed; the message has the tool's own words."""


@dataclass(frozen=True)
class Built:
    path: Path
    seconds: float
    size: int


def build(project: Project) -> Built:
    """Build `project` into project.output (written whole: a failed build leaves the old one)."""
    start = time.perf_counter()
    project.output.parent.mkdir(parents=True, exist_ok=True)
    tmp = project.output.with_name(f".{project.output.name}.tmp{os.getpid()}")
    try:
        if project.language == "python":
            build_python(project.root, project.wit_dir, WORLD, tmp)
        else:
            build_js(project.root, project.wit_dir, WORLD, tmp)
        os.replace(tmp, project.output)
    finally:
        tmp.unlink(missing_ok=True)
    return Built(project.output, time.perf_counter() - start, project.output.stat().st_size)


def is_stale(project: Project) -> bool:
    """True when the component is missing or older than a source of the project."""
    if not project.output.exists():
        return True
    built = project.output.stat().st_mtime
    sources = [project.root / "agent.toml", *project.wit_dir.rglob("*.wit")]
    sources += [p for p in project.root.glob("*.py" if project.language == "python" else "*.js")]
    return any(p.stat().st_mtime > built for p in sources if p.is_file())


# ---------------------------------------------------------------------------- Python
def componentize_py() -> str:
    beside = Path(sys.executable).parent / "componentize-py"
    found = str(beside) if beside.exists() else shutil.which("componentize-py")
    if not found:
        raise BuildError(
            "componentize-py is not installed: pip install 'agent-node[agents]'"
            " (into the environment agent-node runs from)"
        )
    return found


def build_python(source_dir: Path, wit: Path, world: str, dest: Path) -> None:
    """componentize-py: the module `app` of `source_dir` against `wit`'s `world`."""
    env = {k: v for k, v in os.environ.items() if k != "VIRTUAL_ENV"}  # bundle no venv's packages
    command = [componentize_py(), "-q", "-d", str(wit), "-w", world, "componentize", "app"]
    command += ["-p", str(source_dir), "-o", str(dest.resolve())]
    with tempfile.TemporaryDirectory(prefix="agent-build-") as cwd:
        _run(command, cwd=Path(cwd), env=env, what="componentize-py")


# ---------------------------------------------------------------------------- JavaScript
def npm_tools() -> tuple[str, str]:
    node, npm = shutil.which("node"), shutil.which("npm")
    if not node or not npm:
        raise BuildError(
            "building a JavaScript agent needs Node.js (20 or newer) and npm on PATH:"
            " componentize-js comes from npm. Install them (https://nodejs.org, or"
            " `apt-get install nodejs npm`) and build again"
        )
    return node, npm


def install_js_tools(project_dir: Path) -> Path:
    """npm ci (or install) into project_dir/node_modules when package.json or its lock changed;
    npm's cache serves what it already has (--prefer-offline). Returns componentize-js."""
    _, npm = npm_tools()
    package = project_dir / "package.json"
    if not package.is_file():
        raise BuildError(f"{package} is missing: it pins @bytecodealliance/componentize-js")
    lock = project_dir / "package-lock.json"
    digest = hashlib.sha256(package.read_bytes() + (lock.read_bytes() if lock.exists() else b""))
    stamp = project_dir / "node_modules" / f"{INSTALL_STAMP}{digest.hexdigest()[:16]}"
    tool = project_dir / COMPONENTIZE_JS
    if not (stamp.exists() and tool.exists()):
        verb = "ci" if lock.exists() else "install"
        print(f"npm {verb}: componentize-js into {project_dir / 'node_modules'}", file=sys.stderr)
        flags = ["--no-audit", "--no-fund", "--loglevel=error", "--prefer-offline"]
        _run([npm, verb, *flags], cwd=project_dir, env=dict(os.environ), what=f"npm {verb}")
        if not tool.exists():
            raise BuildError(f"npm {verb} did not install componentize-js ({tool})")
        for old in (project_dir / "node_modules").glob(f"{INSTALL_STAMP}*"):
            old.unlink()
        stamp.touch()
    return tool


def build_js(source_dir: Path, wit: Path, world: str, dest: Path) -> None:
    """componentize-js: `app.js` of `source_dir` against `wit`'s `world`."""
    node, _ = npm_tools()
    tool = install_js_tools(source_dir)
    command = [node, str(tool.resolve()), "app.js", "--wit", str(wit.resolve()), "-n", world]
    command += ["-d", *JS_DISABLED_FEATURES, "-o", str(dest.resolve())]
    _run(command, cwd=source_dir, env=dict(os.environ), what="componentize-js")


def _run(command: list[str], cwd: Path, env: dict[str, str], what: str) -> None:
    try:
        run = subprocess.run(command, capture_output=True, text=True, env=env, cwd=cwd)
    except OSError as exc:
        raise BuildError(f"cannot run {what}: {exc}") from None
    if run.returncode != 0:
        lines = [
            line
            for line in (run.stderr + run.stdout).splitlines()
            if not re.match(r"^\s+(\d+:|at )", line)  # drop stack frames, keep the message
        ]
        raise BuildError(f"{what} failed:\n" + "\n".join(lines[-ERROR_LINES:]))
