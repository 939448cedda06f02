"""One SSE event as the streams carry it (`Item`), encoded into its frame once: the bus queues
items for each subscriber (bus.py), the SSE writer sends their frames (sse.py), the mappings
and the replay build them (mapping.py, replay.py)."""

from __future__ import annotations

from typing import Any

import msgspec

_encoder = msgspec.json.Encoder(enc_hook=str)  # a stray non-JSON value degrades, never raises


def encode_frame(name: str, data: dict[str, Any], position: int | None = None) -> bytes:
    if "\n" in name or "\r" in name:  # names come from code and the catalogue; never a frame
        raise ValueError(f"SSE event name {name!r} contains a line break")
    head = f"id: {position}\nevent: {name}\ndata: " if position else f"event: {name}\ndata: "
    return head.encode() + _encoder.encode(data) + b"\n\n"


class Item:
    """One SSE event: encoded on first use, then the same bytes go to every subscriber."""

    __slots__ = ("_frame", "agent", "data", "name", "position")

    def __init__(
        self, name: str, data: dict[str, Any], agent: str | None = None, position: int | None = None
    ) -> None:
        self.name = name
        self.data = data
        self.agent = agent
        self.position = position  # the journal's global position; None for ephemeral events
        self._frame: bytes | None = None

    @property
    def frame(self) -> bytes:
        if self._frame is None:
            self._frame = encode_frame(self.name, self.data, self.position)
        return self._frame

    def __repr__(self) -> str:
        return f"Item({self.name!r}, {self.data!r}, agent={self.agent!r}, pos={self.position})"
