#!/usr/bin/env bash
# containers-down.sh - stop what containers-up.sh started: remove every container of
# our dockerd and of our podman storage (mxbatch names them mxbatch-<job>-<role>-<rank>;
# all of them go, whatever their name), stop the private dockerd, and clear what a
# crashed dockerd/podman left behind (containerd, shims, conmon, the netns/default and
# overlay mounts). Afterwards nothing of ours runs and nothing under the state dir is
# mounted. Idempotent: succeeds when already down, half up or after a crash.
#
# Usage: ci/clusters/containers-down.sh [--wipe]
#   --wipe  also delete the images and all other state, so that the next
#           containers-up.sh starts from scratch (without it the test image is kept
#           for a fast restart)
# Env: MXBATCH_CLUSTER_STATE       state root (default /tmp/mxbatch-clusters)
#      MXBATCH_CONTAINERS_TIMEOUT  seconds for each wait (default 30)
set -euo pipefail

HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
# shellcheck source-path=SCRIPTDIR source=lib.sh
. "$HERE/lib.sh"
# shellcheck source-path=SCRIPTDIR source=containers-common.sh
. "$HERE/containers-common.sh"

TIMEOUT=${MXBATCH_CONTAINERS_TIMEOUT:-30}

usage() { sed -n '2,/^set /{/^set /d;s/^# \{0,1\}//;p}' "$0"; }

# remove_docker_containers: every container of our dockerd. A dockerd that died
# left its containers' records behind: start it (after clearing its leftovers) to
# remove them, so that a later up does not find them.
remove_docker_containers() {
    local ids
    [[ -d $DOCKER_DATA ]] || return 0
    if ! dockerd_pid >/dev/null; then
        compgen -G "$DOCKER_DATA/containers/*" >/dev/null || return 0
        command -v dockerd >/dev/null || return 0
        log "dockerd is not running but has containers: starting it to remove them"
        start_dockerd
    fi
    if ! wait_until -s dockerd "$TIMEOUT" dockerd_answers; then
        log "dockerd does not answer: stopping it without removing its containers"
        return 0
    fi
    mapfile -t ids < <(docker ps -a -q --no-trunc)
    ((${#ids[@]})) || return 0
    log "removing ${#ids[@]} docker container(s)"
    docker rm -f "${ids[@]}" >/dev/null || log "docker rm -f failed (dockerd is stopped anyway)"
}

# remove_podman_containers: every container in our podman storage. Only with our
# configuration files: without them podman would use the system's storage.
remove_podman_containers() {
    local ids
    [[ -d $PODMAN_DIR/storage && -f $PODMAN_CONF && -f $PODMAN_STORAGE_CONF ]] || return 0
    command -v podman >/dev/null || return 0
    mapfile -t ids < <(podman ps -a -q --no-trunc)
    if ((${#ids[@]})); then
        log "removing ${#ids[@]} podman container(s)"
        podman rm -a -f -t 0 >/dev/null || log "podman rm -a -f failed"
    fi
    # containers in the storage that podman's database does not know (a crash
    # between creating and registering one): rm -f removes them from the storage
    mapfile -t ids < <(podman ps -a -q --no-trunc --external)
    if ((${#ids[@]})); then
        log "removing ${#ids[@]} podman storage container(s)"
        podman rm -f "${ids[@]}" >/dev/null 2>&1 || log "podman rm -f of storage containers failed"
    fi
}

# check_down: nothing of ours runs or is mounted
check_down() {
    local pids left
    mapfile -t pids < <(pids_mentioning "$BASE/" dockerd containerd containerd-shim conmon)
    ((${#pids[@]} == 0)) || die "still running: pid ${pids[*]}"
    left=$(mounts_under "$BASE")
    [[ -z $left ]] || die "still mounted: ${left//$'\n'/ }"
}

main() {
    local wipe=0 arg
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
    lock_containers
    rm -f "$ENV_FILE"

    remove_docker_containers
    stop_dockerd
    remove_podman_containers
    podman_leftovers
    podman_per_boot_reset || die "cannot unmount the leftovers under $PODMAN_DIR"
    unmount_under "$BASE" || die "cannot unmount the leftovers under $BASE"
    check_down
    if ((wipe)); then
        log "wiping $BASE"
        rm -rf "${BASE:?}"
    fi
    log "containers down"
}

main "$@"
