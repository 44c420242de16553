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

STATE_ROOT=${MXBATCH_CLUSTER_STATE:-/tmp/mxbatch-clusters}
TIMEOUT=${MXBATCH_SLURM_TIMEOUT:-30}
BASE=$STATE_ROOT/slurm
CONF=$BASE/etc/slurm.conf
ENV_FILE=$STATE_ROOT/slurm.env

T0=${EPOCHREALTIME//[!0-9]/}
log() {
    local us=$(( ${EPOCHREALTIME//[!0-9]/} - T0 ))
    printf '[slurm-down %3d.%02ds] %s\n' $((us / 1000000)) $((us % 1000000 / 10000)) "$*"
}
die() { log "ERROR: $*" >&2; exit 1; }

usage() { sed -n '2,/^set /{/^set /d;s/^# \{0,1\}//;p}' "$0"; }

# pid_of PIDFILE COMM : print the pid if PIDFILE names a live COMM process.
pid_of() {
    local pid stat comm
    [[ -s $1 ]] || return 1
    pid=$(<"$1")
    read -r stat comm < <(ps -o stat=,comm= -p "$pid" 2>/dev/null) || return 1
    [[ $stat != Z* && $comm == "$2" ]] && echo "$pid"
}

alive() {
    local stat
    stat=$(ps -o stat= -p "$1" 2>/dev/null) && [[ $stat != Z* ]]
}

# stop_pids NAME PID... : SIGTERM, wait up to TIMEOUT, then SIGKILL.
stop_pids() {
    local name=$1 deadline=$((SECONDS + TIMEOUT)) pid left
    shift
    (($#)) || return 0
    log "stopping $name (pid $*)"
    kill -TERM "$@" 2>/dev/null || true
    while :; do
        left=()
        for pid; do alive "$pid" && left+=("$pid"); done
        ((${#left[@]})) || return 0
        ((SECONDS < deadline)) || break
        sleep 0.1
    done
    log "$name (pid ${left[*]}) ignored SIGTERM for ${TIMEOUT}s: SIGKILL"
    kill -KILL "${left[@]}" 2>/dev/null || true
}

# ancestors: this shell and its ancestors (never to be killed).
ancestors() {
    local pid=$$
    while [[ -n $pid && $pid != 0 ]]; do
        echo "$pid"
        pid=$(ps -o ppid= -p "$pid" 2>/dev/null | tr -d ' ')
    done
}

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
    local pids deadline=$((SECONDS + TIMEOUT)) left pid
    mapfile -t pids < <(job_pids)
    ((${#pids[@]})) || return 0
    log "killing leftover job processes (pid ${pids[*]})"
    kill -KILL "${pids[@]}" 2>/dev/null || true
    while :; do
        left=()
        for pid in "${pids[@]}"; do alive "$pid" && left+=("$pid"); done
        ((${#left[@]})) || return 0
        ((SECONDS < deadline)) || die "pid ${left[*]} survived SIGKILL"
        sleep 0.1
    done
}

ctld_up() { [[ $(timeout 10 scontrol ping 2>/dev/null) == *"is UP"* ]]; }

jobs_active() {
    [[ -n $(timeout 10 squeue -h -t PD,CF,R,CG,S,RQ,RS,SO -o %i 2>/dev/null) ]]
}

# slurmds_alive: every slurmd with a pid file still runs (the jobs on a dead
# one stay COMPLETING until slurmctld gives the node up, minutes later).
slurmds_alive() {
    local f
    for f in "$BASE"/run/slurmd-*.pid; do
        [[ -e $f ]] || continue
        pid_of "$f" slurmd >/dev/null || return 1
    done
}

cancel_jobs() {
    local users u
    pid_of "$BASE/run/slurmctld.pid" slurmctld >/dev/null && ctld_up || return 0
    jobs_active || return 0
    users=$(timeout 10 squeue -h -o %u 2>/dev/null | sort -u)
    log "cancelling all jobs (users: ${users//$'\n'/ })"
    for u in $users; do
        timeout 10 scancel --quiet --user="$u" || true
    done
    local deadline=$((SECONDS + TIMEOUT))
    while jobs_active; do
        if ! slurmds_alive; then
            log "a slurmd is not running: its jobs are killed below"
            return 0
        fi
        if ((SECONDS >= deadline)); then
            log "jobs still active after ${TIMEOUT}s: stopping anyway"
            return 0
        fi
        sleep 0.2
    done
}

stop_daemons() {
    local f pid pids=()
    for f in "$BASE"/run/slurmd-*.pid; do
        [[ -e $f ]] || continue
        pid=$(pid_of "$f" slurmd) && pids+=("$pid")
    done
    stop_pids slurmd "${pids[@]}"
    rm -f "$BASE"/run/slurmd-*.pid
    if pid=$(pid_of "$BASE/run/slurmctld.pid" slurmctld); then
        stop_pids slurmctld "$pid"   # its slurmscriptd child exits with it
    fi
    rm -f "$BASE/run/slurmctld.pid"
    kill_jobs
}

stop_munge() {
    local pid
    if pid=$(pid_of "$BASE/run/munged.pid" munged); then
        stop_pids munged "$pid"
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
        exec 9>"$BASE/lock"
        flock -w "$TIMEOUT" 9 || die "another slurm-up/down holds $BASE/lock"
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
