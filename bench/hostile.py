"""The cost of treating input as hostile: the bounded JSON decoder and secret redaction.

(1) Decoding a POST /api/v1/findings body and a 64 KiB task input: msgspec's typed decode
(what json_body did before) against node.web.boundedjson.loads_as (decode, bound check, convert),
alternating which runs first, median of the rounds. (2) Redacting one journal event's data
(a log line, a task output of 64 KiB) with 0 and with 10 secrets known. Prints one JSON
object of the figures as its last line.

Usage: .venv/bin/python bench/hostile.py [--rounds 5] [--n 20000]
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path
from typing import Any

import msgspec

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from node.runtime.redact import SecretRedactor
from node.services.findings import NewFinding
from node.web.boundedjson import loads_as


class NewTask(msgspec.Struct):
    to: str
    input: dict[str, Any] = {}


def per_second(fn: Any, n: int) -> float:
    start = time.perf_counter()
    for _ in range(n):
        fn()
    return n / (time.perf_counter() - start)


def pair(a: Any, b: Any, n: int, rounds: int) -> tuple[float, float]:
    """Median rates of a and b, alternating which goes first."""
    rates_a, rates_b = [], []
    for i in range(rounds):
        if i % 2:
            rates_b.append(per_second(b, n))
            rates_a.append(per_second(a, n))
        else:
            rates_a.append(per_second(a, n))
            rates_b.append(per_second(b, n))
    return statistics.median(rates_a), statistics.median(rates_b)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--n", type=int, default=20_000)
    args = parser.parse_args()
    n, rounds = args.n, args.rounds

    finding = json.dumps(
        {"agent": "scanner", "severity": "high", "title": "port 22 open", "detail": "x" * 200}
    ).encode()
    items = [{"sku": f"item-{i}", "qty": i, "tags": ["a", "b"]} for i in range(1200)]
    task = json.dumps({"to": "worker", "input": {"items": items}}).encode()
    assert 50_000 < len(task) < 70_000

    typed_f, bounded_f = pair(
        lambda: msgspec.json.decode(finding, type=NewFinding),
        lambda: loads_as(finding, NewFinding),
        n,
        rounds,
    )
    typed_t, bounded_t = pair(
        lambda: msgspec.json.decode(task, type=NewTask),
        lambda: loads_as(task, NewTask),
        max(1, n // 50),
        rounds,
    )

    log = {"level": "info", "message": "paid INV-0001: " + "y" * 200}
    output = {"id": "t-1", "output": {"items": items}}
    empty = SecretRedactor()
    ten = SecretRedactor()
    for i in range(10):
        ten.learn("payments", f"key{i}", f"secret-value-{i:04d}-abcdefghijklmnop")
    log_0, log_10 = pair(lambda: empty.value(log), lambda: ten.value(log), n, rounds)
    out_0, out_10 = pair(
        lambda: empty.value(output), lambda: ten.value(output), max(1, n // 50), rounds
    )
    figures = {
        "finding_typed_per_s": round(typed_f),
        "finding_bounded_per_s": round(bounded_f),
        "finding_ratio": round(bounded_f / typed_f, 2),
        "task_64k_typed_per_s": round(typed_t),
        "task_64k_bounded_per_s": round(bounded_t),
        "task_64k_ratio": round(bounded_t / typed_t, 2),
        "redact_log_no_secrets_per_s": round(log_0),
        "redact_log_10_secrets_per_s": round(log_10),
        "redact_64k_output_no_secrets_per_s": round(out_0),
        "redact_64k_output_10_secrets_per_s": round(out_10),
    }
    print(json.dumps(figures))


if __name__ == "__main__":
    main()
