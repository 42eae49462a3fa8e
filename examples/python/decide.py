"""Ask Palisade's decision engine how a command may be sandboxed, from Python.

Usage: python decide.py [COMPONENT.wasm] [--input-json FILE]

Loads the engine component (`palisade component --out palisade-engine.wasm`) with wasmtime-py,
builds a decision input (a taskpack, host facts and backend probes), calls the typed `decide`
and prints the decision's canonical JSON and its digest. `--input-json FILE` also writes the
same input in the JSON form `palisade decide --input FILE` reads, so the CLI can confirm the
digest.
"""

import json
import sys

from wasmtime import Engine, Store
from wasmtime.component import Component, Linker, Record

INTERFACE = "palisade:engine/decision@0.2.0"

# The policy: a Loopwright Taskpack whose `spec.sandbox` block Palisade reads.
TASKPACK = """\
apiVersion: loopwright.dev/v1alpha1
kind: Taskpack
metadata:
  name: docs-sync
spec:
  sandbox:
    preferredBackends: [linux-bwrap, linux-landlock]
    networkMode: none
    requiredCapabilities: [filesystemWriteContainment, processTreeCleanup]
    deniedReadPaths: [~/.ssh, ~/.aws]
"""

# Host facts and probes, in the JSON form `palisade doctor --json` and audit records use. A real
# host measures these (`palisade doctor --json`); these describe a typical Linux laptop.
INPUT = {
    "document": TASKPACK,
    "documentName": "taskpack.yaml",
    "host": {
        "os": "linux",
        "arch": "x86_64",
        "sessionKind": "cli",
        "githubActions": False,
        "allowDirectDedicated": False,
        "homeDir": "/home/dev",
        "workspaceDir": "/home/dev/repo",
        "writableRoots": ["/home/dev/results"],
        "defaultBackendOrder": ["linux-bwrap", "linux-landlock", "docker"],
    },
    "probes": [
        {
            "backend": "linux-bwrap",
            "available": True,
            "reason": "trial sandbox ok",
            "capabilities": [
                "filesystemReadContainment",
                "filesystemWriteContainment",
                "protectedPathReadOnlyMask",
                "networkIsolation",
                "processTreeCleanup",
                "syscallFiltering",
            ],
            "networkModes": ["none", "loopback-only", "allow-outbound"],
            "networkBridge": True,
            "version": "bubblewrap 0.8.0",
            "limitations": [],
        },
        {
            "backend": "linux-landlock",
            "available": False,
            "reason": "landlock not enabled in this kernel",
            "capabilities": [],
            "networkModes": [],
            "networkBridge": False,
            "version": "",
            "limitations": [],
        },
    ],
}


class WitRecord(Record):
    """A WIT record for wasmtime-py: attributes named as in the WIT (`document-name`). A field
    this example does not set reads as None, i.e. an `option` left `none`."""

    def __init__(self, **fields):
        for name, value in fields.items():
            setattr(self, name, value)

    def __getattr__(self, name):
        return None


def kebab(name):
    """`documentName` -> `document-name`, `filesystemReadContainment` -> `filesystem-read-containment`."""
    return "".join("-" + c.lower() if c.isupper() else c for c in name)


def to_wit(value, key=None):
    """The JSON form -> the typed WIT values: records get kebab-case field names, and the
    capability enum values (camelCase in JSON) become kebab-case too."""
    if isinstance(value, dict):
        return WitRecord(**{kebab(k): to_wit(v, k) for k, v in value.items()})
    if isinstance(value, list):
        return [kebab(v) if key == "capabilities" else to_wit(v) for v in value]
    return value


def main():
    args = sys.argv[1:]
    input_json = None
    if "--input-json" in args:
        at = args.index("--input-json")
        input_json = args[at + 1]
        del args[at : at + 2]
    component_path = args[0] if args else "palisade-engine.wasm"

    engine = Engine()
    component = Component.from_file(engine, component_path)
    store = Store(engine)
    instance = Linker(engine).instantiate(store, component)  # it imports nothing
    interface = component.get_export_index(INTERFACE)
    decide = instance.get_func(store, instance.get_export_index(store, "decide", interface))

    result = decide(store, to_wit(INPUT))  # result<decision, refusal>
    outcome = result.payload
    if result.tag == "ok":
        print(f"decision: {outcome.plan.backend}, network {outcome.plan.network.tag}")
    else:
        print(f"refusal: {outcome.code}: {outcome.message}")
    print(json.dumps(json.loads(getattr(outcome, "canonical-json")), indent=2))
    print(f"digest sha256:{outcome.digest}")

    if input_json:
        with open(input_json, "w", encoding="utf-8") as f:
            json.dump(INPUT, f, indent=2)
            f.write("\n")


if __name__ == "__main__":
    main()
