"""Run the model of the receive rules (harness/receive_model.py) long: `--examples N` examples
of up to `--steps` steps each, stopping at the first failure (not shrunk unless `--shrink`:
the count says how many examples it took to find it). The last line is one JSON object:
{examples, failures, seconds, steps, found}. `--owner-strict` checks the owner rule of issue 51
(what runs changes only by the owner's signature); `--honest-only` leaves the member out (what
fails then needs no attacker); `--seed` makes a run repeatable.

    .venv/bin/python -m bench.model_receive --examples 2000
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import random
import sys
import time

from hypothesis import HealthCheck, Phase, settings
from hypothesis.stateful import run_state_machine_as_test


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--examples", type=int, default=200)
    parser.add_argument("--steps", type=int, default=30)
    parser.add_argument("--seed", type=int, default=None)
    parser.add_argument("--shrink", action="store_true")
    parser.add_argument("--owner-strict", action="store_true")
    parser.add_argument("--honest-only", action="store_true", help="no member: honest nodes")
    args = parser.parse_args()
    if args.owner_strict:
        os.environ["MODEL_OWNER_STRICT"] = "1"
    if args.honest_only:
        os.environ["MODEL_HONEST_ONLY"] = "1"
    from harness import receive_model  # reads MODEL_OWNER_STRICT

    logging.disable(logging.CRITICAL)  # the refusals the member provokes are the point
    if args.seed is not None:
        random.seed(args.seed)
    counted = {"examples": 0}
    started_machine = receive_model.ReceiveModel.__init__

    def counting(self: receive_model.ReceiveModel) -> None:
        counted["examples"] += 1
        started_machine(self)

    receive_model.ReceiveModel.__init__ = counting  # type: ignore[method-assign]
    phases = [Phase.generate, Phase.shrink] if args.shrink else [Phase.generate]
    found = None
    started = time.monotonic()
    try:
        run_state_machine_as_test(
            receive_model.ReceiveModel,
            settings=settings(
                max_examples=args.examples,
                stateful_step_count=args.steps,
                deadline=None,
                database=None,
                phases=phases,
                suppress_health_check=list(HealthCheck),
                print_blob=False,
            ),
        )
    except Exception as exc:  # the model's counterexample: reported, not raised
        if True:  # the steps that fail, as Hypothesis prints them, on stderr
            print(getattr(exc, "__notes__", "") or exc, file=sys.stderr)
        found = f"{type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''}"[:500]
    seconds = round(time.monotonic() - started, 1)
    result = {
        "examples": counted["examples"],
        "failures": 0 if found is None else 1,
        "seconds": seconds,
        "steps": args.steps,
        "owner_strict": args.owner_strict,
        "honest_only": args.honest_only,
        "seed": args.seed,
        "found": found,
    }
    print(json.dumps(result))


if __name__ == "__main__":
    main()
