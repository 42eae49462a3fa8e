"""Runs the conformance corpus through the installed Python package's public API.

Usage: run_corpus.py CORPUS.tsv COMPONENT_SHA256 INDEX.D.TS

Run with the python of a fresh virtual environment into which the built wheel was installed
(tests/xruntime/run.sh does): `import palisade_engine` must find the installed package, not a
source tree. Each case's input text goes to `palisade_engine.decide` as it is, and once more
parsed (a mapping), which must give the same digest. Prints one `name digest outcome` line per
case on stdout, as the other runners do, and the wall time on stderr. Also checks:

- the package is the one built from COMPONENT_SHA256 (its constant, its version, `info()`);
- every decision, and every input that parses, fits the package's TypedDicts (keys, nested
  types, closed sets), and INDEX.D.TS (the npm package's types) declares the same keys;
- a copy of the package whose component has one byte changed refuses to load.

Exits non-zero on the first failure.
"""

import hashlib
import importlib.metadata
import json
import re
import shutil
import subprocess
import sys
import tempfile
import time
import typing
from pathlib import Path

import palisade_engine


def fail(message):
    print(f"error: {message}", file=sys.stderr)
    sys.exit(1)


def check_installed(expected_sha256):
    location = Path(palisade_engine.__file__).resolve()
    if Path(sys.prefix).resolve() not in location.parents:
        fail(f"palisade_engine was imported from {location}, not from this environment")
    version = importlib.metadata.version("palisade-engine")
    if palisade_engine.COMPONENT_SHA256 != expected_sha256:
        fail(f"the package says sha256 {palisade_engine.COMPONENT_SHA256}, built {expected_sha256}")
    if not version.endswith(f"+sha256.{expected_sha256[:12]}") or version != palisade_engine.__version__:
        fail(f"the installed version {version} (module: {palisade_engine.__version__}) does not name sha256 {expected_sha256}")
    info = palisade_engine.info()
    if info.component_sha256 != expected_sha256 or info.wit_version != "0.8.0":
        fail(f"info() says {info}")
    wasm = location.parent / "palisade-engine.wasm"
    if hashlib.sha256(wasm.read_bytes()).hexdigest() != expected_sha256:
        fail(f"{wasm} is not the component sha256 {expected_sha256}")
    return version


# --- the TypedDicts, checked against values --------------------------------------------------


def conforms(value, kind, path, problems):
    """Appends to `problems` each way `value` does not fit the type `kind`."""
    origin = typing.get_origin(kind)
    if kind is typing.Any:
        return
    if typing.is_typeddict(kind):
        if not isinstance(value, dict):
            problems.append(f"{path}: {type(value).__name__}, expected an object")
            return
        hints = typing.get_type_hints(kind)
        for key in sorted(kind.__required_keys__ - value.keys()):
            problems.append(f"{path}.{key}: missing")
        for key in sorted(value.keys() - hints.keys()):
            problems.append(f"{path}.{key}: not in {kind.__name__}")
        for key in sorted(value.keys() & hints.keys()):
            conforms(value[key], hints[key], f"{path}.{key}", problems)
    elif origin is typing.Union:
        alternatives = typing.get_args(kind)
        if not any(not attempt(value, alternative, path) for alternative in alternatives):
            problems.append(f"{path}: {value!r} fits none of {kind}")
    elif origin is typing.Literal:
        if value not in typing.get_args(kind):
            problems.append(f"{path}: {value!r} is not one of {typing.get_args(kind)}")
    elif origin is list:
        if not isinstance(value, list):
            problems.append(f"{path}: {type(value).__name__}, expected a list")
            return
        (item,) = typing.get_args(kind)
        for index, element in enumerate(value):
            conforms(element, item, f"{path}[{index}]", problems)
    elif kind is type(None):
        if value is not None:
            problems.append(f"{path}: {value!r}, expected null")
    elif kind is int:
        if not isinstance(value, int) or isinstance(value, bool):
            problems.append(f"{path}: {value!r}, expected an integer")
    elif kind in (str, bool):
        if not isinstance(value, kind):
            problems.append(f"{path}: {value!r}, expected {kind.__name__}")
    else:
        fail(f"the checker does not know the type {kind} (at {path})")


def attempt(value, kind, path):
    problems = []
    conforms(value, kind, path, problems)
    return problems


def check_types(name, decision, text):
    problems = []
    if decision.plan is not None:
        conforms(decision.plan, palisade_engine.Plan, "plan", problems)
    conforms(decision.errors, typing.List[palisade_engine.FieldError], "errors", problems)
    conforms(decision.trace, typing.List[palisade_engine.CandidateTrace], "trace", problems)
    # An input the engine could read at all fits DecisionInput (the corpus also holds inputs
    # that do not parse, refused at path `input`).
    if not any(error["path"] == "input" for error in decision.errors):
        conforms(json.loads(text), palisade_engine.DecisionInput, "input", problems)
    if problems:
        fail(f"case {name}: the package's types do not fit: " + "; ".join(problems[:5]))


def check_dts(dts_path):
    """The npm package's interfaces declare the same keys as the TypedDicts of the same name."""
    text = Path(dts_path).read_text(encoding="utf-8")
    interfaces = {
        match.group(1): set(re.findall(r"^\s+(?:readonly\s+)?(\w+)\??:", match.group(2), re.M))
        for match in re.finditer(r"^export interface (\w+) \{\n(.*?)^\}", text, re.M | re.S)
    }
    compared = 0
    for name in dir(palisade_engine):
        kind = getattr(palisade_engine, name)
        if not typing.is_typeddict(kind):
            continue
        if name not in interfaces:
            fail(f"{dts_path} declares no interface {name}")
        keys = set(typing.get_type_hints(kind))
        if keys != interfaces[name]:
            only_python, only_ts = sorted(keys - interfaces[name]), sorted(interfaces[name] - keys)
            fail(f"{name}: keys only in Python {only_python}, only in {dts_path} {only_ts}")
        compared += 1
    if compared < 10:
        fail(f"only {compared} TypedDicts found to compare with {dts_path}")
    return compared


# --- a substituted component -------------------------------------------------------------


def check_substitution_refused():
    """A copy of the installed package with one byte of its component changed must refuse to
    load, with ComponentMismatchError, before anything is compiled."""
    installed = Path(palisade_engine.__file__).resolve().parent
    with tempfile.TemporaryDirectory() as scratch:
        copy = Path(scratch) / "palisade_engine"
        shutil.copytree(installed, copy, ignore=shutil.ignore_patterns("__pycache__"))
        wasm = copy / "palisade-engine.wasm"
        data = bytearray(wasm.read_bytes())
        data[len(data) // 2] ^= 0x01
        wasm.write_bytes(bytes(data))
        probe = (
            "import sys; sys.path.insert(0, sys.argv[1]); import palisade_engine\n"
            "assert palisade_engine.__file__.startswith(sys.argv[1]), palisade_engine.__file__\n"
            "try:\n"
            "    palisade_engine.decide('{}')\n"
            "except palisade_engine.ComponentMismatchError as error:\n"
            "    print(error)\n"
            "else:\n"
            "    sys.exit('a substituted component was run')\n"
        )
        result = subprocess.run(
            [sys.executable, "-c", probe, scratch], capture_output=True, text=True, check=False
        )
        if result.returncode != 0 or "reinstall the package" not in result.stdout:
            fail(f"a substituted component was not refused: {result.stdout}{result.stderr}")


def outcome(decision):
    return f"decision:{decision.backend}" if decision.ok else f"refusal:{decision.code}"


def main():
    if len(sys.argv) != 4:
        fail("usage: run_corpus.py CORPUS.tsv COMPONENT_SHA256 INDEX.D.TS")
    corpus_path, expected_sha256, dts_path = sys.argv[1:]
    with open(corpus_path, encoding="utf-8", newline="\n") as corpus:
        cases = [line.rstrip("\n").split("\t", 1) for line in corpus if line.strip()]
    if not cases or any(len(case) != 2 for case in cases):
        fail(f"{corpus_path} is not a `name<TAB>input-json` file")

    started = time.perf_counter()
    version = check_installed(expected_sha256)
    loaded = time.perf_counter()
    lines = []
    for name, text in cases:
        decision = palisade_engine.decide(text)
        lines.append(f"{name} {decision.digest} {outcome(decision)}")
        check_types(name, decision, text)
        try:
            parsed = json.loads(text)
        except ValueError:
            continue
        if isinstance(parsed, dict) and not any(e["path"] == "input" for e in decision.errors):
            again = palisade_engine.decide(parsed)
            if again.canonical_json != decision.canonical_json:
                fail(f"case {name}: the input as a mapping gave sha256 {again.digest}, as text {decision.digest}")
    finished = time.perf_counter()
    compared = check_dts(dts_path)
    check_substitution_refused()

    sys.stdout.write("".join(line + "\n" for line in lines))
    print(
        f"python package ({version}): {len(lines)} cases in {(finished - loaded) * 1000:.0f} ms, "
        f"each also as a mapping (+ load and compile {(loaded - started) * 1000:.0f} ms); "
        f"types fit every case, {compared} agree with index.d.ts; a substituted component is refused",
        file=sys.stderr,
    )


if __name__ == "__main__":
    main()
