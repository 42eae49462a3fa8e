#!/usr/bin/env bash
# Cross-runtime conformance: the whole conformance corpus through four paths — the native engine
# crate, the Rust host (the component under wasmtime), Python (wasmtime-py) and Node (jco) —
# and every digest must be identical. Needs `tests/xruntime/install.sh` to have run once;
# works offline after that. Uses the component built by this checkout (`palisade component`).
set -euo pipefail
cd "$(dirname "$0")/../.."

die() { printf 'error: %s\n' "$*" >&2; exit 1; }
now_ms() { date +%s%3N; }

python=tests/xruntime/python/.venv/bin/python
jco=tests/xruntime/node/node_modules/.bin/jco
for installed in "$python" "$jco" examples/python/.venv/bin/python examples/node/node_modules/.bin/jco; do
    [[ -x $installed ]] || die "$installed is missing; run tests/xruntime/install.sh (pip and npm installs of the pinned versions)"
done

target=${CARGO_TARGET_DIR:-$PWD/target}
work="$target/xruntime"
rm -rf "$work"
mkdir -p "$work"

echo "== corpus export, native engine and Rust host (tests/conformance.rs)"
PALISADE_XRUNTIME_DIR="$work" cargo test --locked --workspace --test conformance -q \
    -- --exact corpus_export_for_other_runtimes
cases=$(wc -l <"$work/corpus.tsv")

echo "== the component built by this checkout"
# The binary the test build made: `cargo build --bin palisade` alone would resolve features
# without the dev-dependencies and build wasmtime a second time (minutes, and gigabytes).
cargo test --locked --workspace --all-targets --no-run -q
palisade="$target/debug/palisade"
"$palisade" component --out "$work/palisade-engine.wasm"
built=$(sha256sum "$work/palisade-engine.wasm" | cut -d' ' -f1)
[[ $built == "$(cat "$work/component.sha256")" ]] ||
    die "palisade component wrote sha256:$built, but the tests ran sha256:$(cat "$work/component.sha256")"
echo "palisade-engine.wasm sha256:$built"

echo "== python (wasmtime-py)"
start=$(now_ms)
"$python" tests/xruntime/python/run_corpus.py "$work/palisade-engine.wasm" "$work/corpus.tsv" \
    >"$work/python.txt" 2>"$work/python.err" || { cat "$work/python.err" >&2; die "the python runner failed"; }
python_ms=$(($(now_ms) - start))

echo "== node (jco)"
start=$(now_ms)
"$jco" transpile "$work/palisade-engine.wasm" --instantiation sync --name palisade-engine \
    --no-typescript --quiet -o "$work/js" >/dev/null
# The transpiled module is ESM; say so rather than rely on Node's syntax detection.
echo '{"type":"module"}' >"$work/js/package.json"
transpiled=$(now_ms)
node tests/xruntime/node/run-corpus.mjs "$work/js" "$work/corpus.tsv" \
    >"$work/node.txt" 2>"$work/node.err" || { cat "$work/node.err" >&2; die "the node runner failed"; }
node_ms=$(($(now_ms) - transpiled))

echo "== per-runtime wall time for $cases cases"
cat "$work/times.txt"
printf '%s (process %s ms)\n' "$(cat "$work/python.err")" "$python_ms"
printf '%s (process %s ms; jco transpile %s ms)\n' "$(cat "$work/node.err")" "$node_ms" "$((transpiled - start))"

echo "== examples (as their READMEs run them), checked against palisade decide --input"
# Each example prints `digest sha256:<hex>` for its input and writes that input as JSON; the CLI
# must give the same digest for it.
check_example() { # name, output file, input file
    local digest cli
    digest=$(sed -n 's/^digest sha256:\([0-9a-f]\{64\}\)$/\1/p' "$2")
    [[ -n $digest ]] || { cat "$2" >&2; die "the $1 example printed no digest"; }
    cli=$(printf %s "$("$palisade" decide --json --input "$3")" | sha256sum | cut -d' ' -f1)
    [[ $digest == "$cli" ]] || die "the $1 example printed sha256:$digest, palisade decide --input gives sha256:$cli"
    echo "$1 example: sha256:$digest, same as palisade decide --input"
}
cp "$work/palisade-engine.wasm" examples/python/palisade-engine.wasm
(cd examples/python && .venv/bin/python decide.py palisade-engine.wasm --input-json "$work/example-python.json") \
    >"$work/example-python.out"
check_example python "$work/example-python.out" "$work/example-python.json"
cp "$work/palisade-engine.wasm" examples/node/palisade-engine.wasm
(cd examples/node && npm run -s transpile >/dev/null && node decide.mjs --input-json "$work/example-node.json") \
    >"$work/example-node.out"
check_example node "$work/example-node.out" "$work/example-node.json"

echo "== compare"
python3 tests/xruntime/compare.py native="$work/native.txt" rust-host="$work/rust-host.txt" \
    python="$work/python.txt" node="$work/node.txt"
