"""The policy set: the `[policy] files`, parsed, their annotations read (rules.py) and the
whole checked against the schema of each capability's request (schema.py), at start, on
SIGHUP and by `config check`, every problem naming its file.

Its hash (`sha256:` + hex) covers everything a ruling depends on besides the request and the
time: the files' text in order, the declared request fields and the time zone. Each automatic
decision names it, so the journal tells which set decided, and `policy test` which one would.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from node.config.model import APPROVE_BY_POLICY, Config
from node.policy.approvers import groups_named
from node.policy.rules import Rule, rule_of
from node.policy.schema import (
    FieldType,
    numeric_fields,
    parse_record,
    request_types,
    schema_json,
)

if TYPE_CHECKING:  # imported when a config is loaded: the CLI's client starts faster
    import cedarpy

MAX_POLICY_FILE_BYTES = 1024 * 1024


class PolicyError(ValueError):
    """The policy set cannot be used; `problems` lists why, each naming its file."""

    def __init__(self, problems: list[str]) -> None:
        super().__init__("; ".join(problems))
        self.problems = problems


@dataclass(frozen=True)
class PolicySet:
    """A loaded, checked policy set: Cedar's parsed handles and the rules by Cedar's ids."""

    cedar: cedarpy.PolicySet
    schema: cedarpy.Schema
    rules: dict[str, Rule]  # Cedar's positional id ("policy0") → the rule
    digest: str
    types: dict[str, FieldType]
    zone: ZoneInfo
    actions: frozenset[str] = frozenset()  # the capabilities the schema has an action for
    files: tuple[str, ...] = ()
    by_id: dict[str, Rule] = field(default_factory=dict)

    @property
    def empty(self) -> bool:
        return not self.rules


def load_policy_set(config: Config, source: str = "runtime.toml") -> PolicySet:
    """The config's policy set; PolicyError with every problem found."""
    problems: list[str] = []
    loaded = _load(config, source, problems)
    if loaded is None or problems:
        raise PolicyError(problems or [f"{source}: policy: cannot be loaded"])
    return loaded


def policy_problems(config: Config, source: str) -> Iterator[str]:
    """Every problem of the config's `[policy]` and of the files it names (config_problems)."""
    problems: list[str] = []
    _load(config, source, problems)
    yield from problems


def _load(config: Config, source: str, problems: list[str]) -> PolicySet | None:
    import cedarpy

    where = f"{source}: policy"
    section = config.policy
    try:
        zone = ZoneInfo(section.timezone)
    except (ZoneInfoNotFoundError, ValueError):
        problems.append(f"{where}.timezone: {section.timezone[:80]!r} is not a known time zone")
        zone = ZoneInfo("UTC")
    types = request_types({})  # http_fetch's built in, unless the config declares it
    for capability, declared in section.requests.items():
        try:
            types[capability] = parse_record(declared)
        except ValueError as exc:
            problems.append(f"{where}.requests.{capability}.{exc}")
    for i, agent in enumerate(config.agents):
        for capability, rule in agent.approval.items():
            if rule == APPROVE_BY_POLICY and not section.files:
                problems.append(
                    f'{source}: agents[{i}].approval.{capability}: "policy" needs policy '
                    "files ([policy] files = [...]); without any, every request asks people"
                )
    capabilities = {c for a in config.agents for c in a.capabilities} | set(types)
    schema_text = schema_json(types, capabilities)
    texts: list[str] = []
    for i, name in enumerate(section.files):
        text = _read(config.path(name), f"{where}.files[{i}] ({name})", problems)
        if text is not None:
            try:
                cedarpy.PolicySet.from_str(text)
            except ValueError as exc:
                problems.append(f"{where}.files[{i}] ({name}): not Cedar: {_first_line(exc)}")
                continue
            texts.append(text)
    if len(texts) < len(section.files):
        return None  # the rest is checked once every file parses
    whole = "\n".join(texts)
    cedar = cedarpy.PolicySet.from_str(whole)
    schema = cedarpy.Schema.from_json_str(schema_text)
    parsed = json.loads(cedarpy.policies_to_json_str(whole))
    if parsed.get("templates"):
        problems.append(f"{where}.files: templates (?principal, ?resource) are not supported")
    rules: dict[str, Rule] = {}
    for cedar_id, policy in parsed.get("staticPolicies", {}).items():
        try:
            rules[cedar_id] = rule_of(policy)
        except ValueError as exc:
            label = (policy.get("annotations") or {}).get("id") or _position(cedar_id)
            problems.append(f"{where}: policy {label}: {exc}")
    by_id: dict[str, Rule] = {}
    for rule in rules.values():
        if rule.id in by_id:
            problems.append(f"{where}: @id({rule.id!r}) names two policies")
        by_id[rule.id] = rule
    problems.extend(_rule_problems(config, where, by_id.values(), types))
    if whole.strip():
        checked = cedarpy.validate_policies(whole, schema)
        for error in checked.errors:
            rule = rules.get(error.policy_id)
            label = rule.id if rule else error.policy_id or "?"
            problems.append(f"{where}: policy {label}: {error.error}")
    if problems:
        return None
    return PolicySet(
        cedar=cedar,
        schema=schema,
        rules=rules,
        digest=_digest(texts, section.timezone, section.requests),
        types=types,
        zone=zone,
        actions=frozenset(capabilities),
        files=tuple(section.files),
        by_id=by_id,
    )


def _rule_problems(
    config: Config, where: str, rules: Any, types: dict[str, FieldType]
) -> Iterator[str]:
    """What Cedar cannot see: groups nobody is in, budgets over fields that are not numbers."""
    groups = {g for token in config.auth.tokens for g in token.groups}
    for rule in rules:
        for group in sorted(groups_named(rule.approvers) - groups):
            yield (
                f"{where}: policy {rule.id}: @approvers names group {group!r}, which no "
                "[[auth.tokens]] entry is in (add groups = [...] to a token)"
            )
        if rule.budget is None:
            continue
        scope = rule.budget.scope
        if scope.kind == "group" and scope.name not in config.agent_groups:
            yield (
                f"{where}: policy {rule.id}: @budget is shared by group {scope.name!r}, which "
                "[agent_groups] does not define (add it: name = [agents])"
            )
        if rule.actions is None:
            yield (
                f"{where}: policy {rule.id}: a @budget needs the policy scoped to its "
                'capabilities (action == Action::"spend")'
            )
            continue
        for capability in sorted(rule.actions):
            declared = types.get(capability)
            numeric = dict(numeric_fields(declared)) if declared else {}
            if rule.budget.field not in numeric:
                yield (
                    f"{where}: policy {rule.id}: @budget sums {rule.budget.field!r}, which "
                    f"[policy.requests.{capability}] does not declare as Long or decimal"
                )


def _read(path: Path, where: str, problems: list[str]) -> str | None:
    try:
        data = path.read_bytes()
    except OSError as exc:
        problems.append(f"{where}: cannot read {path}: {exc.strerror}")
        return None
    if len(data) > MAX_POLICY_FILE_BYTES:
        problems.append(f"{where}: larger than {MAX_POLICY_FILE_BYTES // 1024} KiB")
        return None
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError:
        problems.append(f"{where}: not UTF-8 text")
        return None


def _digest(texts: list[str], timezone: str, requests: dict[str, Any]) -> str:
    canonical = json.dumps(
        {"files": texts, "timezone": timezone, "requests": requests},
        sort_keys=True,
        ensure_ascii=False,
    )
    return "sha256:" + hashlib.sha256(canonical.encode("utf-8")).hexdigest()


def _first_line(exc: Exception) -> str:
    return " ".join(str(exc).split())[:400]


def _position(cedar_id: str) -> str:
    return f"#{int(cedar_id.removeprefix('policy')) + 1}" if cedar_id[6:].isdigit() else cedar_id
