"""Progress of long CLI work: bars (tqdm) for walks over the journal, and a word on what a
call waits for.

A bar is drawn only when standard error is a TTY; under systemd, cron, a pipe or a test's
captured output it stays silent, so logs and scripts see only results. A call that waits
(`while_waiting`: a publish, a deploy, a move) says on standard error what it waits for once
it has taken a second, whatever standard error is: a person or a CI log waiting should know.
"""

from __future__ import annotations

import re
import sys
import threading
import time
from collections.abc import Callable, Iterable, Iterator, Sequence
from typing import Any, TextIO, TypeVar

T = TypeVar("T")


class _Quiet:
    """What `bar` gives off a terminal: counts, draws nothing, and spares importing tqdm (a
    node under systemd starts without it)."""

    def __init__(self) -> None:
        self.n = 0

    def update(self, count: int = 1) -> None:
        self.n += count

    def __enter__(self) -> _Quiet:
        return self

    def __exit__(self, *exc: object) -> None:
        return None


def bar(total: int, label: str, *, stream: TextIO | None = None) -> Any:
    """A tqdm bar over `total` envelopes on a terminal; elsewhere a silent counter."""
    stream = stream or sys.stderr
    if not _is_tty(stream):
        return _Quiet()
    from tqdm import tqdm

    return tqdm(
        total=total,
        desc=label,
        unit=" envelopes",
        unit_scale=True,
        file=stream,
        mininterval=0.25,
        dynamic_ncols=True,
    )


def chunks(chunked: Iterable[Sequence[T]], total: int, label: str) -> Iterator[Sequence[T]]:
    """Pass chunks through, advancing a bar by each chunk's length."""
    with bar(total, label) as progress:
        for chunk in chunked:
            yield chunk
            progress.update(len(chunk))


def items(iterable: Iterable[T], total: int, label: str) -> Iterator[T]:
    """Pass items through, one step each (updates are batched by tqdm's own interval)."""
    with bar(total, label) as progress:
        for item in iterable:
            yield item
            progress.update()


def say(text: str) -> None:
    """Progress goes to stderr, made visible: stdout keeps the answer (`--json` parseable)."""
    from node.display.humanize import visible

    print(f"agent-node: {visible(text)}", file=sys.stderr, flush=True)


SAY_AFTER_SECS = 1.0  # a call still waiting this long says what it waits for
POLL_SECS = 1.0
REPEAT_SECS = 5.0  # the same step is said again at most this often


def while_waiting(
    work: Callable[[], T], step: Callable[[float], str | None], *, after: float = SAY_AFTER_SECS
) -> T:
    """`work()`, run in a thread; once it has taken `after` seconds, say what it waits for:
    `step(seconds so far)` (None: nothing to say now), each time it changes, and the same
    step again every REPEAT_SECS with its new figures. Its answer, or its exception."""
    outcome: dict[str, Any] = {}

    def call() -> None:
        try:
            outcome["answer"] = work()
        except BaseException as exc:  # handed to the calling thread
            outcome["error"] = exc

    started = time.monotonic()
    worker = threading.Thread(target=call, daemon=True)
    worker.start()
    worker.join(after)
    said, said_at = "", 0.0
    while worker.is_alive():
        text = step(time.monotonic() - started)
        if text:
            shape = re.sub(r"\d+(\.\d+)?", "#", text)  # the same step with new figures
            if shape != said or time.monotonic() - said_at >= REPEAT_SECS:
                say(text)
                said, said_at = shape, time.monotonic()
        worker.join(POLL_SECS)
    if "error" in outcome:
        raise outcome["error"]
    return outcome["answer"]  # type: ignore[no-any-return]


def _is_tty(stream: TextIO) -> bool:
    try:
        return stream.isatty()
    except (AttributeError, ValueError):  # closed or not a real file
        return False
