"""Progress bars (tqdm) for long walks over the journal: totals, rate and ETA on a terminal.

A bar is drawn only when standard error is a TTY; under systemd, cron, a pipe or a test's
captured output it stays silent, so logs and scripts see only results.
"""

from __future__ import annotations

import sys
from collections.abc import Iterable, Iterator, Sequence
from typing import TextIO, TypeVar

from tqdm import tqdm

T = TypeVar("T")


def bar(total: int, label: str, *, stream: TextIO | None = None) -> tqdm:
    """A bar over `total` envelopes; disabled (a no-op) unless the stream is a terminal."""
    stream = stream or sys.stderr
    return tqdm(
        total=total,
        desc=label,
        unit=" envelopes",
        unit_scale=True,
        file=stream,
        disable=not _is_tty(stream),
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


def _is_tty(stream: TextIO) -> bool:
    try:
        return stream.isatty()
    except (AttributeError, ValueError):  # closed or not a real file
        return False
