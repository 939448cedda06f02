"""Linear memories allocated by the node itself, so each agent's heap size is measured.

wasmtime's component API does not expose a component's core memories, so the status field
`memory_profile.heap_bytes` could not otherwise be a real figure. Installing this module as
the engine's host memory creator (wasmtime_config_host_memory_creator_set, via
wasmtime._ffi) makes every linear memory an mmap region we own: we see each creation and
each growth. A memory is attributed to the `MemoryMeter` active on the creating thread,
which is the agent's worker thread while it instantiates its component.

Memories are reserved as wasmtime asks (4 GiB + guard on 64-bit hosts by default), mapped
PROT_NONE and made read-write up to the current size, so wasmtime's guard-page bounds
checks keep working. Store limits still decide whether a memory may grow.
"""

from __future__ import annotations

import ctypes
import itertools
import sys
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

import wasmtime
from wasmtime import _ffi as ffi

_PROT_NONE = 0
_PROT_READ_WRITE = 0x1 | 0x2
_MAP_PRIVATE = 0x02
_MAP_ANONYMOUS = 0x20
_MAP_NORESERVE = 0x4000
_MAP_FAILED = ctypes.c_void_p(-1).value
_DEFAULT_RESERVATION = 4 << 30

SUPPORTED = sys.platform.startswith("linux")


class MemoryMeter:
    """The linear memories of one agent's store; thread-safe to read from any thread."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._sizes: dict[int, int] = {}
        self.peak_bytes = 0

    def heap_bytes(self) -> int:
        """Current total size of the agent's linear memories, in bytes."""
        with self._lock:
            return sum(self._sizes.values())

    def _set(self, memory_id: int, size: int) -> None:
        with self._lock:
            self._sizes[memory_id] = size
            self.peak_bytes = max(self.peak_bytes, sum(self._sizes.values()))

    def _drop(self, memory_id: int) -> None:
        with self._lock:
            self._sizes.pop(memory_id, None)


_UNATTRIBUTED = MemoryMeter()
_current = threading.local()


@contextmanager
def metering(meter: MemoryMeter) -> Iterator[None]:
    """Attribute memories created on this thread (by instantiation) to `meter`."""
    previous = getattr(_current, "meter", None)
    _current.meter = meter
    try:
        yield
    finally:
        _current.meter = previous


@dataclass
class _Region:
    base: int
    size: int
    capacity: int
    mapped: int
    meter: MemoryMeter


_libc = ctypes.CDLL(None, use_errno=True)
_libc.mmap.restype = ctypes.c_void_p
_libc.mmap.argtypes = [
    ctypes.c_void_p,
    ctypes.c_size_t,
    ctypes.c_int,
    ctypes.c_int,
    ctypes.c_int,
    ctypes.c_long,
]
_libc.mprotect.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int]
_libc.munmap.argtypes = [ctypes.c_void_p, ctypes.c_size_t]

_regions: dict[int, _Region] = {}
_regions_lock = threading.Lock()
_ids = itertools.count(1)
_PAGE = 4096


def _round_up(n: int) -> int:
    return (n + _PAGE - 1) // _PAGE * _PAGE


def _error(message: str) -> int:
    """A wasmtime_error_t* for wasmtime to own, as the integer the callbacks return."""
    ptr = ffi.wasmtime_error_new(message.encode())
    return ctypes.cast(ptr, ctypes.c_void_p).value or 0


def _make_accessible(base: int, size: int) -> bool:
    if size == 0:
        return True
    return bool(_libc.mprotect(base, _round_up(size), _PROT_READ_WRITE) == 0)


def _new_memory(
    env: Any, ty: Any, minimum: int, maximum: int, reserved: int, guard: int, memory_ret: Any
) -> int:
    try:
        capacity = reserved or max(minimum, min(maximum, _DEFAULT_RESERVATION))
        mapped = _round_up(capacity) + _round_up(guard)
        flags = _MAP_PRIVATE | _MAP_ANONYMOUS | _MAP_NORESERVE
        base = _libc.mmap(None, mapped, _PROT_NONE, flags, -1, 0)
        if base in (None, _MAP_FAILED):
            return _error(f"mmap of {mapped} bytes failed (errno {ctypes.get_errno()})")
        if not _make_accessible(base, minimum):
            _libc.munmap(base, mapped)
            return _error(f"mprotect of {minimum} bytes failed (errno {ctypes.get_errno()})")
        meter = getattr(_current, "meter", None) or _UNATTRIBUTED
        memory_id = next(_ids)
        with _regions_lock:
            _regions[memory_id] = _Region(base, minimum, capacity, mapped, meter)
        meter._set(memory_id, minimum)
        ret = memory_ret.contents
        ret.env = memory_id
        ret.get_memory = _GET
        ret.grow_memory = _GROW
        ret.finalizer = _FINALIZE
        return 0
    except BaseException as e:  # a Python error must never unwind into wasmtime
        return _error(f"host memory creator failed: {e!r}")


def _get_memory(env: int, byte_size: Any, byte_capacity: Any) -> int:
    region = _regions[env]
    byte_size[0] = region.size
    byte_capacity[0] = region.capacity
    return region.base


def _grow_memory(env: int, new_size: int) -> int:
    try:
        region = _regions[env]
        if new_size > region.capacity:
            return _error(f"memory cannot grow past its reservation of {region.capacity} bytes")
        if new_size > region.size and not _make_accessible(region.base, new_size):
            return _error(f"mprotect to {new_size} bytes failed (errno {ctypes.get_errno()})")
        region.size = new_size
        region.meter._set(env, new_size)
        return 0
    except BaseException as e:
        return _error(f"host memory grow failed: {e!r}")


def _finalize(env: int) -> None:
    with _regions_lock:
        region = _regions.pop(env, None)
    if region is not None:
        region.meter._drop(env)
        _libc.munmap(region.base, region.mapped)


_NEW = ffi.wasmtime_new_memory_callback_t(_new_memory)
_GET = ffi.wasmtime_memory_get_callback_t(_get_memory)
_GROW = ffi.wasmtime_memory_grow_callback_t(_grow_memory)
_FINALIZE = ctypes.CFUNCTYPE(None, ctypes.c_void_p)(_finalize)
# a NULL function pointer: the creator itself has no finalizer
_NO_FINALIZER = ctypes.cast(ctypes.c_void_p(None), ctypes.CFUNCTYPE(None, ctypes.c_void_p))
_CREATOR = ffi.wasmtime_memory_creator(None, _NEW, _NO_FINALIZER)


def install(config: wasmtime.Config) -> bool:
    """Make `config`'s engine allocate linear memories here; False where unsupported."""
    if not SUPPORTED:
        return False
    # Copy-on-write memory images need wasmtime's own mmap; ours are initialised by copying.
    config.memory_init_cow = False
    ffi.wasmtime_config_host_memory_creator_set(config.ptr(), ctypes.byref(_CREATOR))
    return True


def live_regions() -> int:
    """How many linear memories are currently mapped (for leak checks in tests)."""
    with _regions_lock:
        return len(_regions)
