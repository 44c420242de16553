#!/usr/bin/env bash
# ci/clusters/sge-down.sh -- stop mxbatch's Son of Grid Engine test cluster (the one
# ci/clusters/sge-up.sh starts: the qmaster here, an execd in each test host). Idempotent: safe when it is (partly) down.
#
# Order: delete every job (qdel -f -u '*'), stop every sge_execd (qconf -kej: also kills
# what still runs), kill leftover job shepherds, stop sge_qmaster (qconf -km). Each
# daemon gets a deadline, then SIGTERM, then SIGKILL. Only the processes named in
# SGE's own pid files (and the execd spool) are signalled, by pid.
#
# Usage: sge-down.sh [--wipe]
#   --wipe   afterwards erase all cluster state (config, jobs, job ids, accounting,
#            spool); the next sge-up.sh builds an empty cell again
# Env:   MXBATCH_CLUSTER_STATE (/tmp/mxbatch-clusters): sge.env there is removed
# Exit:  0 when no SGE daemon is left running; non-zero with an ERROR line.
set -euo pipefail

HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
# shellcheck source-path=SCRIPTDIR source=lib.sh
. "$HERE/lib.sh"
# shellcheck source-path=SCRIPTDIR source=sge-common.sh
. "$HERE/sge-common.sh"

readonly GRACE=30        # seconds a daemon gets after qconf -k*, then after SIGTERM

# shut_down <name> <grace> <pid...>: give them grace s to exit on their own (after
# qconf -k*; 0: no wait), then stop_pids: SIGTERM, GRACE s, SIGKILL
shut_down() {
    local name=$1 grace=$2
    shift 2
    (( $# )) || return 0
    if (( grace )); then
        wait_until "$grace" pids_gone "$@" && return 0
        log "$name ($*) still running after ${grace}s: SIGTERM"
    else
        log "$name ($*): SIGTERM"
    fi
    stop_pids "$name" "$GRACE" "$@" || die "$name ($*) survives SIGKILL"
}

no_jobs() { [[ -z $(timeout 10 qstat -u '*' 2>/dev/null) ]]; }

delete_jobs() {
    no_jobs && return 0
    log "deleting all jobs (qdel -f -u '*')"
    timeout 30 qdel -f -u '*' >/dev/null 2>&1 || true
    wait_until "$GRACE" no_jobs || log "jobs still listed after ${GRACE}s; stopping anyway"
}

# job shepherds left behind by an execd that died hard: the execd spool records
# each shepherd's pid (pid) and its job's process-group leader (job_pid)
kill_leftover_shepherds() {
    local d sp jp
    for d in "$SPOOL"/execd/*/active_jobs/*/; do
        [[ -d $d ]] || continue
        sp=$(pid_from_file "$d/pid" sge_shepherd) || continue
        jp=$(cat "$d/job_pid" 2>/dev/null || true)
        log "killing leftover shepherd $sp and its job (process group $jp)"
        if [[ $jp =~ ^[0-9]+$ && $(awk '/^PPid:/{print $2}' "/proc/$jp/status" 2>/dev/null) == "$sp" ]]; then
            kill -KILL -- "-$jp" 2>/dev/null || kill -KILL "$jp" 2>/dev/null || true
        fi
        kill -KILL "$sp" 2>/dev/null || true
    done
}

# any SGE daemon still alive (e.g. one whose pid file is gone; a zombie is not)? report,
# never kill
check_none_left() {
    local c comm pid left=""
    for c in /proc/[0-9]*/comm; do
        read -r comm 2>/dev/null <"$c" || continue
        case $comm in
            sge_qmaster | sge_execd | sge_shepherd)
                pid=${c#/proc/}
                pid=${pid%/comm}
                pid_alive "$pid" && left+=" $comm($pid)"
                ;;
        esac
    done
    [[ -z $left ]] || die "still running, not found in this cell's pid files:$left"
}

wipe() {
    log "wiping cluster state ($SPOOL/{spooldb,qmaster,execd}, accounting, host_aliases, $SGE_STATE)"
    rm -rf "${SPOOL:?}"/spooldb/* "${SPOOL:?}"/qmaster/* "${SPOOL:?}"/execd/* "$SPOOL/mxbatch-daemons.log"
    rm -rf "${SGE_STATE:?}"
    rm -f "$COMMON"/{accounting,reporting,host_aliases,act_qmaster}
}

main() {
    local wipe=0 qm ex
    case "${1:-}" in
        "") ;;
        --wipe) wipe=1 ;;
        *) echo "usage: $0 [--wipe]" >&2; exit 2 ;;
    esac
    require_root
    rm -f "$ENV_FILE"
    mapfile -t qm < <(qmaster_pids)
    mapfile -t ex < <(execd_pids)
    if (( ${#qm[@]} + ${#ex[@]} == 0 )); then
        log "no sge_qmaster or sge_execd running"
    elif (( ${#qm[@]} )) && qmaster_answers; then
        delete_jobs
        if (( ${#ex[@]} )); then
            log "stopping sge_execd ${ex[*]} (qconf -kej all)"
            timeout 30 qconf -kej all >/dev/null 2>&1 || kill -TERM "${ex[@]}" 2>/dev/null || true
            shut_down sge_execd "$GRACE" "${ex[@]}"
        fi
        kill_leftover_shepherds
        log "stopping sge_qmaster ${qm[*]} (qconf -km; its shutdown takes ~5-10 s)"
        timeout 30 qconf -km >/dev/null 2>&1 || kill -TERM "${qm[@]}" 2>/dev/null || true
        shut_down sge_qmaster "$GRACE" "${qm[@]}"
    else
        # no qmaster to talk to: SIGTERM is the daemons' own controlled shutdown
        log "no answering sge_qmaster (pid file: ${qm[*]:-none}); stopping the daemons by signal"
        shut_down "SGE daemons" 0 "${ex[@]}" "${qm[@]}"
        kill_leftover_shepherds
    fi
    check_none_left
    log "SGE daemons stopped"
    if (( wipe )); then wipe; fi
    log "done"
}

main "$@"
