#!/usr/bin/env bash
# Builds the engine's packages for other runtimes from one engine component, into target/packages/:
#   palisade_engine-<version>-py3-none-any.whl   Python: the component and a typed API over wasmtime-py
#   palisade-engine-<version>.tgz                npm: the component transpiled by jco, and its types
# <version> is packages/VERSION plus the component's digest: `0.1.0+sha256.<first 12 hex>`
# (docs/packages.md says why). Each package checks the digest of what it loads.
#
# Usage: bash packages/build.sh [--component FILE | --palisade BINARY]
# Without either, the component is `palisade component` of the newer of target/release/palisade
# and target/debug/palisade. Needs tests/xruntime/install.sh (once): `python -m build` with its
# pinned build and hatchling writes the wheel, its jco and `npm pack` the tarball, so building
# needs no network.
set -euo pipefail
cd "$(dirname "$0")/.."

die() { printf 'error: %s\n' "$*" >&2; exit 1; }
usage() { sed -n '2,12p' "$0" | sed 's/^# \{0,1\}//'; }

component=
palisade=
while (($#)); do
    case $1 in
        --component) [[ $# -ge 2 ]] || die "--component needs a file"; component=$2; shift 2 ;;
        --palisade) [[ $# -ge 2 ]] || die "--palisade needs a binary"; palisade=$2; shift 2 ;;
        -h | --help) usage; exit 0 ;;
        *) die "unknown argument \`$1\` (usage: bash packages/build.sh [--component FILE | --palisade BINARY])" ;;
    esac
done
[[ -z $component || -z $palisade ]] || die "--component and --palisade do not combine"

jco=tests/xruntime/node/node_modules/.bin/jco
[[ -x $jco ]] || die "$jco is missing; run tests/xruntime/install.sh (the pinned jco)"
python=tests/xruntime/python/.venv/bin/python
"$python" -c 'import build, hatchling' 2>/dev/null ||
    die "$python with build and hatchling is missing; run tests/xruntime/install.sh (the pinned build and hatchling)"

target=${CARGO_TARGET_DIR:-$PWD/target}
out="$target/packages"
stage="$out/build"
rm -rf "$stage"
mkdir -p "$stage"

if [[ -z $component ]]; then
    if [[ -z $palisade ]]; then
        for candidate in "$target/release/palisade" "$target/debug/palisade"; do
            if [[ -x $candidate ]] && [[ -z $palisade || $candidate -nt $palisade ]]; then
                palisade=$candidate
            fi
        done
        [[ -n $palisade ]] || die "no palisade in $target/release or $target/debug: build it (cargo build --release --locked -p palisade) or pass --component FILE"
    fi
    "$palisade" component --out "$stage/palisade-engine.wasm"
    component="$stage/palisade-engine.wasm"
    echo "component from $palisade"
fi
[[ -f $component ]] || die "$component is not a file"
digest=$(sha256sum "$component" | cut -d' ' -f1)
base=$(<packages/VERSION)
[[ $base =~ ^[0-9]+\.[0-9]+\.[0-9]+$ ]] || die "packages/VERSION is \`$base\`, not MAJOR.MINOR.PATCH"
version="$base+sha256.${digest:0:12}"
echo "palisade-engine $version (component sha256:$digest)"

# Artefacts of earlier builds (other components) would be found by a glob; keep only this one.
rm -f "$out"/palisade_engine-*.whl "$out"/palisade-engine-*.tgz

# The Python package: a copy of packages/python (and packages/VERSION beside it, which its
# version starts with) with the component placed, as `palisade component --out` places it, so the
# sources stay as they are; hatch_build.py names the version and writes the digest into the wheel.
# Without isolation, the tests environment's pinned hatchling builds it (no index needed).
mkdir -p "$stage/python"
cp packages/VERSION "$stage/"
cp -R packages/python/. "$stage/python/"
rm -rf "$stage/python/dist" "$stage/python/.venv"
cp "$component" "$stage/python/palisade_engine/palisade-engine.wasm"
"$python" -m build --wheel --no-isolation --outdir "$out" "$stage/python" >"$stage/python-build.log" 2>&1 ||
    { cat "$stage/python-build.log" >&2; die "python -m build failed (above)"; }
wheel="$out/palisade_engine-$version-py3-none-any.whl"
[[ -f $wheel ]] || die "python -m build wrote no $wheel (its output: $stage/python-build.log)"

# The npm package: the sources, jco's output for the component, and the digests to check.
node="$stage/node"
mkdir -p "$node/engine"
cp packages/node/package.json packages/node/index.js packages/node/index.d.ts packages/node/README.md "$node/"
# Sync instantiation: the package compiles the core module once and instantiates the component
# afresh for every call, as the `palisade` CLI does.
"$jco" transpile "$component" --instantiation sync --name palisade-engine --no-typescript \
    --quiet -o "$stage/jco" >/dev/null
# (It writes TypeScript declarations of the raw WIT types even so; the package declares its own.)
transpiled=$(cd "$stage/jco" && find . -type f ! -name '*.d.ts' | sort | tr '\n' ' ')
[[ $transpiled == "./palisade-engine.core.wasm ./palisade-engine.js " ]] ||
    die "jco wrote $transpiled; the package ships exactly palisade-engine.js and palisade-engine.core.wasm"
cp "$stage/jco/palisade-engine.js" "$stage/jco/palisade-engine.core.wasm" "$node/engine/"
# The core module is the component's own, byte for byte (jco extracts it; it does not rewrite it).
python3 -c 'import sys; sys.exit(open(sys.argv[2], "rb").read() not in open(sys.argv[1], "rb").read())' \
    "$component" "$node/engine/palisade-engine.core.wasm" ||
    die "jco's palisade-engine.core.wasm is not a module of the component"
# The component imports nothing, so the glue imports nothing either (no WASI shims, so the
# package has no dependencies). If the component ever gains imports, this says so.
if grep -nE '^[[:space:]]*import[[:space:]]|[^.[:alnum:]_]import\(|require\(' "$node/engine/palisade-engine.js" >&2; then
    die "jco's glue imports modules (above): the component gained imports; add @bytecodealliance/preview2-shim, pinned at the version jco uses, to packages/node/package.json"
fi
{
    echo "// Generated by packages/build.sh: the component this package was built from, and the"
    echo "// SHA-256 of each file jco transpiled it to, checked before any of them runs."
    echo "export const COMPONENT_SHA256 = '$digest';"
    echo "export const VERSION = '$version';"
    echo "export const FILES = {"
    for file in palisade-engine.core.wasm palisade-engine.js; do
        echo "  '$file': '$(sha256sum "$node/engine/$file" | cut -d' ' -f1)',"
    done
    echo "};"
} >"$node/component.js"
# npm keeps build metadata in the version (semver `+...`); `npm version` would need a git repo.
node -e '
    const fs = require("node:fs");
    const [file, version] = process.argv.slice(1);
    const manifest = JSON.parse(fs.readFileSync(file, "utf8"));
    manifest.version = version;
    fs.writeFileSync(file, JSON.stringify(manifest, null, 2) + "\n");
' "$node/package.json" "$version"
tarball=$(cd "$node" && npm pack --offline --ignore-scripts --silent --pack-destination "$out")
tarball="$out/$tarball"
[[ -f $tarball ]] || die "npm pack wrote no $tarball"

for artefact in "$wheel" "$tarball"; do
    printf '%s  %s (%s KiB)\n' "$(sha256sum "$artefact" | cut -d' ' -f1)" "$artefact" "$(($(stat -c %s "$artefact") / 1024))"
done
