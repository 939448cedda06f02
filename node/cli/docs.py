"""`agent-node docs [TOPIC]`: the project's documentation, from the install itself.

A wheel carries docs/*.md as package data (node/docs/, copied there by setup.py's build_py); a
checkout or an editable install reads the repository's docs/. `agent-node docs` lists the
topics, `agent-node docs agents` prints one, `--path` says where the files are.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

NODE_PACKAGE = Path(__file__).resolve().parent.parent  # node/ (this is node/cli/docs.py)
PACKAGED = NODE_PACKAGE / "docs"  # in a wheel (setup.py copies docs/ here)
CHECKOUT = NODE_PACKAGE.parent / "docs"  # a checkout, an editable install


def docs_dir() -> Path | None:
    for folder in (PACKAGED, CHECKOUT):
        if (folder / "agents.md").is_file():
            return folder
    return None


def topics(folder: Path) -> dict[str, Path]:
    """Topic name (`agents`, `protocols/mcp`) to its file."""
    return {
        path.relative_to(folder).with_suffix("").as_posix(): path
        for path in sorted(folder.rglob("*.md"))
    }


def title(path: Path) -> str:
    with path.open(encoding="utf-8") as text:
        first = text.readline().strip()
    return first.lstrip("# ").strip()


def documented_parser(
    sub: argparse._SubParsersAction[argparse.ArgumentParser], name: str, help: str, text: str
) -> argparse.ArgumentParser:
    """A subcommand whose --help shows `text` (its module's docstring, a format) as written."""
    return sub.add_parser(
        name, help=help, description=text, formatter_class=argparse.RawDescriptionHelpFormatter
    )


def register(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    docs = documented_parser(
        sub,
        "docs",
        "print the documentation: writing agents, the API, configuration, deploying, ...",
        __doc__ or "",
    )
    docs.add_argument("topic", nargs="?", help="a topic (`agent-node docs` lists them)")
    docs.add_argument("--path", action="store_true", help="print where the file (or folder) is")
    docs.set_defaults(func=cmd_docs)


def cmd_docs(args: argparse.Namespace) -> int:
    folder = docs_dir()
    if folder is None:
        print("agent-node: this install carries no documentation", file=sys.stderr)
        return 1
    found = topics(folder)
    if args.topic is None:
        if args.path:
            print(folder)
            return 0
        print(f"agent-node docs TOPIC prints one (files in {folder}):")
        width = max(len(name) for name in found)
        for name, path in found.items():
            print(f"  {name.ljust(width)}  {title(path)}")
        return 0
    topic = args.topic.removesuffix(".md").removeprefix("docs/")
    if topic not in found:
        print(
            f"agent-node: no topic {args.topic!r}; topics: {', '.join(found)}",
            file=sys.stderr,
        )
        return 2
    if args.path:
        print(found[topic])
    else:
        sys.stdout.write(found[topic].read_text(encoding="utf-8"))
    return 0
