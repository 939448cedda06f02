"""Calls of a component's exports with their types resolved once, not on every call.

wasmtime-py's `Func.__call__` asks wasmtime for the function's type on every call and
rebuilds it in Python (`FuncType.params`, `.result`, and for a `result<_, string>` the two
cases and whether they are tagged, each a few FFI calls and Managed objects freed again):
about a fifth of a tick of a small agent (issue 26). An export's type cannot change for the
life of its instance, so `ExportCall` resolves it when the instance is created and does the
rest of what `Func.__call__` does: lower the arguments, call, lift the result.
"""

from __future__ import annotations

import ctypes
from ctypes import byref, pointer
from typing import Any

from wasmtime import WasmtimeError
from wasmtime import _ffi as ffi
from wasmtime import component as cm
from wasmtime.component._enter import maybe_raise_last_exn
from wasmtime.component._types import ValType, VariantLikeType


def _frozen(ty: ValType | None) -> ValType | None:
    """`ty` with a variant-like type's cases and tagging computed once (they are derived
    from the type on every lift and lower otherwise)."""
    if isinstance(ty, VariantLikeType):
        cases = [(name, _frozen(case)) for name, case in ty._cases()]
        tagged = ty._tagged()
        # instance attributes shadow the methods of this one type object only
        ty._cases = lambda: cases  # type: ignore[method-assign]
        ty._tagged = lambda: tagged  # type: ignore[method-assign]
    return ty


class ExportCall:
    """One export of one instance, callable like `Func` (`call(store, *params)`)."""

    def __init__(self, func: cm.Func, store: Any) -> None:
        self.func = func
        fty = func.type(store)
        self.param_types: list[ValType] = [ty for _name, ty in fty.params]
        self.result_type = _frozen(fty.result)
        self._fty = fty  # owns the types above
        # built once: a call of an export without parameters (`tick`) allocates only its
        # result's space (the function's reference and an empty argument array are reused)
        self._func_ref = byref(func._func)
        self._no_params = (ffi.wasmtime_component_val_t * 0)()

    def __call__(self, store: Any, *params: Any) -> Any:
        if len(params) != len(self.param_types):
            raise TypeError(
                f"wrong number of parameters provided: given {len(params)}, "
                f"expected {len(self.param_types)}"
            )
        param_capi = (ffi.wasmtime_component_val_t * len(params))() if params else self._no_params
        n = 0
        try:
            for ty, val in zip(self.param_types, params, strict=True):
                ty.convert_to_c(store, val, pointer(param_capi[n]))
                n += 1
            result_ty = self.result_type
            if result_ty is None:
                _check(
                    ffi.wasmtime_component_func_call(
                        self._func_ref, store._context(), param_capi, n, None, 0
                    )
                )
                return None
            result_space = ffi.wasmtime_component_val_t()
            _check(
                ffi.wasmtime_component_func_call(
                    self._func_ref, store._context(), param_capi, n, byref(result_space), 1
                )
            )
            return result_ty.convert_from_c(result_space)
        finally:
            for i in range(n):
                ffi.wasmtime_component_val_delete(byref(param_capi[i]))


def _check(error: ctypes._Pointer[ffi.wasmtime_error_t]) -> None:
    """What wasmtime-py's `enter_wasm` does with a call's outcome, without its closure:
    raise the Python exception a host function raised, else the call's error."""
    if error:
        raised = WasmtimeError._from_ptr(error)
        maybe_raise_last_exn()
        raise raised
