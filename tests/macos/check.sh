#!/usr/bin/env bash
# Checks, on a Mac, that the tools the Seatbelt profile was changed for work inside it and that
# what it closed stays closed (issue 35; docs/backends.md#seatbelt-against-the-peers). This
# repository has no Mac, so nothing here runs in CI: a person with one runs
#
#   cargo build --release -p palisade && bash tests/macos/check.sh [path/to/palisade]
#
# and reads one PASS, FAIL or SKIP line per check (SKIP: the check cannot be made here, say no
# docker socket or no node). Every check that must be refused inside is first shown to work
# outside, on targets this script makes in its own temporary directory. Exit status: the number
# of FAILs.
set -uo pipefail

palisade=${1:-"$(cd "$(dirname "$0")/../.." && pwd)/target/release/palisade"}
if [[ $(uname -s) != Darwin ]]; then
    echo "SKIP everything: this is $(uname -s), not macOS"
    exit 0
fi
[[ -x $palisade ]] || { echo "no palisade at $palisade (build it, or pass its path)"; exit 1; }

work=$(mktemp -d "${TMPDIR:-/tmp}/palisade-macos-check.XXXXXX")
trap 'rm -rf "$work"' EXIT
ws="$work/ws"
mkdir -p "$ws"
export PALISADE_CACHE_DIR="$work/cache"
failures=0

pass() { echo "PASS $1"; }
fail() { echo "FAIL $1${2:+: $2}"; failures=$((failures + 1)); }
skip() { echo "SKIP $1${2:+: $2}"; }

# inside NETWORK CMD...: the command under macos-seatbelt in the workspace; its output in $out,
# its status in $rc.
inside() {
    local network=$1
    shift
    out=$(cd "$ws" && "$palisade" run --quiet --backend macos-seatbelt --network "$network" \
        --workspace "$ws" -- "$@" 2>&1)
    rc=$?
}

# git: dirhelper answers confstr(), so no `confstr() failed` and a clean status.
(cd "$ws" && git init -q && git -c user.name=t -c user.email=t@t commit -q --allow-empty -m x) \
    >/dev/null 2>&1
inside none git status --porcelain
if [[ $rc -eq 0 && $out != *"confstr() failed"* ]]; then pass "git status"; else fail "git status" "$out"; fi

# node: os.cpus() names the CPU (machdep.cpu.brand_string), V8 starts (kern.tcsm_*).
if command -v node >/dev/null; then
    inside none node -e 'const c = require("os").cpus(); if (!c.length || !c[0].model) process.exit(1); console.log(c[0].model)'
    if [[ $rc -eq 0 ]]; then pass "node os.cpus() ($out)"; else fail "node os.cpus()" "$out"; fi
else
    skip "node os.cpus()" "no node"
fi

# ps: the process table (kern.proc.all).
inside none ps -ax
if [[ $rc -eq 0 && $(printf '%s\n' "$out" | wc -l) -gt 2 ]]; then pass "ps -ax"; else fail "ps -ax" "$out"; fi

# /dev/stderr and /dev/stdout.
inside none sh -c 'echo x >/dev/stderr && echo y >/dev/stdout'
if [[ $rc -eq 0 ]]; then pass "echo x >/dev/stderr"; else fail "echo x >/dev/stderr" "$out"; fi

# A pseudo-terminal the command opens itself.
inside none python3 -c 'import pty, os; m, s = pty.openpty(); os.write(s, b"hi\n"); print(os.read(m, 10))'
if [[ $rc -eq 0 ]]; then pass "pty.openpty()"; else fail "pty.openpty()" "$out"; fi

# Python shared memory under its psm_ names.
inside none python3 -c 'from multiprocessing import shared_memory as s; m = s.SharedMemory(create=True, size=16); m.buf[0] = 1; m.close(); m.unlink(); print("ok")'
if [[ $rc -eq 0 ]]; then pass "multiprocessing.shared_memory"; else fail "multiprocessing.shared_memory" "$out"; fi

# loopback-only: a server on 0.0.0.0 is refused (it works outside), one on 127.0.0.1 is not.
bind_any='import socket; s = socket.socket(); s.bind(("0.0.0.0", 0)); s.listen(); print("bound")'
if python3 -c "$bind_any" >/dev/null 2>&1; then
    inside loopback-only python3 -c "$bind_any"
    if [[ $rc -ne 0 ]]; then pass "a server on 0.0.0.0 is refused under loopback-only"; else fail "a server on 0.0.0.0 under loopback-only" "$out"; fi
else
    skip "0.0.0.0 under loopback-only" "binding 0.0.0.0 fails outside too"
fi
inside loopback-only python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); s.listen(); print("bound")'
if [[ $rc -eq 0 ]]; then pass "a server on 127.0.0.1 under loopback-only"; else fail "a server on 127.0.0.1 under loopback-only" "$out"; fi

# A protected path that does not exist cannot be created (the literal rule).
mkdir "$work/agents-outside" && mkdir "$work/agents-outside/AGENTS.md" && rmdir "$work/agents-outside/AGENTS.md"
inside none mkdir AGENTS.md
if [[ $rc -ne 0 && ! -e $ws/AGENTS.md ]]; then pass "mkdir AGENTS.md is refused"; else fail "mkdir AGENTS.md" "$out"; fi
inside none sh -c 'mkdir -p .git/hooks 2>/dev/null; echo x > .git/hooks/post-checkout'
if [[ $rc -ne 0 && ! -e $ws/.git/hooks/post-checkout ]]; then pass "a git hook cannot be planted"; else fail "a git hook was planted" "$out"; fi

# allow-outbound: an IP destination on loopback is reachable, the resolver works, and a
# container daemon's socket is not (where one answers outside).
python3 -m http.server --bind 127.0.0.1 0 >"$work/http.log" 2>&1 &
server=$!
sleep 1
port=$(lsof -a -p "$server" -iTCP -sTCP:LISTEN -Fn 2>/dev/null | sed -n 's/^n.*://p' | head -1)
if [[ -n $port ]]; then
    inside allow-outbound curl -s -o /dev/null -w '%{http_code}' "http://127.0.0.1:$port/"
    if [[ $rc -eq 0 && $out == 200 ]]; then pass "allow-outbound reaches an IP destination"; else fail "allow-outbound to 127.0.0.1:$port" "$out"; fi
else
    skip "allow-outbound to an IP destination" "the test server did not start"
fi
kill "$server" 2>/dev/null
inside allow-outbound python3 -c 'import socket; print(socket.getaddrinfo("localhost", 80)[0][4])'
if [[ $rc -eq 0 ]]; then pass "name resolution under allow-outbound"; else fail "name resolution under allow-outbound" "$out"; fi
docker_sock=/var/run/docker.sock
if [[ -S $docker_sock ]] && curl -s --max-time 5 --unix-socket "$docker_sock" http://localhost/_ping >/dev/null 2>&1; then
    inside allow-outbound curl -s --max-time 5 --unix-socket "$docker_sock" http://localhost/_ping
    if [[ $rc -ne 0 ]]; then pass "docker.sock is unreachable under allow-outbound"; else fail "docker.sock reachable under allow-outbound" "$out"; fi
else
    skip "docker.sock under allow-outbound" "no docker daemon answers at $docker_sock outside"
fi

echo "$failures failed"
exit "$failures"
