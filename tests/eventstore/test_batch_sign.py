"""Signing in C: the same signatures libsodium makes one at a time, from any thread."""

import os
import random
import subprocess
import sys
import threading
import time

import pytest
from nacl.exceptions import BadSignatureError
from nacl.signing import SigningKey

from eventstore.signing import SIGNER, BatchSigner, SharedSigner

KEY = SigningKey(b"\3" * 32)
MESSAGES = [bytes([i % 251]) * i for i in range(0, 300, 7)] + [b"x" * 100_000]
LONGEST = max(map(len, MESSAGES))


def one_at_a_time(messages: list[bytes]) -> list[bytes]:
    return [KEY.sign(m).signature for m in messages]


def shared(signer: SharedSigner, messages: list[bytes], helped: bool = True) -> list[bytes]:
    signer.begin(len(messages), max(map(len, messages), default=0), helped)
    for message in messages:
        signer.add(message)
    return signer.finish()


def test_batch_signatures_equal_one_at_a_time_ones():
    expected = one_at_a_time(MESSAGES)
    assert BatchSigner(KEY).sign(MESSAGES) == expected
    assert BatchSigner(KEY).sign([]) == []
    signer = SharedSigner(KEY)
    assert shared(signer, MESSAGES) == expected
    assert shared(signer, MESSAGES, helped=False) == expected
    assert shared(signer, []) == []
    for message, signature in zip(MESSAGES, expected, strict=True):
        KEY.verify_key.verify(message, signature)


def test_a_signature_covers_its_message_only():
    first, second = BatchSigner(KEY).sign([b"first", b"second"])
    with pytest.raises(BadSignatureError):
        KEY.verify_key.verify(b"second", first)
    KEY.verify_key.verify(b"second", second)


def test_batch_after_batch_of_any_size_with_and_without_the_helper():
    # the helper and the caller race for every message; any mix-up shows as a wrong signature
    signer, rng = SharedSigner(KEY), random.Random(7)
    for _ in range(400):
        messages = [rng.randbytes(rng.randrange(1, 120)) for _ in range(rng.randrange(0, 70))]
        assert shared(signer, messages, helped=rng.random() < 0.8) == one_at_a_time(messages)


def test_a_helper_ahead_of_a_slow_caller_sleeps_and_is_woken():
    # the caller pauses longer than the helper spins: the helper must sleep, then wake for
    # each new message and for the close
    signer = SharedSigner(KEY)
    messages = [b"slow %d" % i for i in range(12)]
    signer.begin(len(messages), 16)
    for message in messages:
        time.sleep(0.002)
        signer.add(message)
    time.sleep(0.002)
    assert signer.finish() == one_at_a_time(messages)


@pytest.mark.parametrize("helped", [True, False])
def test_a_message_that_does_not_fit_is_refused_and_the_batch_goes_on(helped):
    signer = SharedSigner(KEY)
    signer.begin(2, 10, helped)
    signer.add(b"short")
    with pytest.raises(ValueError, match="does not fit"):
        signer.add(b"longer than ten bytes")
    signer.add(b"also fits")
    with pytest.raises(ValueError, match="does not fit"):
        signer.add(b"third")
    assert signer.finish() == one_at_a_time([b"short", b"also fits"])
    with pytest.raises(ValueError, match="not open"):  # a finished batch takes nothing more
        signer.add(b"short")


def test_an_abandoned_batch_is_closed_by_the_next_begin():
    signer = SharedSigner(KEY)
    for _ in range(20):  # never finished: the helper must be out of it before it is reused
        signer.begin(len(MESSAGES), LONGEST)
        for message in MESSAGES:
            signer.add(message)
    assert shared(signer, MESSAGES[:5]) == one_at_a_time(MESSAGES[:5])


def test_close_stops_the_helper_thread():
    def threads() -> int:
        return len(os.listdir("/proc/self/task"))

    before = threads()
    signer = SharedSigner(KEY)
    shared(signer, MESSAGES)
    assert threads() == before + (SIGNER == "extension")  # PyNaCl signs on the caller
    signer.close()
    assert threads() == before


def test_many_threads_sign_at_once():
    expected = one_at_a_time(MESSAGES)
    results: list[bool] = []

    def work() -> None:
        signer, batch = SharedSigner(KEY), BatchSigner(KEY)
        for _ in range(5):
            results.append(shared(signer, MESSAGES) == expected == batch.sign(MESSAGES))
        signer.close()

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
        "from eventstore.signing import SharedSigner\n"
        "key = SigningKey(b'\\3' * 32); messages = [b'm%d' % i for i in range(64)]\n"
        "signer = SharedSigner(key); signer.begin(64, 8)\n"
        "for m in messages: signer.add(m)\n"
        "assert signer.finish() == [key.sign(m).signature for m in messages]\n"
        "print('signed')\n"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "signed"
