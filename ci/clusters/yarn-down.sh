#!/bin/bash
# yarn-down.sh - stop the single-host YARN cluster started by yarn-up.sh.
# Idempotent: does nothing (and succeeds) when the cluster is already down.
#   yarn-down.sh [--wipe]   --wipe also removes the state dir (config, NM dirs, logs);
#                           the jar cache (MXBATCH_YARN_CACHE) is always kept.
#   MXBATCH_CLUSTER_STATE   state root used by yarn-up.sh (default /tmp/mxbatch-clusters)
#   MXBATCH_YARN_NM_GRACE   seconds between SIGTERM and SIGKILL for the NodeManager
#                           (default 5). After SIGTERM it kills its containers at once,
#                           then sits in hard-coded waits (~7 s for applications whose
#                           logs it keeps, 10 s for its log-deletion scheduler): nothing
#                           is lost by cutting that short, and leftovers are swept below.
# no -e: a failed step must not stop the rest of the cleanup
set -uo pipefail

HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
# shellcheck source-path=SCRIPTDIR source=lib.sh
. "$HERE/lib.sh"
# shellcheck source-path=SCRIPTDIR source=yarn-common.sh
. "$HERE/yarn-common.sh"

NM_GRACE=${MXBATCH_YARN_NM_GRACE:-5}
RM_GRACE=30
WIPE=0

words() { tr '\n' ' ' <<<"$1" | sed 's/ *$//'; }

# live_app_ids -> application ids the RM still runs (REST, no JVM needed)
live_app_ids() {
    curl -sf --max-time 5 "$RM_URL/ws/v1/cluster/apps?states=NEW,NEW_SAVING,SUBMITTED,ACCEPTED,RUNNING" \
        2>/dev/null | grep -o '"id":"application_[0-9_]*"' | cut -d'"' -f4 | sort -u
}

no_live_apps() { [ -z "$(live_app_ids)" ]; }

kill_apps() {
    local ids id
    pid_of resourcemanager "$RM_CLASS" >/dev/null || return 0
    ids=$(live_app_ids)
    [ -n "$ids" ] || return 0
    log "killing applications: $(words "$ids")"
    for id in $ids; do
        curl -sf --max-time 5 -X PUT -H 'Content-Type: application/json' -d '{"state":"KILLED"}' \
            "$RM_URL/ws/v1/cluster/apps/$id/state?user.name=$(id -un)" >/dev/null \
            || log "REST kill of $id failed"
    done
    wait_until 20 no_live_apps || log "applications still live after 20s: $(words "$(live_app_ids)")"
}

# stop_daemon NAME CLASS GRACE
stop_daemon() {
    local name=$1 class=$2 grace=$3 pid
    if pid=$(pid_of "$name" "$class"); then
        log "stopping $name (pid $pid)"
        stop_pids "$name" "$grace" "$pid"
    fi
    rm -f "$RUN/$name.pid"
}

# container_pids -> live processes started by our NodeManager: cwd in its local dirs, or
# the LOG_DIRS the NM put into every container's environment
container_pids() {
    local p cwd
    [ -d "$STATE/nm-local" ] || return 0
    for p in /proc/[0-9]*; do
        p=${p#/proc/}
        [ "$p" = $$ ] && continue
        cwd=$(readlink "/proc/$p/cwd" 2>/dev/null) || continue
        case "$cwd" in
            "$STATE/nm-local"/*) echo "$p"; continue ;;
        esac
        tr '\0' '\n' 2>/dev/null <"/proc/$p/environ" | grep -q "^LOG_DIRS=$STATE/nm-logs/" \
            && echo "$p"
    done
}

kill_leftover_containers() {
    local pids
    pids=$(container_pids)
    [ -n "$pids" ] || return 0
    log "terminating leftover container processes: $(words "$pids")"
    # shellcheck disable=SC2086  # one word per pid
    stop_pids "container processes" 5 $pids
    return 0
}

# stop_skein_driver: a global skein driver (skein.Client.start_global_driver) started
# with our SKEIN_CONFIG leaves its address and pid in STATE/skein/driver
stop_skein_driver() {
    local f=$STATE/skein/driver pid
    [ -s "$f" ] || return 0
    pid=$(sed -n 's/.*"pid": *\([0-9]*\).*/\1/p' "$f")
    if [ -n "$pid" ] && tr '\0' ' ' 2>/dev/null <"/proc/$pid/cmdline" | grep -qF com.anaconda.skein.Driver; then
        log "stopping the global skein driver (pid $pid)"
        stop_pids skein-driver 10 "$pid"
    fi
    rm -f "$f"
}

main() {
    case "${1:-}" in
        --wipe) WIPE=1 ;;
        "") ;;
        *) echo "usage: $0 [--wipe]" >&2; exit 2 ;;
    esac
    kill_apps
    stop_daemon nodemanager "$NM_CLASS" "$NM_GRACE"
    stop_daemon resourcemanager "$RM_CLASS" "$RM_GRACE"
    kill_leftover_containers
    stop_skein_driver
    rm -f "$STATE_ROOT/yarn.env"
    if [ "$WIPE" = 1 ] && [ -d "$STATE" ]; then
        log "wiping $STATE"
        rm -rf "$STATE"
    fi
    log "cluster down"
    return 0
}

main "$@"
