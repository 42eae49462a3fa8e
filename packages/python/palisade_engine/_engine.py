"""Loading the packaged component, checking it, and calling it under wasmtime-py.

The component is the whole engine; this module only loads it, calls it and wraps its answer.
The bytes of every decision come from the component: nothing here re-serializes, reorders or
fills in a field.
"""

from __future__ import annotations

import hashlib
import json
import threading
from importlib import resources
from typing import Any, Literal, Mapping, Optional, Union

import wasmtime
from wasmtime.component import Component, Linker

from ._component import COMPONENT_SHA256
from ._types import Decision, DecisionInput, EngineInfo

#: The interface every function lives in (`wit/palisade.wit`).
INTERFACE = "palisade:engine/decision@0.8.0"
#: The component's file inside this package.
COMPONENT_FILE = "palisade-engine.wasm"

# Wasmtime as the `palisade` CLI configures it (`host/src/runtime.rs`), as far as wasmtime-py
# exposes it: the same fuel per call (a runaway input stops instead of spinning), no SIMD, NaNs
# canonicalized, the same stack and memory limits, a fresh instance for every call.
FUEL_PER_CALL = 10_000_000_000
MAX_MEMORY_BYTES = 256 * 1024 * 1024
MAX_TABLE_ELEMENTS = 65_536
MAX_INSTANCES = 32
MAX_TABLES = 32
MAX_MEMORIES = 4
MAX_WASM_STACK_BYTES = 1024 * 1024

#: What `decide` accepts: the decision input as a mapping (serialized with `json.dumps`), or its
#: JSON text as `str` or UTF-8 `bytes` (passed to the engine verbatim).
InputLike = Union[DecisionInput, Mapping[str, Any], str, bytes]


class ComponentMismatchError(RuntimeError):
    """The component file is not the one this package was built with (refused, never run)."""


class EngineError(RuntimeError):
    """The component could not be run (a trap, out of fuel), or it answered what the contract
    rules out. Never a refusal: a refusal is a `Decision` whose `outcome` is `"refusal"`."""


class Engine:
    """The packaged engine component: checked against `COMPONENT_SHA256`, compiled once.

    Every call runs in a fresh instance with its own store, fuel and limits (as the `palisade`
    CLI does), so a call's answer depends on its input alone, never on an earlier call. An
    `Engine` may be shared between threads. Compiling takes about a second; `decide` and `info`
    at module level share one `Engine`, made on first use.
    """

    def __init__(self) -> None:
        wasm = resources.files(__package__).joinpath(COMPONENT_FILE).read_bytes()
        actual = hashlib.sha256(wasm).hexdigest()
        if actual != COMPONENT_SHA256:
            raise ComponentMismatchError(
                f"the engine component in {__package__} has sha256 {actual}, but this package "
                f"was built with sha256 {COMPONENT_SHA256}; reinstall the package"
            )
        config = wasmtime.Config()
        config.consume_fuel = True
        config.cranelift_nan_canonicalization = True
        config.wasm_relaxed_simd = False
        config.wasm_simd = False
        config.max_wasm_stack = MAX_WASM_STACK_BYTES
        self._engine = wasmtime.Engine(config)
        # Compiled from the bytes just hashed, not from the file again.
        self._component = Component(self._engine, wasm)
        self._linker = Linker(self._engine)  # the component imports nothing
        interface = self._component.get_export_index(INTERFACE)
        if interface is None:
            raise EngineError(f"the engine component does not export `{INTERFACE}`")
        self._interface = interface

    def decide(self, input: InputLike) -> Decision:
        """Decides how the input's command may be sandboxed: a decision or a refusal.

        `input` is the decision input (`docs/contract.md`): a mapping, serialized with
        `json.dumps`, or JSON text (`str` or UTF-8 `bytes`), passed verbatim. The engine hashes
        its own canonical form of the input, so any JSON text of the same input gives the same
        bytes as `palisade decide --input`; only an input that does not parse is hashed as raw
        text (its refusal's `input_digest`), so pass the text itself to match the CLI there too.
        """
        return _decision(self._call("decide-json", _input_text(input)))

    def info(self) -> EngineInfo:
        """The engine's identity (engine, WIT and decision schema versions) and its digest."""
        info = self._call("info")
        return EngineInfo(
            engine_version=getattr(info, "engine-version"),
            wit_version=getattr(info, "wit-version"),
            schema_version=getattr(info, "schema-version"),
            component_sha256=COMPONENT_SHA256,
        )

    def _call(self, name: str, *args: Any) -> Any:
        store = wasmtime.Store(self._engine)
        store.set_limits(
            memory_size=MAX_MEMORY_BYTES,
            table_elements=MAX_TABLE_ELEMENTS,
            instances=MAX_INSTANCES,
            tables=MAX_TABLES,
            memories=MAX_MEMORIES,
        )
        store.set_fuel(FUEL_PER_CALL)
        try:
            instance = self._linker.instantiate(store, self._component)
            index = instance.get_export_index(store, name, self._interface)
            func = instance.get_func(store, index) if index is not None else None
            if func is None:
                raise EngineError(f"the engine component has no function `{name}`")
            return func(store, *args)
        except (wasmtime.Trap, wasmtime.WasmtimeError) as error:  # traps, fuel, limits
            message = " ".join(str(error).split())
            raise EngineError(f"the engine component failed in `{name}`: {message}") from error


_default: Optional[Engine] = None
_default_lock = threading.Lock()


def default_engine() -> Engine:
    """The `Engine` the module-level functions use, made (and checked) on first use."""
    global _default
    with _default_lock:
        if _default is None:
            _default = Engine()
        return _default


def decide(input: InputLike) -> Decision:
    """`Engine.decide` on the shared engine."""
    return default_engine().decide(input)


def info() -> EngineInfo:
    """`Engine.info` on the shared engine."""
    return default_engine().info()


def _input_text(input: InputLike) -> str:
    if isinstance(input, str):
        return input
    if isinstance(input, (bytes, bytearray)):
        return bytes(input).decode("utf-8")
    if isinstance(input, Mapping):
        return json.dumps(input, allow_nan=False)
    raise TypeError(
        f"a decision input is a mapping or its JSON text (str or bytes), not {type(input).__name__}"
    )


def _decision(result: Any) -> Decision:
    """The `Decision` for a `result<decision, refusal>`, after checking what the contract
    promises: the digest is the SHA-256 of the canonical JSON, and the JSON's outcome is the
    result's."""
    if result.tag not in ("ok", "err"):
        raise EngineError(f"the engine returned a result tagged {result.tag!r}")
    record = result.payload
    canonical = getattr(record, "canonical-json")
    digest = record.digest
    if hashlib.sha256(canonical.encode("utf-8")).hexdigest() != digest:
        raise EngineError(f"the engine's digest {digest} is not the SHA-256 of its JSON")
    report = json.loads(canonical)
    outcome: Literal["decision", "refusal"] = "decision" if result.tag == "ok" else "refusal"
    if report.get("outcome") != outcome:
        raise EngineError(
            f"the engine returned a {outcome} whose JSON says {report.get('outcome')!r}"
        )
    plan = report.get("plan")
    return Decision(
        outcome=outcome,
        canonical_json=canonical,
        digest=digest,
        message=report["message"],
        input_digest=report["inputDigest"],
        engine_version=report["engineVersion"],
        schema_version=report["schemaVersion"],
        backend=report.get("backend"),
        plan=plan,
        warnings=list(plan["warnings"]) if plan is not None else [],
        code=report.get("code"),
        errors=report.get("errors", []),
        trace=report.get("trace", []),
        report=report,
    )
