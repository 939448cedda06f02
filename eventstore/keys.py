"""The node's ed25519 identity: created once, kept private (0600), published as multibase."""

from __future__ import annotations

import os
import stat
from pathlib import Path

from nacl.signing import SigningKey, VerifyKey

KEY_FILE = "node.key"
_ED25519_PUB_MULTICODEC = b"\xed\x01"
_B58_ALPHABET = "123456789ABCDEFGHJKLMNPQRSTUVWXYZabcdefghijkmnopqrstuvwxyz"


class KeyFileError(Exception):
    """The key file exists but cannot be trusted (wrong size or permissions)."""


def load_or_create_key(data_dir: Path) -> SigningKey:
    """Load `data_dir/node.key` (a raw 32-byte seed), creating it with mode 0600 if absent."""
    path = Path(data_dir) / KEY_FILE
    if path.exists():
        return load_key(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    key = SigningKey.generate()
    write_key(path, key)
    return key


def write_key(path: Path, key: SigningKey) -> None:
    """Write the seed so that no other user can ever read it, not even briefly."""
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    with os.fdopen(fd, "wb") as f:
        f.write(bytes(key))
        f.flush()
        os.fsync(f.fileno())


def load_key(path: Path) -> SigningKey:
    mode = stat.S_IMODE(path.stat().st_mode)
    if mode & 0o077:
        raise KeyFileError(f"{path} is readable by others (mode {mode:o}); chmod 600 it")
    seed = path.read_bytes()
    if len(seed) != 32:
        raise KeyFileError(f"{path} must hold a 32-byte ed25519 seed, found {len(seed)} bytes")
    return SigningKey(seed)


def b58encode(raw: bytes) -> str:
    num = int.from_bytes(raw, "big")
    out = []
    while num:
        num, rem = divmod(num, 58)
        out.append(_B58_ALPHABET[rem])
    pad = len(raw) - len(raw.lstrip(b"\0"))
    return "1" * pad + "".join(reversed(out))


def b58decode(text: str) -> bytes:
    num = 0
    for ch in text:
        idx = _B58_ALPHABET.find(ch)
        if idx < 0:
            raise ValueError(f"invalid base58 character {ch!r}")
        num = num * 58 + idx
    pad = len(text) - len(text.lstrip("1"))
    body = num.to_bytes((num.bit_length() + 7) // 8, "big") if num else b""
    return b"\0" * pad + body


def public_key_multibase(key: VerifyKey) -> str:
    """`z` + base58btc(0xed 0x01 + key): the Ed25519VerificationKey2020 form."""
    return "z" + b58encode(_ED25519_PUB_MULTICODEC + bytes(key))


def verify_key_from_multibase(text: str) -> VerifyKey:
    if not text.startswith("z"):
        raise ValueError("multibase key must be base58btc ('z' prefix)")
    raw = b58decode(text[1:])
    if not raw.startswith(_ED25519_PUB_MULTICODEC) or len(raw) != 34:
        raise ValueError("not an ed25519 public key (multicodec 0xed01, 32 bytes)")
    return VerifyKey(raw[2:])
