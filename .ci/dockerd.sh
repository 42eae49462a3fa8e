#!/usr/bin/env bash
# A private Docker daemon for Palisade's tests and for developers:
#
#   eval "$(bash .ci/dockerd.sh start)"   # starts it (if needed) and prints `export DOCKER_HOST=…`
#   bash .ci/dockerd.sh status            # exits 0 when it answers `/_ping`
#   bash .ci/dockerd.sh stop              # stops it and removes nothing but its pid file
#
# The daemon listens on its own socket with its own data and exec roots, so it never touches
# a system daemon's containers or images, and it changes no host firewall or bridge:
# `--iptables=false --ip6tables=false --bridge=none` (containers get `--network none` or the
# host's loopback-free private namespace anyway; no registry is reachable here).
#
# Everything lives under PALISADE_DOCKERD_DIR (default /var/lib/palisade-dockerd): `data/`
# (images, containers), `dockerd.pid`, `dockerd.log`. The exec root and the socket live under
# PALISADE_DOCKERD_RUN (default /run/palisade-dockerd): unix socket paths must stay short.
# Needs root (dockerd does); installs nothing — `.ci/run` installs `docker.io` first.
set -euo pipefail

DIR="${PALISADE_DOCKERD_DIR:-/var/lib/palisade-dockerd}"
RUN="${PALISADE_DOCKERD_RUN:-/run/palisade-dockerd}"
SOCK="$RUN/docker.sock"
PIDFILE="$DIR/dockerd.pid"
LOG="$DIR/dockerd.log"
# How long `start` waits for `/_ping` before giving up (dockerd takes ~1-3 s here).
WAIT_SECONDS="${PALISADE_DOCKERD_WAIT:-60}"

say() { printf 'dockerd.sh: %s\n' "$*" >&2; }

ping() {
    # `docker version` would need the CLI to negotiate; the raw ping needs only curl or the CLI.
    DOCKER_HOST="unix://$SOCK" timeout 5 docker version --format '{{.Server.Version}}' >/dev/null 2>&1
}

running_pid() {
    [[ -s "$PIDFILE" ]] || return 1
    local pid
    pid="$(cat "$PIDFILE")"
    [[ "$pid" =~ ^[0-9]+$ ]] || return 1
    # The pid must still be a dockerd (pids are reused).
    [[ "$(cat "/proc/$pid/comm" 2>/dev/null)" == dockerd ]] || return 1
    echo "$pid"
}

start() {
    if running_pid >/dev/null && ping; then
        say "already running (pid $(running_pid)) on $SOCK"
        echo "export DOCKER_HOST=unix://$SOCK"
        return 0
    fi
    command -v dockerd >/dev/null || { say "dockerd is not installed (apt-get install docker.io)"; exit 1; }
    mkdir -p "$DIR/data" "$RUN"
    chmod 0711 "$DIR" "$RUN"
    rm -f "$PIDFILE"
    say "starting dockerd on $SOCK (log: $LOG)"
    # setsid: the daemon outlives this script and ignores the terminal's signals.
    setsid dockerd \
        --host "unix://$SOCK" \
        --data-root "$DIR/data" \
        --exec-root "$RUN/exec" \
        --pidfile "$PIDFILE" \
        --iptables=false --ip6tables=false --bridge=none \
        --userland-proxy=false \
        >>"$LOG" 2>&1 </dev/null &
    local deadline=$((SECONDS + WAIT_SECONDS))
    until ping; do
        if ((SECONDS >= deadline)); then
            say "dockerd did not answer within ${WAIT_SECONDS}s; last log lines:"
            tail -n 20 "$LOG" >&2 || true
            stop || true
            exit 1
        fi
        if ! running_pid >/dev/null && ! kill -0 $! 2>/dev/null; then
            say "dockerd exited; last log lines:"
            tail -n 20 "$LOG" >&2 || true
            exit 1
        fi
        sleep 0.2
    done
    say "running (pid $(running_pid)), $(DOCKER_HOST="unix://$SOCK" docker version --format 'server {{.Server.Version}}, api {{.Server.APIVersion}}')"
    echo "export DOCKER_HOST=unix://$SOCK"
}

stop() {
    local pid
    if ! pid="$(running_pid)"; then
        say "not running"
        return 0
    fi
    # Containers palisade left (it should leave none) go with the daemon's own shutdown.
    kill -TERM "$pid"
    local deadline=$((SECONDS + 30))
    while kill -0 "$pid" 2>/dev/null; do
        if ((SECONDS >= deadline)); then
            say "dockerd (pid $pid) ignored SIGTERM for 30 s; killing it"
            kill -KILL "$pid" 2>/dev/null || true
            break
        fi
        sleep 0.2
    done
    rm -f "$PIDFILE"
    say "stopped"
}

case "${1:-}" in
    start) start ;;
    stop) stop ;;
    status) ping && say "answering on $SOCK" ;;
    socket) echo "$SOCK" ;;
    *)
        echo "usage: $0 start|stop|status|socket" >&2
        exit 2
        ;;
esac
