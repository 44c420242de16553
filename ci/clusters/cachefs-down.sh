#!/usr/bin/env bash
# cachefs-down.sh - take down the cachefs test filesystem (see cachefs-up.sh): end every
# process left on a client, unmount each client's FUSE mount, stop its daemon, remove its
# mount namespace, unmount the bind mounts. Checks at the end that nothing of it is
# mounted (here or in a client) or running. Idempotent: succeeds when already down.
# The export's contents are kept, unless --wipe.
#
# Usage: ci/clusters/cachefs-down.sh [--wipe]
#   --wipe  also remove all state (the export, logs, the venv), so that the next
#           cachefs-up.sh starts from scratch
# Env: MXBATCH_CLUSTER_STATE  state root (default /tmp/mxbatch-clusters)
#      MXBATCH_CACHEFS_WAIT   seconds for each wait (default 30)
set -euo pipefail

HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
# shellcheck source-path=SCRIPTDIR source=lib.sh
. "$HERE/lib.sh"
# shellcheck source-path=SCRIPTDIR source=cachefs/common.sh
. "$HERE/cachefs/common.sh"

TIMEOUT=${MXBATCH_CACHEFS_WAIT:-30}

usage() { sed -n '2,/^set /{/^set /d;s/^# \{0,1\}//;p}' "$0"; }

# unmount PATH: unmount PATH, lazily if it is busy
unmount() {
    umount "$1" 2>/dev/null && return 0
    log "$1 is busy: lazy unmount"
    umount -l "$1"
}

stop_client() {
    local n=$1 ns pid pids=() p
    ns=$(ns_file "$n")
    pid=$(daemon_pid "$n") || pid=
    # whatever runs on the client (left by a test), the daemon apart
    for p in $(client_pids "$n"); do
        [[ $p == "$$" ]] && die "run me in the root mount namespace, not on client $n"
        [[ $p == "$pid" ]] || pids+=("$p")
    done
    if ((${#pids[@]})); then
        log "stopping the processes left on client $n (pid ${pids[*]})"
        stop_pids "client $n processes" 5 "${pids[@]}" \
            || die "pid $(pids_alive "${pids[@]}") on client $n survived SIGKILL"
    fi
    if ns_alive "$n"; then
        # unmounting ends the daemon, unless another namespace holds a copy of the mount
        in_client "$n" umount -c "$MNT" 2>/dev/null || true
        unmount_client "$n"
    fi
    if [[ -n $pid ]] && ! wait_until 5 pids_gone "$pid"; then
        log "client $n's daemon (pid $pid) still runs: SIGTERM"
        kill -CONT "$pid" 2>/dev/null || true   # (if stopped)
        stop_pids "cachefs client $n" 5 "$pid" || die "pid $pid survived SIGKILL"
    fi
    rm -f "$RUN/c$n.pid"
    if ns_alive "$n"; then
        unmount "$ns" || die "cannot unmount $ns"
    fi
    rm -f "$ns"
    log "client $n down"
}

# leftovers: what is still mounted under $BASE here, runs as a daemon, or sees a mount
leftovers() {
    awk -v b="$BASE/" 'index($5 "/", b) == 1 { print "mounted: " $5 }' /proc/self/mountinfo
    pgrep -af -- "--name cachefs-c[0-9]+:$EXPORT " | sed 's/^/running: /' || true
    grep -lF -- " - fuse.cachefs cachefs-c" /proc/[0-9]*/mountinfo 2>/dev/null \
        | xargs -r grep -lF -- ":$EXPORT " | sed 's/^/sees a client mount: /' || true
}

main() {
    local wipe=0 arg n left
    for arg; do
        case $arg in
            --wipe) wipe=1 ;;
            -h | --help) usage; exit 0 ;;
            *) usage >&2; die "unknown argument: $arg" ;;
        esac
    done
    require_root
    if [[ ! -d $BASE ]]; then
        rm -f "$ENV_FILE"
        log "nothing to stop ($BASE does not exist)"
        return 0
    fi
    if [[ -z ${MXBATCH_CACHEFS_LOCKED:-} ]]; then
        lock_cachefs
    fi
    rm -f "$ENV_FILE"
    for n in $(clients_known); do
        stop_client "$n"
    done
    for arg in "$MNT" "$NSDIR"; do
        for n in 1 2 3; do   # (mounted more than once by a racing up)
            [[ -n $(mount_type "$arg") ]] || break
            unmount "$arg" || die "cannot unmount $arg"
        done
    done
    left=$(leftovers)
    [[ -z $left ]] || die "left behind: ${left//$'\n'/; }"
    if ((wipe)); then
        log "wiping $BASE"
        rm -rf "${BASE:?}"
    fi
    log "down"
}

main "$@"
