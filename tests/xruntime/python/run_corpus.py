"""Runs the conformance corpus through the engine component under wasmtime-py.

Usage: run_corpus.py COMPONENT.wasm CORPUS.tsv

CORPUS.tsv is written by `tests/conformance.rs` (`corpus_export_for_other_runtimes`): one
`name<TAB>input-json` line per case. Each input is passed verbatim to the component's
`decide-json`, so this runner and every other one feed the engine the same bytes. Prints one
`name digest outcome` line per case on stdout (outcome `decision:<backend>` or
`refusal:<CODE>`), and the wall time on stderr. Exits non-zero on any failure to load, call or
check a result; a refusal is a result like any other, not a failure.
"""

import hashlib
import sys
import time

from wasmtime import Config, Engine, Store
from wasmtime.component import Component, Linker

INTERFACE = "palisade:engine/decision@0.8.0"


def fail(message):
    print(f"error: {message}", file=sys.stderr)
    sys.exit(1)


class EngineComponent:
    """The engine component, compiled once; every call runs in a fresh instance (as the Rust
    host does), so no call can observe another's allocator state."""

    def __init__(self, path):
        self.engine = Engine(Config())
        self.component = Component.from_file(self.engine, path)
        self.linker = Linker(self.engine)  # the component imports nothing
        self.interface = self.component.get_export_index(INTERFACE)
        if self.interface is None:
            fail(f"{path} does not export `{INTERFACE}`")

    def call(self, name, *args):
        store = Store(self.engine)
        instance = self.linker.instantiate(store, self.component)
        index = instance.get_export_index(store, name, self.interface)
        func = instance.get_func(store, index) if index is not None else None
        if func is None:
            fail(f"the component has no function `{name}` in `{INTERFACE}`")
        return func(store, *args)


def outcome_line(name, result):
    """`name digest outcome` from a `result<decision, refusal>` value, after checking that the
    digest is the SHA-256 of the canonical JSON the engine returned with it."""
    record = result.payload
    canonical = getattr(record, "canonical-json")
    digest = record.digest
    if hashlib.sha256(canonical.encode("utf-8")).hexdigest() != digest:
        fail(f"case {name}: digest {digest} is not the sha-256 of the canonical json")
    if result.tag == "ok":
        outcome = f"decision:{record.plan.backend}"
    elif result.tag == "err":
        outcome = "refusal:" + record.code.upper().replace("-", "_")
    else:
        fail(f"case {name}: unexpected result tag {result.tag!r}")
    return f"{name} {digest} {outcome}"


def main():
    if len(sys.argv) != 3:
        fail("usage: run_corpus.py COMPONENT.wasm CORPUS.tsv")
    component_path, corpus_path = sys.argv[1], sys.argv[2]
    with open(corpus_path, encoding="utf-8", newline="\n") as corpus:
        cases = [line.rstrip("\n").split("\t", 1) for line in corpus if line.strip()]
    if not cases or any(len(case) != 2 for case in cases):
        fail(f"{corpus_path} is not a `name<TAB>input-json` file")

    started = time.perf_counter()
    engine = EngineComponent(component_path)
    loaded = time.perf_counter()
    lines = [outcome_line(name, engine.call("decide-json", text)) for name, text in cases]
    finished = time.perf_counter()

    sys.stdout.write("".join(line + "\n" for line in lines))
    print(
        f"python (wasmtime-py): {len(lines)} cases in {(finished - loaded) * 1000:.0f} ms "
        f"(+ load and compile {(loaded - started) * 1000:.0f} ms)",
        file=sys.stderr,
    )


if __name__ == "__main__":
    main()
