#!/usr/bin/env bash
# oar-down.sh - stop mxbatch's OAR test cluster (see oar-up.sh), by pid only: every job
# deleted, Almighty and its children, OAR's sshd in each test host, what is left of the
# jobs' processes, and PostgreSQL if oar-up.sh started it. Idempotent: succeeds when the
# cluster is already down.
#
# Usage: ci/clusters/oar-down.sh [--wipe]
#   --wipe   also drop OAR's database, put the original /etc/oar/oar.conf back and remove
#            all cluster state, so that the next oar-up.sh starts from scratch
# Env: MXBATCH_CLUSTER_STATE  state root (default /tmp/mxbatch-clusters)
#      MXBATCH_OAR_TIMEOUT    seconds for each wait (default 30)
set -euo pipefail

HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
# shellcheck source-path=SCRIPTDIR source=lib.sh
. "$HERE/lib.sh"
# shellcheck source-path=SCRIPTDIR source=oar-common.sh
. "$HERE/oar-common.sh"

TIMEOUT=${MXBATCH_OAR_TIMEOUT:-30}

usage() { sed -n '2,/^set /{/^set /d;s/^# \{0,1\}//;p}' "$0"; }

# job_pids: live processes of OAR jobs: oarexec (it runs each job on its first node)
# and every process that carries OAR_JOB_ID and OAR's configuration in its environment
job_pids() {
    local pid stat comm skip env
    skip=" $(ancestors | tr '\n' ' ') "
    while read -r pid stat comm; do
        [[ $stat == Z* || $skip == *" $pid "* ]] && continue
        env=/proc/$pid/environ
        if [[ $comm == oarexec ]] || { grep -qz '^OAR_JOB_ID=' "$env" 2>/dev/null \
                && grep -qzxF "OARCONFFILE=$OAR_CONF" "$env" 2>/dev/null; }; then
            echo "$pid"
        fi
    done < <(ps -eo pid=,stat=,comm=)
}

server_up() { almighty_pid >/dev/null && oarstat -J --sql "job_id = 0" >/dev/null 2>&1; }

live_jobs() {
    [[ -n $(oarstat -J --sql "state IN ($OAR_LIVE_STATES)" 2>/dev/null | tr -d '{}[:space:]') ]]
}

# delete_jobs: every job that has not ended, deleted while the server runs
delete_jobs() {
    server_up || return 0
    live_jobs || return 0
    log "deleting every job that has not ended"
    oardel --sql "state IN ($OAR_LIVE_STATES)" >/dev/null 2>&1 || true
    wait_until "$TIMEOUT" eval '! live_jobs' || log "jobs still listed after ${TIMEOUT}s: stopping anyway"
}

stop_daemons() {
    local pid pids f
    if pid=$(almighty_pid); then
        mapfile -t pids < <(descendants "$pid")
        stop Almighty "$pid" "${pids[@]}"
    fi
    rm -f "$BASE/run/almighty.pid"
    pids=()
    for f in "$BASE"/run/sshd-*.pid; do
        [[ -e $f ]] || continue
        pid=$(pid_from_file "$f" sshd) && pids+=("$pid")
        rm -f "$f"
    done
    stop "OAR's sshd" "${pids[@]}"
    mapfile -t pids < <(job_pids)
    if ((${#pids[@]})); then
        log "killing leftover job processes (pid ${pids[*]})"
        kill -KILL "${pids[@]}" 2>/dev/null || true
        wait_until "$TIMEOUT" pids_gone "${pids[@]}" \
            || die "pid $(pids_alive "${pids[@]}") survived SIGKILL"
    fi
}

stop_postgres() {
    local version name
    [[ -s $BASE/run/postgres-started ]] || return 0
    read -r version name <"$BASE/run/postgres-started"
    log "stopping PostgreSQL $version/$name (oar-up.sh started it)"
    pg_ctlcluster "$version" "$name" stop || log "pg_ctlcluster $version $name stop failed"
    rm -f "$BASE/run/postgres-started"
}

# drop_database: OAR's database dropped (while PostgreSQL runs), the original oar.conf back
drop_database() {
    local version name
    log "dropping OAR's database, putting the original $OAR_CONF back"
    if [[ -e $OAR_CONF ]] && oar-database --check >/dev/null 2>&1; then
        oar-database --drop --db-is-local -y >/dev/null 2>&1 || log "oar-database --drop failed"
    fi
    if [[ -e $BASE/etc/oar.conf.orig ]]; then
        cp -p "$BASE/etc/oar.conf.orig" "$OAR_CONF"
    fi
    # PostgreSQL's own listen_addresses and pg_hba.conf again (oar-up.sh set them)
    su -s /bin/sh postgres -c "psql -Xq -c 'ALTER SYSTEM RESET listen_addresses' \
        -c 'ALTER SYSTEM RESET hba_file'" 2>/dev/null || log "ALTER SYSTEM RESET failed"
    if [[ ! -s $BASE/run/postgres-started ]]; then   # not ours: it goes on, as it was
        read -r version name < <(pg_lsclusters -h | awk 'NR == 1 { print $1, $2 }')
        pg_ctlcluster "$version" "$name" restart 9>&- || log "PostgreSQL did not restart"
    fi
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
    rm -f "$ENV_FILE"
    if [[ ! -d $BASE ]]; then
        log "nothing to stop ($BASE does not exist)"
        return 0
    fi
    lock_cluster
    delete_jobs
    stop_daemons
    ((wipe)) && drop_database
    stop_postgres
    if ((wipe)); then
        log "wiping $BASE"
        rm -rf "${BASE:?}"
    fi
    log "cluster down"
}

main "$@"
