"""Batch signing in C: the same signatures libsodium makes one at a time, from any thread."""

import subprocess
import sys
import threading

import pytest
from nacl.exceptions import BadSignatureError
from nacl.signing import SigningKey

from eventstore.batch_sign import BatchSigner

KEY = SigningKey(b"\3" * 32)
MESSAGES = [bytes([i % 251]) * i for i in range(0, 300, 7)] + [b"x" * 100_000]


def test_batch_signatures_equal_one_at_a_time_ones():
    expected = [KEY.sign(m).signature for m in MESSAGES]
    signer = BatchSigner(KEY)
    assert signer.sign(MESSAGES) == expected
    assert signer.start(MESSAGES).result() == expected
    assert signer.sign([]) == [] and signer.start([]).result() == []
    for message, signature in zip(MESSAGES, expected, strict=True):
        KEY.verify_key.verify(message, signature)


def test_a_signature_covers_its_message_only():
    first, second = BatchSigner(KEY).sign([b"first", b"second"])
    with pytest.raises(BadSignatureError):
        KEY.verify_key.verify(b"second", first)
    KEY.verify_key.verify(b"second", second)


def test_result_is_taken_once_and_an_abandoned_batch_is_waited_for():
    signer = BatchSigner(KEY)
    pending = signer.start(MESSAGES)
    pending.result()
    with pytest.raises(RuntimeError, match="already taken"):
        pending.result()
    for _ in range(20):  # dropped unread: the buffers must outlive the signing thread
        signer.start(MESSAGES)
    assert signer.sign(MESSAGES[:3]) == [KEY.sign(m).signature for m in MESSAGES[:3]]


def test_many_threads_sign_at_once():
    signer = BatchSigner(KEY)
    expected = [KEY.sign(m).signature for m in MESSAGES]
    results: list[bool] = []

    def work() -> None:
        for _ in range(5):
            front = signer.start(MESSAGES)
            back = signer.sign(MESSAGES)
            results.append(front.result() == expected == back)

    threads = [threading.Thread(target=work) for _ in range(6)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert results == [True] * 30


def test_a_process_allowed_one_cpu_still_signs():
    code = (
        "import os; os.sched_setaffinity(0, {min(os.sched_getaffinity(0))})\n"
        "from nacl.signing import SigningKey\n"
        "from eventstore.batch_sign import BatchSigner\n"
        "key = SigningKey(b'\\3' * 32); messages = [b'm%d' % i for i in range(64)]\n"
        "assert BatchSigner(key).start(messages).result() == "
        "[key.sign(m).signature for m in messages]\n"
        "print('signed')\n"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "signed"
