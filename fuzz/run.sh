#!/usr/bin/env bash
# Builds every fuzz target and runs each for SECONDS (default 30), then prints executions and
# coverage per target. Exits non-zero if any target found a failing input (saved under
# fuzz/artifacts/<target>/). docs/fuzzing.md says what each target asserts.
#
#   fuzz/run.sh [SECONDS] [TARGET...]
#
# libFuzzer's sanitizer coverage needs rustc's unstable `-Z` flags. These machines fetch no
# toolchain but the pinned one, so the pinned stable rustc (rust-toolchain.toml) is told to
# accept them with RUSTC_BOOTSTRAP=1, for the fuzz crate only; PALISADE_FUZZ_TOOLCHAIN=nightly
# uses an installed nightly instead. cargo-fuzz is installed if missing. Corpora persist in
# fuzz/corpus/<target>/ between runs (gitignored); every run first adds the seeds each target
# makes from the conformance corpus and the fixtures.
set -euo pipefail
cd "$(dirname "$0")"

seconds=${1:-30}
shift || true
cargo_fuzz_version=0.13.2
if [[ -n ${PALISADE_FUZZ_TOOLCHAIN:-} ]]; then
    toolchain=("+$PALISADE_FUZZ_TOOLCHAIN")
else
    toolchain=()
    export RUSTC_BOOTSTRAP=1
fi

section() { printf '\n=== %s (%ss)\n' "$1" "$SECONDS"; }

section "toolchain"
cargo "${toolchain[@]}" --version
rustc "${toolchain[@]}" --version
if ! cargo fuzz --version 2>/dev/null | grep -q "$cargo_fuzz_version"; then
    # cargo-fuzz itself needs no unstable flags; unoptimised it builds in about 25 s instead
    # of minutes, and its own speed does not matter.
    (unset RUSTC_BOOTSTRAP; cargo install --locked --debug --version "$cargo_fuzz_version" cargo-fuzz)
fi

# A checkout whose workspace builds elsewhere (.ci/run does that under sandbox-private
# directories) builds its fuzz targets there too.
if [[ -n ${CARGO_TARGET_DIR:-} ]]; then
    export CARGO_TARGET_DIR="$CARGO_TARGET_DIR/fuzz"
fi

section "build"
# The fuzz crate's own lock file must be current, as `--locked` checks the workspace's.
cargo "${toolchain[@]}" metadata --locked --format-version 1 >/dev/null
cargo "${toolchain[@]}" fuzz build
if (($#)); then
    targets=("$@")
else
    mapfile -t targets < <(cargo "${toolchain[@]}" fuzz list)
fi

# Per input: 10 s and 2 GiB at most (and no single allocation over 512 MiB); a slower or
# bigger input is a failure, saved like a crash.
limits=(-timeout=10 -rss_limit_mb=2048 -malloc_limit_mb=512)
failed=()
summary=()
for target in "${targets[@]}"; do
    section "fuzz $target for ${seconds}s"
    mkdir -p "corpus/$target"
    log=$(mktemp)
    status=0
    PALISADE_FUZZ_SEEDS="corpus/$target" cargo "${toolchain[@]}" fuzz run "$target" -- \
        -max_total_time="$seconds" "${limits[@]}" -print_final_stats=1 >"$log" 2>&1 || status=$?
    grep -E '^(#[0-9]+[[:space:]]+(INITED|DONE)|==[0-9]+==|SUMMARY|stat::number)' "$log" || true
    execs=$(sed -n 's/^stat::number_of_executed_units: *//p' "$log" | tail -1)
    final=$(grep -E '^#[0-9]+[[:space:]]+DONE' "$log" | tail -1 || true)
    cov=$(sed -n 's/.* cov: \([0-9]*\).*/\1/p' <<<"$final")
    ft=$(sed -n 's/.* ft: \([0-9]*\).*/\1/p' <<<"$final")
    corpus=$(find "corpus/$target" -type f | wc -l)
    if ((status != 0)) || grep -qE 'panicked|ERROR: libFuzzer|SUMMARY: (Address|libFuzzer)' "$log"; then
        failed+=("$target")
        summary+=("$(printf '%-18s FAILED (see fuzz/artifacts/%s/)' "$target" "$target")")
        tail -n 25 "$log"
    else
        summary+=("$(printf '%-18s %12s execs  cov %6s  ft %6s  corpus %5s' "$target" "${execs:-?}" "${cov:-?}" "${ft:-?}" "$corpus")")
    fi
    rm -f "$log"
done

section "summary (${seconds}s per target)"
printf '%s\n' "${summary[@]}"
if ((${#failed[@]})); then
    printf 'failing inputs found by: %s\n' "${failed[*]}" >&2
    exit 1
fi
