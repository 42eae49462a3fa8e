#!/usr/bin/env bash
# Installs the pinned Python and Node packages the cross-runtime run and the examples use:
# a virtual environment per Python directory (pip, versions from requirements.txt) and
# node_modules per Node directory (`npm ci`, versions from package-lock.json). Everything they
# install is gitignored (`.venv/`, `node_modules/`); after this, nothing needs the network.
# Re-running is cheap: an environment whose pins are already installed is left alone.
set -euo pipefail
cd "$(dirname "$0")/../.."

python_dirs=(tests/xruntime/python examples/python)
node_dirs=(tests/xruntime/node examples/node)

for dir in "${python_dirs[@]}"; do
    stamp="$dir/.venv/installed-requirements.txt"
    if [[ -f $stamp ]] && cmp -s "$stamp" "$dir/requirements.txt"; then
        echo "$dir: python environment up to date"
        continue
    fi
    rm -rf "$dir/.venv"
    python3 -m venv "$dir/.venv"
    "$dir/.venv/bin/pip" install --quiet --disable-pip-version-check -r "$dir/requirements.txt"
    cp "$dir/requirements.txt" "$stamp"
    echo "$dir: $("$dir/.venv/bin/python" -c 'import wasmtime, importlib.metadata as m; print("wasmtime", m.version("wasmtime"))')"
done

for dir in "${node_dirs[@]}"; do
    stamp="$dir/node_modules/.installed-package-lock.json"
    if [[ -f $stamp ]] && cmp -s "$stamp" "$dir/package-lock.json"; then
        echo "$dir: node modules up to date"
        continue
    fi
    (cd "$dir" && npm ci --no-audit --no-fund --loglevel=error)
    cp "$dir/package-lock.json" "$stamp"
    echo "$dir: jco $(cd "$dir" && node_modules/.bin/jco --version)"
done
