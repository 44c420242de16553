#!/usr/bin/env bash
# hosts-down.sh - take mxbatch's ssh/MPI test network down (see hosts-up.sh): stop the
# hosts' sshds, kill every process left in their namespaces (an orted, a test's job),
# delete the namespaces, veths and bridge, empty the hosts' private directories.
# Nothing of it is left: no namespace, link, sshd or mount. Idempotent: succeeds when
# the network is already down or half up, and with or without the state directory.
#
# Usage: ci/clusters/hosts-down.sh [--wipe]
#   --wipe   also remove the state directory (keys included), so that the next
#            hosts-up.sh makes new keys; without it the keys stay, and known_hosts
#            files made from them stay valid across restarts
# Env: MXBATCH_CLUSTER_STATE  state root (default /tmp/mxbatch-clusters)
#      MXBATCH_HOSTS_TIMEOUT  seconds for each wait (default 30)
#      MXBATCH_HOSTS_NET      the /24 hosts-up.sh used (default 10.213.57)
set -euo pipefail

HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
# shellcheck source-path=SCRIPTDIR source=lib.sh
. "$HERE/lib.sh"
# shellcheck source-path=SCRIPTDIR source=hosts-common.sh
. "$HERE/hosts-common.sh"

TIMEOUT=${MXBATCH_HOSTS_TIMEOUT:-30}

usage() { sed -n '2,/^set /{/^set /d;s/^# \{0,1\}//;p}' "$0"; }

# our_netns: the names of our namespaces that exist (those of ALL_HOSTS, and any
# other mxbhN an earlier version left)
our_netns() {
    local f
    for f in /run/netns/mxbh[0-9]*; do
        [[ -e $f ]] && echo "${f##*/}"
    done
    return 0
}

# ns_pids: live processes in one of NS_IDS (our network namespaces, and the mount
# namespaces of our sshds: "net:[N]" / "mnt:[N]" as /proc/PID/ns/* read); one find
# (-lname matches what a link reads) instead of a readlink per process
ns_pids() {
    local id pats=() pid
    for id in $NS_IDS; do
        pats+=(-o -lname "${id//[/\\[}")
    done
    ((${#pats[@]})) || return 0
    find /proc/[0-9]*/ns/net /proc/[0-9]*/ns/mnt -maxdepth 0 \( -false "${pats[@]}" \) \
        -printf '%h\n' 2>/dev/null | cut -d/ -f3 | sort -un | while read -r pid; do
        [[ $SKIP == *" $pid "* ]] || ! pid_alive "$pid" || echo "$pid"
    done || true   # find complains about processes that ended meanwhile
}

# kill_leftovers: SIGKILL what still runs in our namespaces, until nothing does (a
# process may fork while we kill)
kill_leftovers() {
    local pids
    mapfile -t pids < <(ns_pids)
    ((${#pids[@]})) || return 0
    log "killing processes left in the hosts (pid ${pids[*]})"
    wait_until "$TIMEOUT" kill_all_ns_pids \
        || die "processes survive in the hosts' namespaces: $(ns_pids | tr '\n' ' ')"
}
kill_all_ns_pids() {
    local pids
    mapfile -t pids < <(ns_pids)
    ((${#pids[@]})) || return 0
    kill -KILL "${pids[@]}" 2>/dev/null || true
    return 1
}

stop_sshds() {
    local pids=() h pid
    for h in "${SSHD_HOSTS[@]}"; do
        pid=$(sshd_pid "$h") && pids+=("$pid")
    done
    mapfile -t -O "${#pids[@]}" pids < <(our_sshd_pids)
    mapfile -t pids < <(printf '%s\n' "${pids[@]}" | sort -un | grep .)
    ((${#pids[@]})) || return 0
    log "stopping sshd (pid ${pids[*]})"
    stop_pids sshd "$TIMEOUT" "${pids[@]}" || die "sshd (pid $(pids_alive "${pids[@]}")) survives SIGKILL"
}

delete_links() {
    local ns l
    for l in /sys/class/net/mxbhv[0-9]*; do
        [[ -e $l ]] || continue
        ip link delete "${l##*/}" 2>/dev/null || true
    done
    for ns in $(our_netns); do
        ip netns delete "$ns" || die "ip netns delete $ns failed"
    done
    if [[ -e /sys/class/net/$BRIDGE ]]; then
        ip link delete "$BRIDGE" || die "ip link delete $BRIDGE failed"
    fi
    # /run/netns is bind-mounted onto itself by the first `ip netns add`: undo that
    # when no namespace at all (ours or anyone's) is left in it
    if mountpoint -q /run/netns 2>/dev/null && [[ -z $(ls -A /run/netns) ]]; then
        while mountpoint -q /run/netns; do umount /run/netns || break; done
    fi
}

# empty_private: a new network starts with empty private directories
empty_private() {
    local d
    for d in "$PRIVATE" "$BASE"/mxbh[0-9]*/private; do
        [[ -d $d ]] && find "$d" -mindepth 1 -delete
    done
    rm -rf "$BASE"/.rsync-check.* "$BASE"/.checks.*
    return 0
}

# verify: nothing of ours is left
verify() {
    local left=()
    [[ -z $(our_netns) ]] || left+=("namespaces: $(our_netns | tr '\n' ' ')")
    if compgen -G "/sys/class/net/mxbh*" >/dev/null; then
        left+=("links: $(cd /sys/class/net && echo mxbh*)")
    fi
    [[ -z $(our_sshd_pids) ]] || left+=("sshd: $(our_sshd_pids | tr '\n' ' ')")
    if grep -qE " ($BASE|/run/netns/mxbh)" /proc/self/mountinfo; then
        left+=("mounts: $(grep -E " ($BASE|/run/netns/mxbh)" /proc/self/mountinfo)")
    fi
    ((${#left[@]} == 0)) || die "left behind: ${left[*]}"
}

main() {
    local wipe=0 arg ns pid h
    for arg; do
        case $arg in
            --wipe) wipe=1 ;;
            -h | --help) usage; exit 0 ;;
            *) usage >&2; die "unknown argument: $arg" ;;
        esac
    done
    require_root
    check_names
    lock_hosts
    rm -f "$ENV_FILE"
    SKIP=" $(ancestors | tr '\n' ' ') "
    # the namespaces to empty: ours (net), and our sshds' (mnt: also those of a process
    # that someone moved out of the network namespace)
    NS_IDS=" "
    for ns in $(our_netns); do
        NS_IDS+="$(netns_id "$ns") "
    done
    for h in "${SSHD_HOSTS[@]}"; do
        pid=$(sshd_pid "$h") && NS_IDS+="$(readlink "/proc/$pid/ns/mnt") "
    done
    stop_sshds
    kill_leftovers
    delete_links
    empty_private
    rm -f "$BASE"/mxbh[0-9]*/sshd.pid
    if ((wipe)); then
        log "wiping $BASE"
        rm -rf "${BASE:?}"
    fi
    verify
    log "hosts down"
}

main "$@"
