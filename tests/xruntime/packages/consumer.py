"""Type-checked (never run) against the installed Python package by tests/xruntime/run.sh, with
`mypy --strict`: the package's hints (`py.typed`) are found and are complete, and code written
against them the way the README shows type-checks."""

from typing import List, Optional

import palisade_engine
from palisade_engine import Backend, Decision, DecisionInput, EngineInfo, Plan, RefusalCode

INPUT: DecisionInput = {
    "document": "apiVersion: loopwright.dev/v1alpha1\nkind: Taskpack\n",
    "documentName": "taskpack.yaml",
    "host": {
        "os": "linux",
        "arch": "x86_64",
        "sessionKind": "cli",
        "githubActions": False,
        "allowDirectDedicated": False,
        "homeDir": "/home/dev",
        "workspaceDir": "/home/dev/repo",
        "writableRoots": [],
        "defaultBackendOrder": ["linux-bwrap", "docker"],
        "budgetCeilings": {"memoryBytes": 1024 * 1024 * 1024},
    },
    "probes": [
        {
            "backend": "linux-bwrap",
            "available": True,
            "reason": "trial sandbox ok",
            "capabilities": ["filesystemWriteContainment", "networkIsolation"],
            "networkModes": ["none"],
            "networkBridge": True,
            "version": "bubblewrap 0.8.0",
            "limitations": [],
        }
    ],
    "budgetFlags": {"timeoutMillis": 60_000},
}


def describe(decision: Decision) -> str:
    if decision.ok and decision.plan is not None:
        plan: Plan = decision.plan
        backend: Backend = plan["backend"]
        limit = plan["budgets"]["timeoutMillis"]
        timeout: Optional[int] = limit["value"] if limit is not None else None
        ports: List[int] = plan["network"].get("hostPorts", [])
        return f"{backend} {plan['network']['mode']} {timeout} {len(ports)} {'; '.join(decision.warnings)}"
    code: Optional[RefusalCode] = decision.code
    paths: List[str] = [error["path"] for error in decision.errors]
    return f"{code}: {decision.message} {', '.join(paths)}"


def main() -> str:
    try:
        from_mapping: Decision = palisade_engine.decide(INPUT)
        from_text = palisade_engine.decide(str(from_mapping.report["inputDigest"]))
        engine = palisade_engine.Engine()
        same: bool = engine.decide(INPUT).canonical_json == from_mapping.canonical_json
        info: EngineInfo = palisade_engine.info()
        sha: str = palisade_engine.COMPONENT_SHA256
        return f"{describe(from_mapping)} {describe(from_text)} {same} {info.engine_version} {sha}"
    except (palisade_engine.ComponentMismatchError, palisade_engine.EngineError) as error:
        return str(error)
