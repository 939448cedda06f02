"""The Cedar schema of the requests policies read, and each request as a Cedar context.

Every request is `principal` `Agent::"<agent>"`, `action` `Action::"<capability>"`, `resource`
`Capability::"<capability>"`, with a context of:

  request   the request's fields that `[policy.requests.<capability>]` declares (others are not
            shown to policies: they cannot be typed), `http_fetch`'s built in: method, url (in
            the canonical form the node fetches, node/web/urls.py), body, and the URL's parsed
            scheme, host, port, path and query, derived from it (never the agent's own)
  time      when it was asked, in `[policy] timezone`: timestamp (Unix seconds), year, month,
            day, hour, minute, weekday (1 = Monday ... 7 = Sunday), date ("2026-11-27")
  task      when a task's run asked (`context has task`): id, and caller (the API token that
            created it) or from (the agent that did), when known

A request whose fields do not fit the declared types cannot be judged by the policies
(`RequestMismatch`): the gate then asks people, saying why.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from datetime import datetime
from decimal import Decimal
from typing import Any
from zoneinfo import ZoneInfo

from node.policy.budgets import exact_amount
from node.web.urls import UrlRefused, canonical_url

AGENT_TYPE = "Agent"
CAPABILITY_TYPE = "Capability"
SCALARS = {"Long": "Long", "String": "String", "Bool": "Boolean", "Boolean": "Boolean"}
EXTENSIONS = ("decimal",)
MAX_DEPTH = 8
MAX_FIELDS = 200
# http_fetch's request as the node performs it: the method upper-cased (GET when absent)
HTTP_FETCH = "http_fetch"
HTTP_FETCH_REQUEST: dict[str, Any] = {
    "method": "String",
    "url": "String",
    "body": "String?",
    "scheme": "String",
    "host": "String",
    "port": "Long",
    "path": "String",
    "query": "String",
}
# inference's request as an approval shows it (node/inference/service.py Call.summary)
INFERENCE = "inference"
INFERENCE_REQUEST: dict[str, Any] = {
    "model": "String",
    "provider": "String",
    "provider_model": "String",
    "route": "String",
    "max_tokens": "Long",
    "estimated_input_tokens": "Long",
    "estimated_cost": "decimal",
    "messages": "Long",
    "tools": "Set<String>",
}
LONG_MIN, LONG_MAX = -(2**63), 2**63 - 1
DECIMAL_MAX = Decimal("922337203685477.5807")


class RequestMismatch(ValueError):
    """The request does not have the fields, or the types, its capability declares."""


@dataclass(frozen=True)
class FieldType:
    """One declared field: a Cedar scalar, `decimal`, a Set of one, or a record of fields."""

    kind: str  # "Long", "String", "Boolean", "decimal", "Set", "Record"
    optional: bool = False
    element: FieldType | None = None  # of a Set
    fields: tuple[tuple[str, FieldType], ...] = ()  # of a Record

    def cedar(self) -> dict[str, Any]:
        """The field's type in Cedar's JSON schema format."""
        if self.kind in EXTENSIONS:
            shape: dict[str, Any] = {"type": "Extension", "name": self.kind}
        elif self.kind == "Set":
            assert self.element is not None
            shape = {"type": "Set", "element": self.element.cedar()}
        elif self.kind == "Record":
            shape = {"type": "Record", "attributes": {n: t.cedar() for n, t in self.fields}}
        else:
            shape = {"type": self.kind}
        if self.optional:
            shape["required"] = False
        return shape


_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]{0,63}$")


def parse_type(text: str) -> FieldType:
    """`Long`, `String`, `Bool`, `decimal`, `Set<String>`, with `?` at the end when optional."""
    optional = text.endswith("?")
    core = text[:-1] if optional else text
    match = re.fullmatch(r"Set<(.+)>", core)
    if match is not None:
        element = parse_type(match.group(1))
        if element.optional:
            raise ValueError(f"{text!r}: a Set's elements cannot be optional")
        return FieldType("Set", optional, element=element)
    if core in SCALARS:
        return FieldType(SCALARS[core], optional)
    if core in EXTENSIONS:
        return FieldType(core, optional)
    raise ValueError(
        f"{text[:60]!r} is not a type: use Long, String, Bool, decimal or Set<...>, "
        "with ? at the end when the field may be absent"
    )


def parse_record(declared: Mapping[str, Any], depth: int = 0) -> FieldType:
    """A `[policy.requests.<capability>]` table as a Record type; ValueError naming the key."""
    if depth > MAX_DEPTH:
        raise ValueError(f"records nest at most {MAX_DEPTH} deep")
    if len(declared) > MAX_FIELDS:
        raise ValueError(f"at most {MAX_FIELDS} fields")
    fields = []
    for name, value in declared.items():
        if not _NAME.match(name):
            raise ValueError(f"{name[:60]!r}: a field name is letters, digits and _")
        try:
            if isinstance(value, str):
                fields.append((name, parse_type(value)))
            elif isinstance(value, dict):
                fields.append((name, parse_record(value, depth + 1)))
            else:
                raise ValueError("expected a type name or a table of fields")
        except ValueError as exc:
            raise ValueError(f"{name}: {exc}") from None
    return FieldType("Record", fields=tuple(fields))


def request_types(requests: Mapping[str, Mapping[str, Any]]) -> dict[str, FieldType]:
    """capability → its request's Record type: the config's, plus http_fetch's and
    inference's built in."""
    types = {
        HTTP_FETCH: parse_record(HTTP_FETCH_REQUEST),
        INFERENCE: parse_record(INFERENCE_REQUEST),
    }
    for capability, declared in requests.items():
        types[capability] = parse_record(declared)
    return types


TIME_FIELDS = ("timestamp", "year", "month", "day", "hour", "minute", "weekday")
TASK_TYPE: dict[str, Any] = {
    "type": "Record",
    "required": False,
    "attributes": {
        "id": {"type": "String"},
        "caller": {"type": "String", "required": False},
        "from": {"type": "String", "required": False},
    },
}


def cedar_schema(types: Mapping[str, FieldType], capabilities: set[str]) -> dict[str, Any]:
    """The Cedar schema (JSON format): one action per capability (those without declared
    fields get an empty request record), the time and the task."""
    time_type = {
        "type": "Record",
        "attributes": {
            **{name: {"type": "Long"} for name in TIME_FIELDS},
            "date": {"type": "String"},
        },
    }
    actions = {}
    for capability in sorted(capabilities | set(types)):
        request = types.get(capability, FieldType("Record"))
        actions[capability] = {
            "appliesTo": {
                "principalTypes": [AGENT_TYPE],
                "resourceTypes": [CAPABILITY_TYPE],
                "context": {
                    "type": "Record",
                    "attributes": {
                        "request": request.cedar(),
                        "time": time_type,
                        "task": TASK_TYPE,
                    },
                },
            }
        }
    return {"": {"entityTypes": {AGENT_TYPE: {}, CAPABILITY_TYPE: {}}, "actions": actions}}


def time_context(moment: datetime, zone: ZoneInfo) -> dict[str, Any]:
    local = moment.astimezone(zone)
    return {
        "timestamp": int(moment.timestamp()),
        "year": local.year,
        "month": local.month,
        "day": local.day,
        "hour": local.hour,
        "minute": local.minute,
        "weekday": local.isoweekday(),
        "date": local.date().isoformat(),
    }


def request_context(capability: str, parsed: Any, declared: FieldType | None) -> dict[str, Any]:
    """The declared fields of a parsed request, as Cedar's JSON takes them; RequestMismatch
    when one is missing or of another type."""
    if declared is None:
        return {}
    if capability == HTTP_FETCH and isinstance(parsed, dict):
        parsed = {**parsed, "method": str(parsed.get("method", "GET")).upper()}
        parsed.update(_url_fields(parsed.get("url")))
    return _record(parsed, declared, "request")


def _url_fields(url: Any) -> dict[str, Any]:
    """The canonical URL and its parts, which replace whatever the agent sent under those
    names: a policy on `host` or `path` reads the request the node will make."""
    try:
        target = canonical_url(url)
    except UrlRefused as exc:
        raise RequestMismatch(f"request.url: {exc}") from None
    return {
        "url": target.url,
        "scheme": target.scheme,
        "host": target.host,
        "port": target.port,
        "path": target.path,
        "query": target.query,
    }


def _record(value: Any, declared: FieldType, where: str) -> dict[str, Any]:
    if not isinstance(value, dict):
        raise RequestMismatch(f"{where} is not a JSON object")
    out: dict[str, Any] = {}
    for name, kind in declared.fields:
        if name not in value or value[name] is None:
            if kind.optional:
                continue
            raise RequestMismatch(f"{where}.{name} is missing (declared {_named(kind)})")
        out[name] = _value(value[name], kind, f"{where}.{name}")
    return out


def _value(value: Any, kind: FieldType, where: str) -> Any:
    if kind.kind == "Record":
        return _record(value, kind, where)
    if kind.kind == "Set":
        if not isinstance(value, list):
            raise RequestMismatch(f"{where} is not a list (declared {_named(kind)})")
        assert kind.element is not None
        return [_value(v, kind.element, f"{where}[{i}]") for i, v in enumerate(value)]
    if kind.kind == "Long":
        if isinstance(value, float) and value.is_integer():
            value = int(value)
        whole = isinstance(value, int) and not isinstance(value, bool)
        if not whole or not LONG_MIN <= value <= LONG_MAX:
            raise RequestMismatch(f"{where} is not a whole number (declared Long)")
        return value
    if kind.kind == "String":
        if not isinstance(value, str):
            raise RequestMismatch(f"{where} is not a string")
        return value
    if kind.kind == "Boolean":
        if not isinstance(value, bool):
            raise RequestMismatch(f"{where} is not true or false")
        return value
    return {"__extn": {"fn": "decimal", "arg": decimal_text(value, where)}}


def decimal_text(value: Any, where: str) -> str:
    """A number as Cedar's decimal literal (up to 4 places): never rounded, since a policy
    comparing a rounded amount would judge another request than the one performed."""
    amount = exact_amount(value)
    if amount is None or isinstance(value, str):
        raise RequestMismatch(f"{where} is not a number (declared decimal)")
    if abs(amount) > DECIMAL_MAX:
        raise RequestMismatch(f"{where} is beyond a decimal's range")
    exponent = amount.as_tuple().exponent
    if isinstance(exponent, int) and exponent < -4 and amount != amount.quantize(Decimal("0.0001")):
        raise RequestMismatch(f"{where} has more than 4 decimal places")
    return format(amount.quantize(Decimal("0.0001")), "f")


def _named(kind: FieldType) -> str:
    if kind.kind == "Set" and kind.element is not None:
        return f"Set<{_named(kind.element)}>"
    return {"Boolean": "Bool"}.get(kind.kind, kind.kind)


def numeric_fields(declared: FieldType, prefix: str = "") -> Iterator[tuple[str, str]]:
    """(dotted path, kind) of every Long or decimal field: what a budget may sum."""
    for name, kind in declared.fields:
        path = f"{prefix}{name}"
        if kind.kind == "Record":
            yield from numeric_fields(kind, path + ".")
        elif kind.kind in ("Long", "decimal"):
            yield path, kind.kind


def schema_json(types: Mapping[str, FieldType], capabilities: set[str]) -> str:
    return json.dumps(cedar_schema(types, capabilities), sort_keys=True)
