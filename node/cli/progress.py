"""Progress bars (tqdm) for long walks over the journal: totals, rate and ETA on a terminal.

A bar is drawn only when standard error is a TTY; under systemd, cron, a pipe or a test's
captured output it stays silent, so logs and scripts see only results.
"""

from __future__ import annotations

import sys
from collections.abc import Iterable, Iterator, Sequence
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


def _is_tty(stream: TextIO) -> bool:
    try:
        return stream.isatty()
    except (AttributeError, ValueError):  # closed or not a real file
        return False
