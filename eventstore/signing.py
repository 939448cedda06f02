"""Which batch signer the journal uses: the compiled extension when it is there, else PyNaCl.

The C extension (batch_sign.py, sign_batch.c) is only a speed-up. ed25519 signatures are
deterministic, so the PyNaCl signers here produce the very same bytes; an install without a
C compiler loses speed, never compatibility. The same goes for `verify_batch`, which the mesh's
receiver uses to check a batch of foreign signatures. `AGENT_NODE_SIGNER` picks one explicitly:
`auto` (default: the extension if it imports), `pynacl` (never the extension; CI runs the
store and crash tests this way) or `extension` (fail loudly when it is missing).
"""

from __future__ import annotations

import os
from collections.abc import Sequence

import nacl.bindings
from nacl.exceptions import BadSignatureError
from nacl.signing import SigningKey, VerifyKey

ENV_SWITCH = "AGENT_NODE_SIGNER"
SIGNATURE_BYTES = 64


class PyNaClBatchSigner:
    """`BatchSigner` without the extension: one libsodium call per message, GIL held."""

    def __init__(self, key: SigningKey) -> None:
        self._secret_key = nacl.bindings.crypto_sign_seed_keypair(key.encode())[1]

    def sign(self, messages: Sequence[bytes]) -> list[bytes]:
        sign, secret = nacl.bindings.crypto_sign, self._secret_key
        return [sign(message, secret)[:SIGNATURE_BYTES] for message in messages]


class PyNaClSharedSigner:
    """`SharedSigner`'s interface (begin, add, finish, close), all signed at `finish`."""

    def __init__(self, key: SigningKey) -> None:
        self._batch = PyNaClBatchSigner(key)
        self._messages: list[bytes] = []
        self._capacity = 0
        self._longest = 0

    def begin(self, count: int, longest: int, helped: bool = True) -> None:
        self._messages, self._capacity, self._longest = [], count, longest

    def add(self, message: bytes) -> None:
        if len(self._messages) >= self._capacity or len(message) > self._longest:
            raise ValueError(
                f"message {len(self._messages) + 1} does not fit the batch "
                f"({self._capacity} messages) or it is not open"
            )
        self._messages.append(message)

    def finish(self) -> list[bytes]:
        messages, self._messages, self._capacity = self._messages, [], 0  # closed, as in C
        return self._batch.sign(messages)

    def close(self) -> None:
        self._messages = []


def pynacl_verify_batch(checks: Sequence[tuple[bytes, bytes, bytes]]) -> list[bool]:
    """`verify_batch` without the extension: one PyNaCl call per message, GIL held."""
    results = []
    for key, message, signature in checks:
        try:
            VerifyKey(key).verify(message, signature)
        except (BadSignatureError, ValueError, TypeError):
            results.append(False)
        else:
            results.append(True)
    return results


def _choose() -> str:
    wanted = os.environ.get(ENV_SWITCH, "auto").strip().lower() or "auto"
    if wanted not in ("auto", "pynacl", "extension"):
        raise RuntimeError(f"{ENV_SWITCH}={wanted!r}: use auto, pynacl or extension")
    if wanted == "pynacl":
        return "pynacl"
    try:
        import eventstore.batch_sign  # noqa: F401  (the compiled module and PyNaCl's libsodium)
    except ImportError as exc:
        if wanted == "extension":
            raise RuntimeError(
                f"{ENV_SWITCH}=extension but the C signer is not installed ({exc}); "
                "reinstall with a C compiler, or unset it"
            ) from exc
        return "pynacl"
    return "extension"


SIGNER = _choose()  # what this process signs with: "extension" or "pynacl"

if SIGNER == "extension":
    from eventstore.batch_sign import BatchSigner, SharedSigner, verify_batch
else:
    BatchSigner = PyNaClBatchSigner  # type: ignore[misc,assignment]
    SharedSigner = PyNaClSharedSigner  # type: ignore[misc,assignment]
    verify_batch = pynacl_verify_batch

__all__ = [
    "SIGNER",
    "BatchSigner",
    "PyNaClBatchSigner",
    "PyNaClSharedSigner",
    "SharedSigner",
    "pynacl_verify_batch",
    "verify_batch",
]
