"""The sync wire format: a push body in, pushed envelopes out, one bad envelope never the batch."""

from __future__ import annotations

import binascii
from collections.abc import Sequence
from typing import Any

import aiohttp
import msgspec

from eventstore.envelope import Envelope, parse_signature
from eventstore.store import ForeignEnvelope
from node.config.model import AGENT_NAME_RE
from node.web.http import MAX_LIMIT, Problem
from projections.keys import KEY_JOURNAL_PREFIX

MAX_SEQ = 2**63 - 1
# A push may carry more than a page of reads, but not unboundedly many envelopes.
MAX_PUSH_ENVELOPES = 10 * MAX_LIMIT
# What this node reads of a peer's answers: a push reply (counts, heads, one rejection per
# envelope at most) and a DID document. A larger answer is refused, never buffered whole.
MAX_REPLY_BYTES = 8 << 20
MAX_DID_BYTES = 64 << 10


class PushBody(msgspec.Struct):
    peer_id: str
    # Raw, so each envelope is validated on its own and a bad one is only counted as rejected.
    envelopes: list[msgspec.Raw]


class PushedEnvelope(msgspec.Struct):
    seq: int
    agent: str
    payload: str
    signature: str


class PushReply(msgspec.Struct):
    accepted: int
    rejected: int
    heads: dict[str, int] = {}
    rejections: list[dict[str, Any]] = []

    def first_rejection(self) -> str:
        if not self.rejections:
            return "no reason given"
        r = self.rejections[0]
        text = f"{r.get('agent')}#{r.get('seq')} {r.get('reason')}: {r.get('detail', '')}"
        return text[:300]  # the peer wrote it: it goes into a log line and last_error


_push_decoder = msgspec.json.Decoder(PushBody)
_item_decoder = msgspec.json.Decoder(PushedEnvelope)
_reply_decoder = msgspec.json.Decoder(PushReply)
_encoder = msgspec.json.Encoder()


class MalformedEnvelope(ValueError):
    """One pushed envelope cannot even be read; it is rejected, the rest go on."""


def parse_push(body: bytes) -> PushBody:
    """The whole body: anything but `{peer_id: str, envelopes: [...]}` is a 400."""
    if not body:
        raise Problem(400, "the request needs a JSON body {peer_id, envelopes}")
    try:
        push = _push_decoder.decode(body)
    except msgspec.ValidationError as exc:
        raise Problem(400, f"invalid body: {str(exc).replace('`$.', '`')}") from None
    except msgspec.DecodeError as exc:
        raise Problem(400, f"malformed JSON: {exc}") from None
    except RecursionError:
        raise Problem(400, "the body is nested too deeply") from None
    if len(push.envelopes) > MAX_PUSH_ENVELOPES:
        raise Problem(413, f"at most {MAX_PUSH_ENVELOPES} envelopes per push")
    return push


def parse_envelope(raw: msgspec.Raw) -> ForeignEnvelope:
    """One pushed envelope → raw payload and signature; MalformedEnvelope says what is wrong."""
    try:
        item = _item_decoder.decode(raw)
    except (msgspec.ValidationError, msgspec.DecodeError, RecursionError) as exc:
        raise MalformedEnvelope(str(exc).replace("`$.", "`")) from None
    if not 1 <= item.seq <= MAX_SEQ:
        raise MalformedEnvelope(f"seq {item.seq} is out of range")
    name = item.agent.removeprefix(KEY_JOURNAL_PREFIX)  # `@<node>`: a node's key journal
    if not item.agent.startswith("$") and not AGENT_NAME_RE.fullmatch(name):
        raise MalformedEnvelope(f"agent {item.agent!r} is not a journal name")
    try:
        payload = binascii.a2b_base64(item.payload, strict_mode=True)
        signature = parse_signature(item.signature)
    except ValueError as exc:
        raise MalformedEnvelope(str(exc) or "payload is not base64") from None
    return ForeignEnvelope(item.agent, item.seq, payload, signature)


def agent_of(raw: msgspec.Raw) -> tuple[str | None, int | None]:
    """Best effort (agent, seq) of an envelope, for a rejection report."""
    try:
        value = msgspec.json.decode(raw)
    except (msgspec.DecodeError, RecursionError):
        return None, None
    if not isinstance(value, dict):
        return None, None
    agent, seq = value.get("agent"), value.get("seq")
    return (
        agent if isinstance(agent, str) else None,
        seq if isinstance(seq, int) and not isinstance(seq, bool) else None,
    )


def encode_push(peer_id: str, envelopes: Sequence[Envelope]) -> bytes:
    return _encoder.encode({"peer_id": peer_id, "envelopes": [e.as_pushed() for e in envelopes]})


async def read_capped(response: aiohttp.ClientResponse, cap: int) -> bytes:
    """The body of `response`, or ValueError once it passes `cap` bytes."""
    if response.content_length is not None and response.content_length > cap:
        raise ValueError(f"peer's answer of {response.content_length} bytes is over {cap}")
    body = bytearray()
    async for chunk in response.content.iter_chunked(64 << 10):
        body += chunk
        if len(body) > cap:
            raise ValueError(f"peer's answer is over {cap} bytes")
    return bytes(body)


def decode_reply(body: bytes) -> PushReply:
    """A peer's answer; a ValueError when it is not the spec's shape."""
    try:
        return _reply_decoder.decode(body)
    except (msgspec.ValidationError, msgspec.DecodeError, RecursionError) as exc:
        raise ValueError(f"unexpected sync reply: {exc}") from None
