#!/usr/bin/env bash
# Runs the README's "Set up and run" block verbatim in a fresh clone with no target/, then
# checks that `cargo install --locked --path host` (the documented install) gives a working
# `palisade`. A README command that does not work on a fresh checkout fails CI here: a warm
# target/ once hid a set-up command that built only the test suite.
#
#   bash .ci/readme-setup.sh
#
# The clone is of the working tree as it is (committed or not; `git stash create` snapshots
# tracked changes without touching them), under PALISADE_SETUP_DIR (default
# /var/lib/palisade-ci), never under /tmp: the sandbox gives commands a private /tmp. It is
# removed afterwards, whatever happened.
set -euo pipefail
cd "$(dirname "$0")/.."

# The block: the first ```sh fence after the "**Set up and run**" line, up to its closing fence.
block="$(awk '
    /^\*\*Set up and run\*\*/ { found = 1; next }
    found && !inside && /^```sh[[:space:]]*$/ { inside = 1; next }
    inside && /^```[[:space:]]*$/ { exit }
    inside { print }
' README.md)"
if [[ -z "$block" ]]; then
    echo "readme-setup: no \`\`\`sh block after **Set up and run** in README.md" >&2
    exit 1
fi

snapshot="$(git stash create)"
snapshot="${snapshot:-HEAD}"
base="${PALISADE_SETUP_DIR:-/var/lib/palisade-ci}"
mkdir -p "$base"
clone="$(mktemp -d "$base/setup.XXXXXX")"
trap 'rm -rf "$clone"' EXIT
git clone -q --no-checkout "$PWD" "$clone"
git -C "$clone" fetch -q "$PWD" "$snapshot"
git -C "$clone" checkout -q --detach FETCH_HEAD

echo "readme-setup: running the README's set-up block in $clone:"
printf '%s\n' "$block" | sed 's/^/    /'
# A user's shell has none of CI's build settings: the block must work without them.
(
    cd "$clone"
    unset CARGO_TARGET_DIR PALISADE_ENGINE_TARGET_DIR CARGO_INCREMENTAL
    bash -c "$block"
) || {
    echo "readme-setup: the README's set-up block failed (above)" >&2
    exit 1
}

echo "readme-setup: cargo install --locked --path host"
(
    cd "$clone"
    unset PALISADE_ENGINE_TARGET_DIR CARGO_INCREMENTAL
    # The release build above is reused: same profile, same package.
    CARGO_TARGET_DIR="$clone/target" cargo install -q --locked --path host --root "$clone/.install"
    installed="$clone/.install/bin/palisade"
    # The sandbox's init is installed beside it (without it palisade runs its own, slower).
    [[ -x "$clone/.install/bin/palisade-init" ]] || {
        echo "readme-setup: cargo install did not install palisade-init beside palisade" >&2
        exit 1
    }
    # From another directory, so nothing of the checkout is found by accident.
    cd /
    "$installed" --version
    "$installed" decide --workspace "$clone" --taskpack "$clone/tests/fixtures/taskpack.yaml" >/dev/null
    out="$("$installed" run --workspace "$clone" --taskpack "$clone/tests/fixtures/taskpack.yaml" -- sh -c 'echo installed ok')"
    [[ "$out" == "installed ok" ]] || {
        echo "readme-setup: the installed palisade printed \`$out\`" >&2
        exit 1
    }
) || {
    echo "readme-setup: \`cargo install --locked --path host\` did not give a working palisade" >&2
    exit 1
}
echo "readme-setup: ok"
