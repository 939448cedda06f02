"""The C signer is a speed-up only: PyNaCl signs the same bytes, and installs without a compiler."""

import base64
import os
import shutil
import subprocess
import sys
import zipfile

from nacl.signing import SigningKey

from eventstore.batch_sign import BatchSigner as ExtensionBatchSigner
from eventstore.batch_sign import SharedSigner as ExtensionSharedSigner
from eventstore.batch_sign import verify_batch as extension_verify_batch
from eventstore.envelope import digest_of, signed_bytes, verify_signature
from eventstore.signing import (
    ENV_SWITCH,
    PyNaClBatchSigner,
    PyNaClSharedSigner,
    pynacl_verify_batch,
)
from eventstore.store import EventStore, NewEvent
from tests.support import ROOT

KEY = SigningKey(b"\5" * 32)
MESSAGES = [bytes([i % 251]) * i for i in range(0, 400, 9)]


def test_pynacl_and_extension_signatures_are_byte_identical():
    expected = [KEY.sign(m).signature for m in MESSAGES]
    assert PyNaClBatchSigner(KEY).sign(MESSAGES) == expected
    assert ExtensionBatchSigner(KEY).sign(MESSAGES) == expected
    for shared in (PyNaClSharedSigner(KEY), ExtensionSharedSigner(KEY)):
        shared.begin(len(MESSAGES), max(map(len, MESSAGES)))
        for message in MESSAGES:
            shared.add(message)
        assert shared.finish() == expected
        shared.close()


def test_batch_verification_agrees_with_pynacl_on_good_and_bad_signatures():
    public = bytes(KEY.verify_key)
    other = bytes(SigningKey(b"\6" * 32).verify_key)
    good = [(public, m, KEY.sign(m).signature) for m in MESSAGES]
    signature = good[3][2]
    bad = [
        (public, MESSAGES[3] + b"!", signature),  # the message changed
        (other, MESSAGES[3], signature),  # another key
        (public, MESSAGES[3], signature[:-1] + bytes([signature[-1] ^ 1])),  # a flipped bit
        (public, MESSAGES[3], signature[:63]),  # too short to be a signature
        (public[:31], MESSAGES[3], signature),  # too short to be a key
        (public, MESSAGES[3], b""),
    ]
    checks = good[:5] + bad + good[5:]
    expected = [True] * 5 + [False] * len(bad) + [True] * len(good[5:])
    assert pynacl_verify_batch(checks) == expected
    assert extension_verify_batch(checks) == expected
    assert extension_verify_batch([]) == pynacl_verify_batch([]) == []


def test_pynacl_signer_reproduces_the_design_test_vector():
    key = SigningKey(bytes(32))
    digest = digest_of(b'{"hello":"world"}')
    (signature,) = PyNaClBatchSigner(key).sign([signed_bytes("payer", 1, digest)])
    assert base64.b64encode(signature).decode() == (
        "gW3tK6uKrvANpe8gJwlYMF64Le9DCWn1/Gj7V9Q1BzRei2vcaqCWITNcjcR3wnPjsua37wNsKJtvQ4FJF6GHBA=="
    )


def test_pynacl_shared_signer_refuses_what_does_not_fit_like_the_extension():
    signer = PyNaClSharedSigner(KEY)
    signer.begin(1, 4)
    signer.add(b"ok")
    for too_much in (b"x", b"too long"):
        try:
            signer.add(too_much)
        except ValueError as exc:
            assert "does not fit" in str(exc)
        else:
            raise AssertionError("accepted a message past the batch")
    assert signer.finish() == [KEY.sign(b"ok").signature]


async def test_stores_with_either_signer_write_the_same_signatures(tmp_path):
    envelopes = {}
    for name, signer in (("c", ExtensionSharedSigner), ("pynacl", PyNaClSharedSigner)):
        store = EventStore(tmp_path / name, KEY, "node-a", signer=signer)
        store.start()
        await store.append_many(
            [NewEvent("a", "log", {"level": "info", "message": f"m{i}"}) for i in range(40)]
        )
        envelopes[name] = store.read_stream("a", 0, 100)
        await store.close()
    for envelope in envelopes["pynacl"]:
        assert verify_signature(
            KEY.verify_key, envelope.stream, envelope.seq, envelope.digest, envelope.signature
        )
    # same key, stream, seq and digest → the same signature (ed25519 is deterministic)
    for c, plain in zip(envelopes["c"], envelopes["pynacl"], strict=True):
        message = signed_bytes(plain.stream, plain.seq, plain.digest)
        assert plain.signature == KEY.sign(message).signature
        assert c.signature == KEY.sign(signed_bytes(c.stream, c.seq, c.digest)).signature


def _signer_in_subprocess(env: dict[str, str]) -> subprocess.CompletedProcess:
    code = "from eventstore.signing import SIGNER; print(SIGNER)"
    full_env = {**os.environ, **env}
    return subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, env=full_env, timeout=60
    )


def test_the_switch_picks_pynacl_and_refuses_nonsense():
    assert _signer_in_subprocess({ENV_SWITCH: "pynacl"}).stdout.strip() == "pynacl"
    assert _signer_in_subprocess({ENV_SWITCH: "auto"}).stdout.strip() == "extension"
    bad = _signer_in_subprocess({ENV_SWITCH: "fast"})
    assert bad.returncode != 0 and "use auto, pynacl or extension" in bad.stderr


def test_a_build_without_a_c_compiler_installs_and_signs_through_pynacl(pure_wheel, tmp_path):
    """pip builds the wheel with CC pointing nowhere (and no gcc/cc on PATH): the optional
    extension fails as a warning, the wheel has no compiled module, and the installed package
    signs the design's test vector through PyNaCl."""
    log = pure_wheel.build_log
    assert 'building extension "eventstore._sign_batch" failed' in log, log[-3000:]
    names = zipfile.ZipFile(pure_wheel.wheel).namelist()
    assert "eventstore/signing.py" in names
    assert not [n for n in names if "_sign_batch" in n], names
    target, env = pure_wheel.site, {**pure_wheel.env}
    env.pop(ENV_SWITCH, None)
    code = (
        "import base64, eventstore.signing as s\n"
        "from nacl.signing import SigningKey\n"
        "from eventstore.envelope import digest_of, signed_bytes\n"
        f"assert s.__file__.startswith({str(target)!r}), s.__file__\n"
        "sig = s.BatchSigner(SigningKey(bytes(32))).sign("
        "[signed_bytes('payer', 1, digest_of(b'{\"hello\":\"world\"}'))])[0]\n"
        "print(s.SIGNER, base64.b64encode(sig).decode())\n"
    )
    # -S: no .pth files, so the dev install's editable finder cannot supply the compiled module
    path = pure_wheel.python_path
    ran = subprocess.run(
        [sys.executable, "-S", "-c", code],
        capture_output=True,
        text=True,
        env={**env, "PYTHONPATH": path},
        cwd=tmp_path,
        timeout=60,
    )
    assert ran.returncode == 0, ran.stderr
    assert ran.stdout.split() == [
        "pynacl",
        "gW3tK6uKrvANpe8gJwlYMF64Le9DCWn1/Gj7V9Q1BzRei2vcaqCWITNcjcR3wnPjsua37wNsKJtvQ4FJF6GHBA==",
    ]
    missing = subprocess.run(
        [sys.executable, "-S", "-c", "import eventstore.signing"],
        capture_output=True,
        text=True,
        env={**env, "PYTHONPATH": path, ENV_SWITCH: "extension"},
        cwd=tmp_path,
        timeout=60,
    )
    assert missing.returncode != 0 and "C signer is not installed" in missing.stderr


def test_the_extension_source_compiles_where_linux_only_calls_are_missing():
    """macOS and the BSDs lack sched_getcpu and pthread_setaffinity_np: compiled without
    __linux__, the source must still build (the helper thread is then simply not pinned)."""
    compiler = shutil.which("cc") or shutil.which("gcc")
    assert compiler, "the development install builds the extension, so a C compiler is here"
    source = ROOT / "eventstore" / "sign_batch.c"
    for flags in (["-U__linux__"], []):
        done = subprocess.run(
            [compiler, "-std=c11", "-Wall", "-Werror", "-fsyntax-only", *flags, str(source)],
            capture_output=True,
            text=True,
            timeout=60,
        )
        assert done.returncode == 0, done.stderr
