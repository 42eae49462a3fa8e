"""Palisade's decision engine for Python.

The engine is one WebAssembly component (contract `palisade:engine@0.8.0`, `wit/palisade.wit`),
shipped inside this package and run with wasmtime-py. Give `decide` a decision input (the JSON
form `palisade decide --input` reads) and it returns the engine's decision or refusal: the same
bytes, and the same digest, as the `palisade` CLI and every other runtime give for that input.

    import palisade_engine

    decision = palisade_engine.decide(input)       # a mapping, or its JSON text
    if decision.ok:
        print(decision.backend, decision.plan["network"]["mode"])
    else:
        print(decision.code, decision.message)
    print(decision.digest)                          # sha256 of decision.canonical_json

When the component loads, its SHA-256 is checked against `COMPONENT_SHA256`, the digest this
package was built with (and the `+sha256.<12 hex>` part of its version): a substituted file
raises `ComponentMismatchError` and is never run.
"""

from ._component import COMPONENT_SHA256, __version__
from ._engine import (
    INTERFACE,
    ComponentMismatchError,
    Engine,
    EngineError,
    InputLike,
    decide,
    default_engine,
    info,
)
from ._types import (
    Backend,
    BackendProbe,
    BudgetClamp,
    BudgetLimit,
    BudgetLimits,
    CandidateTrace,
    Capability,
    Decision,
    DecisionInput,
    EffectiveBudgets,
    EngineInfo,
    EnvironmentPolicy,
    FieldError,
    HostFacts,
    LandlockProc,
    NamedDocument,
    PolicyFlags,
    Network,
    Plan,
    ProtectedPath,
    RefusalCode,
    UnixSocketFact,
    UnixSocketGrant,
)

__all__ = [
    "COMPONENT_SHA256",
    "INTERFACE",
    "Backend",
    "BackendProbe",
    "BudgetClamp",
    "BudgetLimit",
    "BudgetLimits",
    "CandidateTrace",
    "Capability",
    "ComponentMismatchError",
    "Decision",
    "DecisionInput",
    "EffectiveBudgets",
    "Engine",
    "EngineError",
    "EngineInfo",
    "EnvironmentPolicy",
    "FieldError",
    "HostFacts",
    "InputLike",
    "LandlockProc",
    "NamedDocument",
    "PolicyFlags",
    "Network",
    "Plan",
    "ProtectedPath",
    "RefusalCode",
    "UnixSocketFact",
    "UnixSocketGrant",
    "__version__",
    "decide",
    "default_engine",
    "info",
]
