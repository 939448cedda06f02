"""The one JSON decoder for what clients, peers and agents send: depth and integers bounded.

Decoders recurse, so a body of a million `[` would reach the interpreter's recursion limit
(a 500), and integers past 64 bits cannot be encoded again by msgspec (a 500 on every later
read of whatever stored them). Everything is decoded here and checked before it is used:
at most `MAX_DEPTH` levels of arrays and objects, integers within 64 bits.
"""

from __future__ import annotations

from typing import Any, TypeVar

import msgspec

T = TypeVar("T")
MAX_DEPTH = 64
MIN_INT = -(2**63)
MAX_INT = 2**64 - 1


class JsonBoundsError(ValueError):
    """Well-formed JSON past a bound (too deep, an integer too large); `kind` says which."""

    def __init__(self, kind: str, message: str) -> None:
        super().__init__(message)
        self.kind = kind

    @property
    def rpc_code(self) -> int:
        """JSON-RPC: too deep to parse is -32700; parsed but an unusable integer, -32600."""
        return -32700 if self.kind == "depth" else -32600


def loads(data: bytes | str) -> Any:
    """The value of JSON text; ValueError when malformed, JsonBoundsError past a bound."""
    try:
        value = msgspec.json.decode(data)
    except RecursionError:
        raise _too_deep() from None
    except msgspec.DecodeError as exc:
        raise ValueError(f"malformed JSON: {exc}") from None
    check(value)
    return value


def loads_as(data: bytes | str, kind: type[T]) -> T:
    """Decode, check the bounds, then validate as `kind` (msgspec.ValidationError)."""
    return msgspec.convert(loads(data), type=kind)


def check(value: Any) -> None:
    """Raise JsonBoundsError if `value` nests deeper than MAX_DEPTH or holds a huge integer.

    Level by level rather than recursively, and with `type() is` tests: this runs on every
    body, so it is kept to a few hundred nanoseconds per value.
    """
    level: list[Any] = [value]
    depth = 0  # levels of arrays and objects seen so far
    while level:
        below: list[Any] = []
        containers = False
        for item in level:
            kind = type(item)
            if kind is dict:
                containers = True
                below.extend(item.values())
            elif kind is list:
                containers = True
                below.extend(item)
            elif kind is int and not MIN_INT <= item <= MAX_INT:
                raise JsonBoundsError("integer", f"integer {_short(item)} does not fit in 64 bits")
        if containers:
            depth += 1
            if depth > MAX_DEPTH:
                raise _too_deep()
        level = below


def _too_deep() -> JsonBoundsError:
    return JsonBoundsError("depth", f"JSON nested deeper than {MAX_DEPTH} levels")


def _short(number: int) -> str:
    text = str(number) if number.bit_length() < 4000 else "(over 1000 digits)"
    return text if len(text) <= 40 else text[:20] + "…" + text[-8:]
