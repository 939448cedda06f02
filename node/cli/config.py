"""`agent-node config check` and `agent-node config schema`: the config without a running node.

`check` reports every problem at once, each with its key (the node itself stops at the first),
and exits 1 when there is any. `schema` prints a JSON Schema generated from the config's msgspec
types, for editors that complete and check TOML against one (docs/configuration.md).
"""

from __future__ import annotations

import argparse
import copy as copy_module
import json
import re
import sys
import tomllib
import typing
from pathlib import Path
from typing import TYPE_CHECKING, Any

from node.cli import config_init
from node.display.humanize import visible

if TYPE_CHECKING:  # msgspec and the config's model load in the functions (CLI start-up time)
    import msgspec

    from node.config.model import Config

SCHEMA_DIALECT = "https://json-schema.org/draft/2020-12/schema"
_INTERNAL_FIELDS = ("base_dir",)  # set by the loader, never written in a file


def register(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """Add `config check` and `config schema` to the CLI's subcommands."""
    config = sub.add_parser(
        "config",
        help="make a first config, check one, or print the config's JSON Schema",
        epilog="every key: `agent-node docs configuration`",
    )
    actions = config.add_subparsers(metavar="ACTION")
    check = actions.add_parser("check", help="report every problem of a config, with its key")
    check.add_argument("--config", default="runtime.toml", help="path of runtime.toml")
    check.set_defaults(func=cmd_config_check)
    schema = actions.add_parser("schema", help="print the config's JSON Schema (for editors)")
    schema.set_defaults(func=cmd_config_schema)
    config_init.register(actions)  # config init (node/cli/config_init.py)


def cmd_config_check(args: argparse.Namespace) -> int:
    path = Path(args.config)
    problems = check_file(path)
    warnings = exposure_warnings(path)
    for warning in warnings:
        print(f"warning: {visible(warning)}", file=sys.stderr)
    if problems:
        for problem in problems:
            print(visible(problem), file=sys.stderr)  # a key or value may hold anything
        print(f"{len(problems)} problem(s) in {path}", file=sys.stderr)
        return 1
    print(f"config ok: {path}" + (f" ({len(warnings)} warning(s))" if warnings else ""))
    return 0


def exposure_warnings(path: Path) -> list[str]:
    """What the node would warn about at start (node/config/exposure.py), also beside problems;
    none when the config does not even convert."""
    import msgspec

    from node.config.exposure import public_warnings
    from node.config.model import Config

    try:
        raw = tomllib.loads(path.read_text())
        config = msgspec.convert({**raw, "base_dir": str(path.resolve().parent)}, Config)
    except (OSError, UnicodeDecodeError, tomllib.TOMLDecodeError, msgspec.ValidationError):
        return []
    return list(public_warnings(config, str(path)))


def cmd_config_schema(args: argparse.Namespace) -> int:
    print(json.dumps(config_schema(), indent=2))
    return 0


def check_file(path: Path) -> list[str]:
    """Every problem of the config file at `path`; empty when the node would accept it."""
    import msgspec

    from node.config.exposure import config_file_problem
    from node.config.load import config_problems
    from node.config.model import Config

    source = str(path)
    try:
        raw = tomllib.loads(path.read_text())
    except OSError as exc:
        return [f"{source}: cannot read: {exc.strerror}"]
    except (tomllib.TOMLDecodeError, UnicodeDecodeError) as exc:
        return [f"{source}: not valid TOML: {exc}"]
    bad: list[Path_] = []
    problems = [f"{source}: {p}" for p in _shape_problems(raw, Config, "", (), bad)]
    rest = _without(raw, bad) if bad else raw
    try:
        if rest is None:
            raise msgspec.ValidationError
        config = msgspec.convert({**rest, "base_dir": str(path.resolve().parent)}, Config)
    except msgspec.ValidationError:  # a required value is wrong: nothing more can be checked
        return [*problems, f"{source}: (the remaining checks run once these are fixed)"]
    problems += config_problems(config, source)
    problems += _missing_components(config, source)
    exposed = config_file_problem(path)  # refused here, only warned about by the node
    return [*problems, exposed] if exposed else problems


Path_ = tuple[str | int, ...]


def _shape_problems(
    raw: Any, expected: Any, where: str, path: Path_, bad: list[Path_]
) -> list[str]:
    """Type problems everywhere, not only the first: a struct key by key, a list item by item.

    Where each problem sits goes into `bad`, so the rest can still be checked without it.
    """
    import msgspec

    struct = _struct_type(expected)
    if struct is not None and isinstance(raw, dict):
        fields = {f.encode_name: f for f in msgspec.structs.fields(struct)}
        problems = []
        for key in raw:
            if key not in fields or key in _INTERNAL_FIELDS:
                problems.append(f"{_join(where, key)}: unknown key")
                bad.append((*path, key))
        for name, field in fields.items():
            if name in _INTERNAL_FIELDS:
                continue
            if name not in raw:
                if field.required:
                    problems.append(f"{_join(where, name)}: missing (required)")
                    bad.append(path)
                continue
            problems += _shape_problems(
                raw[name], field.type, _join(where, name), (*path, name), bad
            )
        return problems
    origin, args = typing.get_origin(expected), typing.get_args(expected)
    if origin is list and isinstance(raw, list) and _struct_type(args[0]) is not None:
        return [
            problem
            for i, item in enumerate(raw)
            for problem in _shape_problems(item, args[0], f"{where}[{i}]", (*path, i), bad)
        ]
    if origin is dict and isinstance(raw, dict) and _struct_type(args[1]) is not None:
        return [
            problem
            for key, value in raw.items()
            for problem in _shape_problems(value, args[1], _join(where, key), (*path, key), bad)
        ]
    try:
        msgspec.convert(raw, expected)
    except msgspec.ValidationError as exc:
        bad.append(path)
        return [f"{where or 'top level'}: {_located(str(exc), where)}"]
    return []


def _without(raw: Any, paths: list[Path_]) -> Any:
    """A deep copy of `raw` without the values at `paths` (so that their defaults apply)."""
    copy = copy_module.deepcopy(raw)
    for path in sorted(paths, key=len, reverse=True):
        if not path:
            return None
        parent = copy
        try:
            for step in path[:-1]:
                parent = parent[step]
            if isinstance(parent, dict):
                parent.pop(path[-1], None)
            else:
                return None  # an item of a list cannot go without shifting the others
        except (KeyError, IndexError, TypeError):
            return None
    return copy


def _struct_type(expected: Any) -> type[msgspec.Struct] | None:
    import msgspec

    if typing.get_origin(expected) is typing.Annotated:
        expected = typing.get_args(expected)[0]
    if isinstance(expected, type) and issubclass(expected, msgspec.Struct):
        return expected
    return None


def _join(where: str, key: str) -> str:
    return f"{where}.{key}" if where else key


def _located(message: str, where: str) -> str:
    """msgspec's ` - at `$[0]`` suffix, said in TOML keys (`agents[0].grants.domains[0]`)."""
    return re.sub(r" - at `\$(.*?)`", lambda m: f" (at {where}{m.group(1)})", message)


def _missing_components(config: Config, source: str) -> list[str]:
    """A component path that does not exist (registry references are resolved at start)."""
    return [
        f"{source}: agents[{i}].component: {config.path(agent.component)} does not exist"
        for i, agent in enumerate(config.agents)
        if not agent.component.startswith("registry:") and not config.path(agent.component).exists()
    ]


def config_schema() -> dict[str, Any]:
    """JSON Schema (2020-12) of runtime.toml, from the same msgspec types the node validates."""
    import msgspec

    from node.config import help as config_help
    from node.config.model import Config

    schema = msgspec.json.schema(Config)
    root = schema["$defs"]["Config"]
    for name in _INTERNAL_FIELDS:
        root["properties"].pop(name, None)
    root["title"] = "agent-node runtime.toml"
    config_help.describe(schema)  # what each key means (node/config/help.py)
    return {"$schema": SCHEMA_DIALECT, **schema}
