#!/usr/bin/env bash
# slurm-down.sh - stop mxbatch's single-host Slurm test cluster
# (see slurm-up.sh). Idempotent: succeeds when the cluster is already down.
#
# Usage: ci/clusters/slurm-down.sh [--wipe] [--keep-munge]
#   --wipe        also remove all cluster state (config, jobs, job ids, logs,
#                 munge key), so that the next slurm-up.sh starts fresh
#   --keep-munge  leave munged running (slurm-up.sh uses it on a restart)
# Env: MXBATCH_CLUSTER_STATE  state root (default /tmp/mxbatch-clusters)
#      MXBATCH_SLURM_TIMEOUT  seconds for each wait (default 30)
set -euo pipefail

HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
# shellcheck source-path=SCRIPTDIR source=lib.sh
. "$HERE/lib.sh"
# shellcheck source-path=SCRIPTDIR source=slurm-common.sh
. "$HERE/slurm-common.sh"

TIMEOUT=${MXBATCH_SLURM_TIMEOUT:-30}

usage() { sed -n '2,/^set /{/^set /d;s/^# \{0,1\}//;p}' "$0"; }

# job_pids: live processes of this cluster's jobs: slurmstepd and the job's
# own processes. All carry SLURM_CONF=$CONF in their environment (slurmd
# passes its own on), which tells them apart from any other Slurm's; job
# processes also carry SLURM_JOB_ID (the daemons and a shell that sourced
# slurm.env do not).
job_pids() {
    local pid stat comm env skip
    skip=" $(ancestors | tr '\n' ' ') "
    while read -r pid stat comm; do
        [[ $stat == Z* || $skip == *" $pid "* ]] && continue
        env=/proc/$pid/environ
        grep -qzxF "SLURM_CONF=$CONF" "$env" 2>/dev/null || continue
        if [[ $comm == slurmstepd ]] || grep -qz '^SLURM_JOB_ID=' "$env" 2>/dev/null; then
            echo "$pid"
        fi
    done < <(ps -eo pid=,stat=,comm=)
}

# kill_jobs: SIGKILL what is left of jobs once the daemons are gone
# (slurmstepd ignores SIGTERM; slurmd does not end running steps).
kill_jobs() {
    local pids
    mapfile -t pids < <(job_pids)
    ((${#pids[@]})) || return 0
    log "killing leftover job processes (pid ${pids[*]})"
    kill -KILL "${pids[@]}" 2>/dev/null || true
    wait_until "$TIMEOUT" pids_gone "${pids[@]}" \
        || die "pid $(pids_alive "${pids[@]}") survived SIGKILL"
}

jobs_active() {
    [[ -n $(timeout 10 squeue -h -t PD,CF,R,CG,S,RQ,RS,SO -o %i 2>/dev/null) ]]
}

# slurmds_alive: every slurmd with a pid file still runs (the jobs on a dead
# one stay COMPLETING until slurmctld gives the node up, minutes later).
slurmds_alive() {
    local f
    for f in "$BASE"/run/slurmd-*.pid; do
        [[ -e $f ]] || continue
        pid_from_file "$f" slurmd >/dev/null || return 1
    done
}

cancel_jobs() {
    local users u
    pid_from_file "$BASE/run/slurmctld.pid" slurmctld >/dev/null && ctld_up || return 0
    jobs_active || return 0
    users=$(timeout 10 squeue -h -o %u 2>/dev/null | sort -u)
    log "cancelling all jobs (users: ${users//$'\n'/ })"
    for u in $users; do
        timeout 10 scancel --quiet --user="$u" || true
    done
    wait_until "$TIMEOUT" jobs_settled || log "jobs still active after ${TIMEOUT}s: stopping anyway"
}

# jobs_settled: no job active any more, or one never will end (its slurmd is gone)
jobs_settled() {
    jobs_active || return 0
    slurmds_alive && return 1
    log "a slurmd is not running: its jobs are killed below"
}

stop_daemons() {
    local pid pids
    mapfile -t pids < <(live_pids slurmd "$BASE"/run/slurmd-*.pid)
    stop slurmd "${pids[@]}"
    rm -f "$BASE"/run/slurmd-*.pid
    if pid=$(pid_from_file "$BASE/run/slurmctld.pid" slurmctld); then
        stop slurmctld "$pid"   # its slurmscriptd child exits with it
    fi
    rm -f "$BASE/run/slurmctld.pid"
    kill_jobs
}

stop_munge() {
    local pid
    if pid=$(pid_from_file "$BASE/run/munged.pid" munged); then
        stop munged "$pid"
    fi
    rm -f "$BASE/run/munged.pid"
}

main() {
    local wipe=0 keep_munge=0 arg
    for arg; do
        case $arg in
            --wipe) wipe=1 ;;
            --keep-munge) keep_munge=1 ;;
            -h | --help) usage; exit 0 ;;
            *) usage >&2; die "unknown argument: $arg" ;;
        esac
    done
    if ((wipe && keep_munge)); then
        die "--wipe removes munged's socket and key: not with --keep-munge"
    fi
    if [[ ! -d $BASE ]]; then
        rm -f "$ENV_FILE"
        log "nothing to stop ($BASE does not exist)"
        return 0
    fi
    export SLURM_CONF=$CONF
    if [[ -z ${MXBATCH_SLURM_LOCKED:-} ]]; then
        lock_cluster
    fi
    rm -f "$ENV_FILE"
    cancel_jobs
    stop_daemons
    ((keep_munge)) || stop_munge
    if ((wipe)); then
        log "wiping $BASE"
        rm -rf "${BASE:?}"
    fi
    log "cluster down"
}

main "$@"
