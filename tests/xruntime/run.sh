#!/usr/bin/env bash
# Cross-runtime conformance: the whole conformance corpus through seven paths — the native engine
# crate, the Rust host (the component under wasmtime), Python (wasmtime-py) and Node (jco), and
# the Python and npm packages (packages/build.sh), each installed from its built artefact into a
# fresh environment, and the Python package once more as `pip install packages/python` installs
# it — and every digest must be identical. Needs `tests/xruntime/install.sh` to have run once;
# works offline after that. Uses the component built by this checkout (`palisade component`).
set -euo pipefail
cd "$(dirname "$0")/../.."
root=$PWD

die() { printf 'error: %s\n' "$*" >&2; exit 1; }
now_ms() { date +%s%3N; }

python=tests/xruntime/python/.venv/bin/python
pip=tests/xruntime/python/.venv/bin/pip
mypy=tests/xruntime/python/.venv/bin/mypy
wheelhouse=tests/xruntime/python/.venv/wheelhouse
jco=tests/xruntime/node/node_modules/.bin/jco
tsc=tests/xruntime/node/node_modules/.bin/tsc
for installed in "$python" "$pip" "$mypy" "$wheelhouse" "$jco" "$tsc"; do
    [[ -e $installed ]] || die "$installed is missing; run tests/xruntime/install.sh (pip and npm installs of the pinned versions)"
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

echo "== packages: built (packages/build.sh), installed from the artefacts, the corpus through their APIs"
packages_start=$(now_ms)
bash packages/build.sh --component "$work/palisade-engine.wasm" >"$work/packages.out" ||
    { cat "$work/packages.out"; die "packages/build.sh failed"; }
cat "$work/packages.out"
wheel=$(echo "$target"/packages/palisade_engine-*.whl)
tarball=$(echo "$target"/packages/palisade-engine-*.tgz)
[[ -f $wheel && -f $tarball ]] || die "packages/build.sh left no single wheel and tarball in $target/packages"
built_packages=$(now_ms)
# Node: an empty project installs the tarball (no dependencies: nothing else is fetched), and a
# file of that project imports the package by name, as a user's would.
project="$work/npm-project"
mkdir -p "$project"
echo '{"private": true, "type": "module"}' >"$project/package.json"
(cd "$project" && npm install --offline --no-audit --no-fund --loglevel=error "$tarball" >/dev/null)
cp tests/xruntime/packages/run-corpus.mjs tests/xruntime/packages/consumer.ts "$project/"
node "$project/run-corpus.mjs" "$work/corpus.tsv" "$built" \
    >"$work/node-package.txt" 2>"$work/node-package.err" || { cat "$work/node-package.err" >&2; die "the node package runner failed"; }
# The declarations alone (no Node or DOM types): they compile, and code written against them does.
(cd "$project" && "$root/$tsc" --noEmit --strict --module nodenext --moduleResolution nodenext \
    --target es2022 --lib es2022 consumer.ts) || die "the npm package's types do not check (above)"
node_package=$(now_ms)
# Python: a fresh virtual environment gets the wheel, and wasmtime from install.sh's wheelhouse
# (no index). The pinned pip of tests/xruntime/python installs into it (`--python`): seeding the
# environment with its own pip would take longer than everything else here.
venv="$work/python-venv"
python3 -m venv --without-pip "$venv"
"$pip" --python "$venv/bin/python" install --quiet --disable-pip-version-check \
    --no-index --find-links "$wheelhouse" "$wheel"
"$venv/bin/python" tests/xruntime/packages/run_corpus.py "$work/corpus.tsv" "$built" \
    "$project/node_modules/palisade-engine/index.d.ts" \
    >"$work/python-package.txt" 2>"$work/python-package.err" || { cat "$work/python-package.err" >&2; die "the python package runner failed"; }
# The installed package's hints (py.typed), and code written against them, the example's too.
mypy_run=("$mypy" --strict --python-executable "$venv/bin/python" --cache-dir "$target/mypy-cache" --no-error-summary)
"${mypy_run[@]}" -p palisade_engine || die "the python package's hints do not check (above)"
"${mypy_run[@]}" tests/xruntime/packages/consumer.py examples/python/decide.py ||
    die "code written against the python package does not type-check (above)"
python_package=$(now_ms)
# Python, the other way: as a user installs it from a checkout — the component placed with
# `palisade component --out`, then `pip install` of the package's directory (a copy of
# packages/ here, so the checkout stays as it is). pip builds it in an isolated environment with
# the hatchling of its [build-system] requires, from the wheelhouse (no index). The wheel pip
# builds that way is the wheel packages/build.sh built, byte for byte.
source="$work/pip-source/packages"
mkdir -p "$source/python"
cp packages/VERSION "$source/"
cp -R packages/python/. "$source/python/"
rm -rf "$source/python/palisade_engine/palisade-engine.wasm" "$source/python/dist" "$source/python/.venv"
"$palisade" component --out "$source/python/palisade_engine/palisade-engine.wasm"
pip_offline=(--quiet --disable-pip-version-check --no-index --find-links "$wheelhouse")
"$pip" wheel "${pip_offline[@]}" --no-deps --wheel-dir "$work/pip-wheel" "$source/python"
cmp "$work/pip-wheel/$(basename "$wheel")" "$wheel" ||
    die "pip built $(echo "$work"/pip-wheel/*.whl), not the wheel packages/build.sh built ($wheel)"
pip_venv="$work/python-pip-venv"
python3 -m venv --without-pip "$pip_venv"
"$pip" --python "$pip_venv/bin/python" install "${pip_offline[@]}" "$source/python"
"$pip_venv/bin/python" tests/xruntime/packages/run_corpus.py "$work/corpus.tsv" "$built" \
    "$project/node_modules/palisade-engine/index.d.ts" \
    >"$work/python-pip.txt" 2>"$work/python-pip.err" || { cat "$work/python-pip.err" >&2; die "the python package runner failed with pip install packages/python"; }
python_pip=$(now_ms)

echo "== per-runtime wall time for $cases cases"
cat "$work/times.txt"
printf '%s (process %s ms)\n' "$(cat "$work/python.err")" "$python_ms"
printf '%s (process %s ms; jco transpile %s ms)\n' "$(cat "$work/node.err")" "$node_ms" "$((transpiled - start))"
cat "$work/python-package.err" "$work/node-package.err" "$work/python-pip.err"
printf 'packages: built in %s ms; npm install, corpus and tsc %s ms; venv, pip install, corpus and mypy %s ms; pip wheel and pip install of packages/python, venv and corpus %s ms\n' \
    "$((built_packages - packages_start))" "$((node_package - built_packages))" "$((python_package - node_package))" "$((python_pip - python_package))"

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
# Python: with the fresh environment above, into which the wheel was installed as the README
# installs it. Node: the README's `npm install --no-save` of the tarball into examples/node.
(cd examples/python && "$venv/bin/python" decide.py --input-json "$work/example-python.json") \
    >"$work/example-python.out"
check_example python "$work/example-python.out" "$work/example-python.json"
(cd examples/node && npm install --no-save --offline --no-audit --no-fund --loglevel=error "$tarball" >/dev/null &&
    node decide.mjs --input-json "$work/example-node.json") >"$work/example-node.out"
check_example node "$work/example-node.out" "$work/example-node.json"

echo "== signed statements, checked by securesystemslib (tests/xruntime/dsse/verify.py)"
# A key of its own, three sealed decisions, their DSSE envelopes exported by replay: each
# verifies with securesystemslib against the public key file, and none does with one byte of its
# payload, payload type or signature changed.
dsse="$work/dsse"
mkdir -p "$dsse/home" "$dsse/ws"
(
    cd "$dsse/ws"
    export HOME="$dsse/home"
    unset XDG_CONFIG_HOME
    "$palisade" key init >/dev/null
    "$palisade" decide --record "$dsse/audit.jsonl" >/dev/null
    "$palisade" decide --network loopback-only --record "$dsse/audit.jsonl" >/dev/null
    "$palisade" decide --deny-read '~/x' --record "$dsse/audit.jsonl" >/dev/null
    "$palisade" replay "$dsse/audit.jsonl" --export-in-toto "$dsse/envelopes.jsonl" \
        --trusted-key "$dsse/home/.config/palisade/keys/audit-signing.pub" >/dev/null
) || die "could not make and export sealed records in $dsse"
"$python" tests/xruntime/dsse/verify.py "$dsse/envelopes.jsonl" "$dsse/home/.config/palisade/keys/audit-signing.pub"
"$python" tests/xruntime/dsse/verify.py --tampered "$dsse/envelopes.jsonl" "$dsse/home/.config/palisade/keys/audit-signing.pub"

echo "== compare"
python3 tests/xruntime/compare.py native="$work/native.txt" rust-host="$work/rust-host.txt" \
    python="$work/python.txt" node="$work/node.txt" \
    python-pkg="$work/python-package.txt" node-pkg="$work/node-package.txt" \
    python-pip="$work/python-pip.txt"
