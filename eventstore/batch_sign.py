"""Ed25519 signatures for a batch of messages in C calls that hold no GIL.

Signing is most of an append's cost. Python threads signing one message at a time hand the
GIL back and forth per signature and barely run in parallel. Here signing is done in C (see
sign_batch.c): `sign` signs a whole batch in one call, and `SharedSigner` signs each message of
a batch on a helper thread as soon as the caller adds it. The signatures are libsodium's, from
PyNaCl's own copy.
"""

from __future__ import annotations

from collections.abc import Sequence
from itertools import accumulate

import nacl.bindings
from nacl._sodium import ffi as _sodium_ffi
from nacl._sodium import lib as _sodium_lib
from nacl.signing import SigningKey

from eventstore._sign_batch import ffi, lib


def _address(name: str) -> int:
    return int(_sodium_ffi.cast("uintptr_t", _sodium_ffi.addressof(_sodium_lib, name)))


_CRYPTO_SIGN = _address("crypto_sign")
_CRYPTO_SIGN_OPEN = _address("crypto_sign_open")
SIGNATURE_BYTES = 64
PUBLIC_KEY_BYTES = 32


def _split(raw: bytes | bytearray) -> list[bytes]:
    raw = bytes(raw)
    return [raw[i : i + SIGNATURE_BYTES] for i in range(0, len(raw), SIGNATURE_BYTES)]


def _secret_key(key: SigningKey) -> bytes:
    return nacl.bindings.crypto_sign_seed_keypair(key.encode())[1]


class BatchSigner:
    """Signs with one key on the calling thread; callable from any thread."""

    def __init__(self, key: SigningKey) -> None:
        self._secret_key = _secret_key(key)

    def sign(self, messages: Sequence[bytes]) -> list[bytes]:
        """One detached signature per message, in order."""
        offsets = ffi.new("size_t[]", [0, *accumulate(map(len, messages))])
        signatures = bytearray(SIGNATURE_BYTES * len(messages))
        status = lib.sign_batch(
            _CRYPTO_SIGN,
            self._secret_key,
            b"".join(messages),
            offsets,
            len(messages),
            ffi.from_buffer(signatures),
        )
        if status != 0:
            raise RuntimeError(f"libsodium could not sign the batch (status {status})")
        return _split(signatures)


def verify_batch(checks: Sequence[tuple[bytes, bytes, bytes]]) -> list[bool]:
    """(public key, message, detached signature) → whether each verifies; one C call that holds
    no GIL, so two threads verify on two cores (PyNaCl's verify hands the GIL back and forth
    per message). A key or signature of the wrong length does not verify."""
    sane = [
        len(key) == PUBLIC_KEY_BYTES and len(signature) == SIGNATURE_BYTES
        for key, _, signature in checks
    ]
    kept = [check for check, ok in zip(checks, sane, strict=True) if ok]
    verified = bytearray(len(kept))
    if kept:
        messages = [message for _, message, _ in kept]
        status = lib.verify_batch(
            _CRYPTO_SIGN_OPEN,
            b"".join(messages),
            ffi.new("size_t[]", [0, *accumulate(map(len, messages))]),
            b"".join(signature for _, _, signature in kept),
            b"".join(key for key, _, _ in kept),
            len(kept),
            ffi.from_buffer(verified),
        )
        if status != 0:
            raise MemoryError(f"no memory to verify {len(kept)} signatures")
    results = iter(verified)
    return [bool(next(results)) if ok else False for ok in sane]


class SharedSigner:
    """Signs one batch at a time, message by message as the caller builds them.

    `begin` wakes a helper thread (pinned to another CPU) that signs each message the moment
    `add` hands it over; `finish` signs whatever the helper has not claimed yet on the calling
    thread and returns every signature in order. One batch at a time: a signer belongs to one
    thread (the journal writer).
    """

    def __init__(self, key: SigningKey) -> None:
        signer = lib.shared_new(_CRYPTO_SIGN, _secret_key(key))
        if signer == ffi.NULL:
            raise MemoryError("no memory for a signer")
        self._signer = ffi.gc(signer, lib.shared_free)
        self._capacity = 0
        self._added = 0
        # without the helper nothing is signed before `finish`: the messages wait in a list
        # and are signed in one call, instead of one C call per `add` (about 1 µs an append)
        self._unhelped = BatchSigner(key)
        self._held: list[bytes] | None = None
        self._longest = 0

    def begin(self, count: int, longest: int, helped: bool = True) -> None:
        """Open a batch of at most `count` messages of at most `longest` bytes each."""
        if helped:
            if lib.shared_begin(self._signer, count, longest, 1) != 0:
                raise MemoryError(f"no memory to sign {count} messages")
            self._held = None
        else:
            self._held, self._longest = [], longest
        self._capacity, self._added = count, 0

    def add(self, message: bytes) -> None:
        held = self._held
        if held is not None:
            fits = self._added < self._capacity and len(message) <= self._longest
            if fits:
                held.append(message)
        else:
            fits = lib.shared_add(self._signer, message, len(message)) == 0
        if not fits:
            raise ValueError(
                f"message {self._added + 1} does not fit the batch "
                f"({self._capacity} messages) or it is not open"
            )
        self._added += 1

    def finish(self) -> list[bytes]:
        if self._held is not None:
            held, self._held, self._capacity = self._held, [], 0  # closed, as the C batch
            return self._unhelped.sign(held) if held else []
        signatures = bytearray(SIGNATURE_BYTES * self._added)
        count = lib.shared_finish(self._signer, ffi.from_buffer(signatures))
        if count < 0:
            raise RuntimeError(f"libsodium could not sign the batch (status {count})")
        return _split(signatures)

    def close(self) -> None:
        """Stop the helper thread now rather than when the signer is collected."""
        signer, self._signer = self._signer, None
        if signer is not None:
            ffi.release(signer)
