"""Ed25519 signatures for a batch of messages in C calls that hold no GIL.

Signing is most of an append's cost. Python threads signing one message at a time hand the
GIL back and forth per signature and barely run in parallel. Here a whole batch is one call,
and `start` signs on another core while the caller goes on (see sign_batch.c). The signatures
are libsodium's, from PyNaCl's own copy.
"""

from __future__ import annotations

from collections.abc import Sequence
from itertools import accumulate
from typing import Any

import nacl.bindings
from nacl._sodium import ffi as _sodium_ffi
from nacl._sodium import lib as _sodium_lib
from nacl.signing import SigningKey

from eventstore._sign_batch import ffi, lib

_CRYPTO_SIGN = int(_sodium_ffi.cast("uintptr_t", _sodium_ffi.addressof(_sodium_lib, "crypto_sign")))
SIGNATURE_BYTES = 64


class _Batch:
    """The messages laid out for C, with room for their signatures; alive while C uses it."""

    def __init__(self, messages: Sequence[bytes]) -> None:
        self.count = len(messages)
        self.data = b"".join(messages)
        self.offsets = ffi.new("size_t[]", [0, *accumulate(map(len, messages))])
        self.signatures = bytearray(SIGNATURE_BYTES * self.count)

    def args(self, secret_key: bytes) -> tuple[Any, ...]:
        return (
            _CRYPTO_SIGN,
            secret_key,
            self.data,
            self.offsets,
            self.count,
            ffi.from_buffer(self.signatures),
        )

    def split(self, status: int) -> list[bytes]:
        if status != 0:
            raise RuntimeError(f"libsodium could not sign the batch (status {status})")
        raw = bytes(self.signatures)
        return [raw[i : i + SIGNATURE_BYTES] for i in range(0, len(raw), SIGNATURE_BYTES)]


class PendingSignatures:
    """Signatures being made on another thread; `result()` waits for them."""

    def __init__(self, job: Any, batch: _Batch) -> None:
        self._job, self._batch = job, batch

    def result(self) -> list[bytes]:
        job, self._job = self._job, None
        if job is None:
            raise RuntimeError("result() was already taken")
        return self._batch.split(lib.sign_finish(job))

    def __del__(self) -> None:  # never free the buffers under a running thread
        if self._job is not None:
            lib.sign_finish(self._job)


class _Done(PendingSignatures):
    def __init__(self, signatures: list[bytes]) -> None:
        self._job, self._signatures = None, signatures

    def result(self) -> list[bytes]:
        return self._signatures


class BatchSigner:
    """Signs with one key; callable from any thread."""

    def __init__(self, key: SigningKey) -> None:
        _public, self._secret_key = nacl.bindings.crypto_sign_seed_keypair(key.encode())

    def sign(self, messages: Sequence[bytes]) -> list[bytes]:
        """One detached signature per message, in order, made on this thread."""
        batch = _Batch(messages)
        return batch.split(lib.sign_batch(*batch.args(self._secret_key)))

    def start(self, messages: Sequence[bytes]) -> PendingSignatures:
        """Sign on a new thread kept off this one's CPU; signs here if none can start."""
        batch = _Batch(messages)
        job = lib.sign_start(*batch.args(self._secret_key)) if messages else ffi.NULL
        if job == ffi.NULL:
            return _Done(self.sign(messages))
        return PendingSignatures(job, batch)
