"""Where a node's CPU went: py-spy's raw collapsed stacks summed by thread kind and by the code
that ran (bench/mesh.py --profile writes them).

Each sample is charged to the innermost frame that is not the standard library (asyncio,
threading, email, json...): a queue operation inside nats-py counts as nats-py, the email parser
nats-py calls for headers too; a sample that is standard library all the way down (the event
loop's own scheduling) counts as "asyncio". With `--gil` (as bench/mesh.py records) a sample is
the thread holding the GIL, which on a loaded machine includes time it waits for a core: take
the shares, and the CPU seconds from /proc (bench/mesh.py --cpu).

Run: .venv/bin/python bench/profile_split.py FILE [--rate 100]
"""

from __future__ import annotations

import argparse
import json
import re
import sys
from collections import Counter
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from bench.proc_cpu import kind_of  # noqa: E402

FRAME_FILE = re.compile(r"\(([^():]+):\d+\)$")
# (path prefix, category): the first that a frame's file (as py-spy shortens it) starts with
# names the frame; a file that matches none is the standard library's
CATEGORIES = (
    ("nats/", "nats-py"),
    ("node/sync/nats_consumer", "nats consumer"),
    ("node/sync/nats_publisher", "nats publisher"),
    ("node/sync/nats_", "nats other"),
    ("node/sync/receive", "receive checks"),
    ("node/sync/wire", "receive checks"),
    ("node/sync/ownership", "receive checks"),
    ("projections/catalogue", "receive checks"),
    ("node/sync/", "http sync"),
    ("eventstore/", "store"),
    ("projections/", "folds"),
    ("aiohttp/", "http server/client"),
    ("multidict/", "http server/client"),
    ("yarl/", "http server/client"),
    ("prometheus_client/", "metrics"),
    ("node/", "node other"),
)
# the frames every loop sample starts with: charged to what they call
ENTRY_POINTS = ("node/__main__.py", "node/cli.py")


def category(file: str) -> str | None:
    """None for the standard library and the entry points (look further out)."""
    if file in ENTRY_POINTS:
        return None
    for prefix, name in CATEGORIES:
        if file.startswith(prefix):
            return name
    return None


def split(path: Path, rate: int) -> dict[str, dict[str, float]]:
    out: dict[str, Counter[str]] = {}
    for line in path.read_text().splitlines():
        stack, _, count = line.rpartition(" ")
        frames = stack.split(";")
        thread = frames[0].split(": ", 1)[-1]
        charged = "asyncio"
        for frame in reversed(frames[1:]):
            found = FRAME_FILE.search(frame)
            name = category(found.group(1)) if found else None
            if name is not None:
                charged = name
                break
        out.setdefault(kind_of(thread), Counter())[charged] += int(count)
    return {
        kind: {
            "total_s": round(sum(c.values()) / rate, 2),
            **{k: round(v / rate, 2) for k, v in c.most_common()},
        }
        for kind, c in sorted(out.items())
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("file", type=Path)
    parser.add_argument("--rate", type=int, default=100)
    args = parser.parse_args()
    print(json.dumps(split(args.file, args.rate), indent=1))


if __name__ == "__main__":
    main()
