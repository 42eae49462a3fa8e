"""Ask Palisade's decision engine how a command may be sandboxed, from Python.

Usage: python decide.py [--input-json FILE]

Uses the `palisade_engine` package (the wheel `packages/build.sh` writes; see README.md): builds
a decision input (a taskpack, host facts and backend probes), decides it, and prints the
decision's canonical JSON and its digest. `--input-json FILE` also writes the same input in the
JSON form `palisade decide --input FILE` reads, so the CLI can confirm the digest.
"""

import json
import sys

import palisade_engine

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
INPUT: palisade_engine.DecisionInput = {
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


def main() -> None:
    args = sys.argv[1:]
    input_json = None
    if args[:1] == ["--input-json"] and len(args) == 2:
        input_json = args[1]
    elif args:
        sys.exit("usage: python decide.py [--input-json FILE]")

    info = palisade_engine.info()
    print(f"engine {info.engine_version}, component sha256:{info.component_sha256}")
    decision = palisade_engine.decide(INPUT)  # the mapping, or its JSON text
    if decision.plan is not None:  # a decision (decision.ok); a refusal has no plan
        print(f"decision: {decision.backend}, network {decision.plan['network']['mode']}")
    else:
        print(f"refusal: {decision.code}: {decision.message}")
    # The canonical JSON is the decision's bytes; this is it indented, for reading.
    print(json.dumps(decision.report, indent=2))
    print(f"digest sha256:{decision.digest}")

    if input_json:
        with open(input_json, "w", encoding="utf-8") as f:
            json.dump(INPUT, f, indent=2)
            f.write("\n")


if __name__ == "__main__":
    main()
