"""A lease record: a node's signed claim to be a placed agent's home, as it stands in the leases
bucket and in the lease log of the mesh's stream (node/placement/leases.py, leaselog.py)."""

from __future__ import annotations

import base64
import binascii
from collections.abc import Callable

import msgspec
from nacl.exceptions import BadSignatureError
from nacl.signing import SigningKey, VerifyKey

from eventstore.keychain import KeyChain
from node.sync.nats.subjects import token

KeyLookup = Callable[[str], VerifyKey | KeyChain | None]
MAX_LEASE_BYTES = 1024
SIGNED_PREFIX = b"agent-runtime/lease/v1\0"
SIG_PREFIX = "ed25519:"


class LeaseRecord(msgspec.Struct):  # fields added later are ignored by this version
    agent: str
    holder: str
    epoch: int
    renewed_at: float  # the holder's wall clock: for people, never for a decision


class SignedLease(msgspec.Struct):
    record: str  # the record's JSON, exactly the bytes signed
    signature: str  # "ed25519:" + base64 of the signature of SIGNED_PREFIX + record


_signed_decoder = msgspec.json.Decoder(SignedLease)
_record_decoder = msgspec.json.Decoder(LeaseRecord)


def lease_key(agent: str, node: str) -> str:
    return f"{token(agent)}.{token(node)}"


def sign_record(key: SigningKey, record: LeaseRecord) -> bytes:
    raw = msgspec.json.encode(record)
    signature = key.sign(SIGNED_PREFIX + raw).signature
    signed = SignedLease(raw.decode(), SIG_PREFIX + base64.b64encode(signature).decode())
    return msgspec.json.encode(signed)


def check_record(data: bytes, agent: str, node: str, lookup: KeyLookup) -> LeaseRecord | str:
    """The record under `node`'s key for `agent`, or why it is not one to believe."""
    if len(data) > MAX_LEASE_BYTES:
        return f"{len(data)} bytes, over {MAX_LEASE_BYTES}"
    try:
        signed = _signed_decoder.decode(data)
        raw = signed.record.encode()
        record = _record_decoder.decode(raw)
        if not signed.signature.startswith(SIG_PREFIX):
            raise ValueError("not an ed25519 signature")
        signature = base64.b64decode(signed.signature.removeprefix(SIG_PREFIX), validate=True)
    except (msgspec.DecodeError, msgspec.ValidationError, ValueError, binascii.Error):
        return "not a signed lease record"
    if (record.agent, record.holder) != (agent, node) or record.epoch < 0:
        return f"a record of {record.holder[:80]!r} for {record.agent[:80]!r} under its key"
    found = lookup(node)
    verify_key = found.current if isinstance(found, KeyChain) else found
    if verify_key is None:
        return "no pinned key for its node"
    try:
        verify_key.verify(SIGNED_PREFIX + raw, signature)
    except (BadSignatureError, ValueError):
        return "its signature does not verify with its node's key"
    return record
