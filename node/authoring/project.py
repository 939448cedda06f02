"""An agent project on disk: its manifest (`agent.toml`), and making a new one from a template.

The manifest names the package the agent is published as, its version and its language, so
`build`, `test` and `publish` need no flags for what the project already says.
"""

from __future__ import annotations

import re
import tomllib
from dataclasses import dataclass
from importlib import resources
from pathlib import Path

from node.authoring import LANGUAGES
from projections.packages import PACKAGE_ID, is_semver

MANIFEST = "agent.toml"
WORLD = "agent"
PACKAGE_ID_RE = re.compile(PACKAGE_ID)
PLACEHOLDER = "__AGENT_NAME__"
# template file (under templates/<language>/) -> file in the new project
TEMPLATE_FILES = {
    "python": {
        "app.py.tmpl": "app.py",
        "test_app.py.tmpl": "test_app.py",
        "README.md.tmpl": "README.md",
        "gitignore.tmpl": ".gitignore",
    },
    "js": {
        "app.js.tmpl": "app.js",
        "app.test.mjs.tmpl": "app.test.mjs",
        "package.json.tmpl": "package.json",
        "README.md.tmpl": "README.md",
        "gitignore.tmpl": ".gitignore",
    },
}
# `agent new --template tools`: a tool-calling agent (templates/<language>_tools/)
TEMPLATE_FILES["python_tools"] = {
    **TEMPLATE_FILES["python"],
    "answers.json.tmpl": "answers.json",
}
TEMPLATE_FILES["js_tools"] = {**TEMPLATE_FILES["js"], "answers.json.tmpl": "answers.json"}
TEMPLATES = {"words": "", "tools": "_tools"}  # the template's name -> its folder's suffix
DESCRIPTIONS = {
    "words": "Counts words; a template to start from",
    "tools": "Answers questions with a model calling its tools; a template to start from",
}


class ProjectError(Exception):
    """The project is missing or its manifest is wrong; the message says what to fix."""


@dataclass(frozen=True)
class Project:
    root: Path
    name: str
    version: str
    language: str
    description: str = ""

    @property
    def source(self) -> Path:
        return self.root / LANGUAGES[self.language]

    @property
    def wit_dir(self) -> Path:
        return self.root / "wit"

    @property
    def output(self) -> Path:
        """Where `agent build` writes the component."""
        return self.root / "build" / f"{self.name}.wasm"


def wit_text() -> str:
    """The WIT world the node hosts, as shipped in this package."""
    return resources.files("node.authoring").joinpath("wit", "agent.wit").read_text()


def check_name(name: str) -> None:
    if not PACKAGE_ID_RE.fullmatch(name):
        raise ProjectError(
            f"agent name {name!r}: use 1 to 64 lower-case letters, digits, '.', '_' or '-',"
            " starting with a letter or digit (it is also the registry package id)"
        )


def load(root: Path) -> Project:
    """The project at `root`, validated."""
    path = root / MANIFEST
    if not path.is_file():
        raise ProjectError(
            f"{root} is not an agent project (no {MANIFEST}); make one with"
            " `agent-node agent new NAME`"
        )
    try:
        data = tomllib.loads(path.read_text())
    except (tomllib.TOMLDecodeError, UnicodeDecodeError) as exc:
        raise ProjectError(f"{path}: {exc}") from None
    unknown = sorted(set(data) - {"name", "version", "language", "description"})
    if unknown:
        raise ProjectError(f"{path}: unknown key(s) {', '.join(unknown)}")
    name, version = data.get("name"), data.get("version", "0.1.0")
    language, description = data.get("language", "python"), data.get("description", "")
    if not isinstance(name, str):
        raise ProjectError(f"{path}: `name` is missing (the registry package id)")
    try:
        check_name(name)
    except ProjectError as exc:
        raise ProjectError(f"{path}: {exc}") from None
    if not isinstance(version, str) or not is_semver(version):
        raise ProjectError(f"{path}: version {version!r} is not a SemVer version like 0.1.0")
    if language not in LANGUAGES:
        raise ProjectError(f"{path}: language {language!r}: use one of {', '.join(LANGUAGES)}")
    if not isinstance(description, str):
        raise ProjectError(f"{path}: description must be a string")
    project = Project(root.resolve(), name, version, language, description)
    if not project.source.is_file():
        raise ProjectError(f"{project.source} is missing (the {language} agent's source)")
    if not (project.wit_dir / "agent.wit").is_file():
        raise ProjectError(f"{project.wit_dir / 'agent.wit'} is missing (the node's WIT world)")
    return project


def create(name: str, language: str, parent: Path, template: str = "words") -> Project:
    """Write a new project `parent/name` from the language's template."""
    check_name(name)
    if language not in LANGUAGES:
        raise ProjectError(f"language {language!r}: use one of {', '.join(LANGUAGES)}")
    root = parent / name
    if root.exists() and any(root.iterdir()):
        raise ProjectError(f"{root} already exists and is not empty")
    folder = language + TEMPLATES[template]
    templates = resources.files("node.authoring").joinpath("templates", folder)
    root.mkdir(parents=True, exist_ok=True)
    (root / "wit").mkdir()
    (root / "wit" / "agent.wit").write_text(wit_text())
    for source, target in TEMPLATE_FILES[folder].items():
        text = templates.joinpath(source).read_text()
        (root / target).write_text(text.replace(PLACEHOLDER, name))
    (root / MANIFEST).write_text(
        "# The agent project, read by `agent-node agent build|test|publish`.\n"
        f'name = "{name}"          # the registry package id\n'
        'version = "0.1.0"         # SemVer: `agent publish` publishes this version\n'
        f'language = "{language}"  # python or js\n'
        f'description = "{DESCRIPTIONS[template]}"\n'
    )
    return load(root)
