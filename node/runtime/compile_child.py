"""The compiler child: compiles one WebAssembly component with wasmtime, then exits.

Why a child process: Cranelift's compile of a Python-built component peaks at hundreds of MiB
of heap that the allocator keeps after the compile, so compiling inside the node left it at
about 1.5 GB of anonymous memory for good (docs/design.md, "Compiling components"). Here the
memory goes back to the system when the process exits, the limits below bound what a hostile
component can make the compiler do, and a compiler crash kills only this process.

Protocol (node.runtime.compiler is the only caller): the component's bytes on stdin; with
`--out PATH` the serialized artifact is written to PATH (a file the parent created and will
validate and rename), with `--check` it is compiled with optimisations off and dropped (the
registry's check of an upload). Exit 0: compiled; EXIT_REJECTED: wasmtime refused the
component (its first error line on stderr); EXIT_OUT_OF_MEMORY: the address-space limit was
hit in Python. A Rust allocation failure under the limit aborts (SIGABRT) after printing
"memory allocation of N bytes failed".
"""

from __future__ import annotations

import argparse
import contextlib
import ctypes
import os
import resource
import signal
import sys

EXIT_REJECTED = 2
EXIT_OUT_OF_MEMORY = 3
_PR_SET_PDEATHSIG = 1


def _die_with_parent(parent: int) -> None:
    """SIGKILL this child when the node dies (kill -9 included): no orphaned compiles."""
    with contextlib.suppress(OSError, AttributeError):  # not Linux: it runs to its end
        ctypes.CDLL(None, use_errno=True).prctl(_PR_SET_PDEATHSIG, signal.SIGKILL)
    if os.getppid() != parent:  # the parent died before prctl took effect
        os._exit(1)


def _limit_memory(megabytes: int) -> None:
    limit = megabytes << 20
    resource.setrlimit(resource.RLIMIT_AS, (limit, limit))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--parent", type=int, required=True, help="the node's pid")
    parser.add_argument("--memory-mb", type=int, required=True, help="address-space limit")
    target = parser.add_mutually_exclusive_group(required=True)
    target.add_argument("--out", help="write the serialized artifact to this existing file")
    target.add_argument("--check", action="store_true", help="compile fast, keep nothing")
    args = parser.parse_args(argv)
    _die_with_parent(args.parent)
    _limit_memory(args.memory_mb)
    import wasmtime
    from wasmtime import component as cm

    from node.runtime.engine_settings import engine_config

    try:
        wasm = sys.stdin.buffer.read()
        config = engine_config()  # the node's own settings, so the artifact loads there
        if args.check:
            config.cranelift_opt_level = "none"  # only whether it compiles matters
        component = cm.Component(wasmtime.Engine(config), wasm)
        if args.out:
            with open(args.out, "wb") as out:
                out.write(component.serialize())
    except wasmtime.WasmtimeError as exc:
        lines = str(exc).strip().splitlines()
        print(lines[0] if lines else "invalid component", file=sys.stderr)
        return EXIT_REJECTED
    except MemoryError:
        print(f"out of memory (limit {args.memory_mb} MiB)", file=sys.stderr)
        return EXIT_OUT_OF_MEMORY
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
