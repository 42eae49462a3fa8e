#!/usr/bin/env bash
# Installs the pinned Python and Node packages the cross-runtime run and the package builds use:
# - tests/xruntime/python/.venv: wasmtime-py, mypy, build and hatchling (versions from
#   requirements.txt), and a wheelhouse of what the palisade-engine package requires to be built
#   and run (packages/python/pyproject.toml: hatchling and wasmtime, at the same pins), from which
#   run.sh installs the built wheel, and `pip install`s the package's directory, into fresh
#   environments with no package index;
# - tests/xruntime/node/node_modules: jco and TypeScript (`npm ci`, versions from
#   package-lock.json). The npm package has no dependencies, so it installs from its tarball
#   alone.
# Everything they install is gitignored (`.venv/`, `node_modules/`); after this, nothing needs
# the network. Re-running is cheap: an environment whose pins are already installed is left alone.
set -euo pipefail
cd "$(dirname "$0")/../.."

python_dir=tests/xruntime/python
node_dir=tests/xruntime/node

stamp="$python_dir/.venv/installed-requirements.txt"
if [[ -f $stamp ]] && cmp -s "$stamp" <(cat "$python_dir/requirements.txt" packages/python/pyproject.toml); then
    echo "$python_dir: python environment up to date"
else
    rm -rf "$python_dir/.venv"
    python3 -m venv "$python_dir/.venv"
    pip=("$python_dir/.venv/bin/pip" --quiet --disable-pip-version-check)
    "${pip[@]}" install -r "$python_dir/requirements.txt"
    # The package's [build-system] requires and dependencies, each pinned, and pinned the same
    # here: the wheel packages/build.sh builds with this environment's hatchling is the wheel
    # `pip install packages/python` builds with the wheelhouse's.
    "$python_dir/.venv/bin/python" - packages/python/pyproject.toml "$python_dir/requirements.txt" \
        >"$python_dir/.venv/package-requirements.txt" <<'PY'
import sys
try:
    import tomllib
except ImportError:  # Python < 3.11: build and hatchling bring tomli
    import tomli as tomllib
pyproject, pins = sys.argv[1:]
with open(pyproject, "rb") as f:
    project = tomllib.load(f)
with open(pins, encoding="utf-8") as f:
    pinned = {line.strip().lower() for line in f if line.strip() and not line.startswith("#")}
for requirement in project["build-system"]["requires"] + project["project"]["dependencies"]:
    if "==" not in requirement or requirement.strip().lower() not in pinned:
        sys.exit(f"error: {pyproject} requires `{requirement}`; {pins} must pin exactly that")
    print(requirement)
PY
    "${pip[@]}" download --only-binary=:all: --dest "$python_dir/.venv/wheelhouse" \
        -r "$python_dir/.venv/package-requirements.txt" -c "$python_dir/requirements.txt"
    cat "$python_dir/requirements.txt" packages/python/pyproject.toml >"$stamp"
    echo "$python_dir: $("$python_dir/.venv/bin/python" -c 'import importlib.metadata as m; print(", ".join(f"{p} {m.version(p)}" for p in ("wasmtime", "mypy", "build", "hatchling")))'); wheelhouse: $(cd "$python_dir/.venv/wheelhouse" && echo *.whl)"
fi

stamp="$node_dir/node_modules/.installed-package-lock.json"
if [[ -f $stamp ]] && cmp -s "$stamp" "$node_dir/package-lock.json"; then
    echo "$node_dir: node modules up to date"
else
    (cd "$node_dir" && npm ci --no-audit --no-fund --loglevel=error)
    cp "$node_dir/package-lock.json" "$stamp"
    echo "$node_dir: jco $(cd "$node_dir" && node_modules/.bin/jco --version), typescript $(cd "$node_dir" && node_modules/.bin/tsc --version | sed "s/^Version //")"
fi
