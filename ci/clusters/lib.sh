# shellcheck shell=bash
# ci/clusters/lib.sh -- helpers shared by the test-cluster scripts (sge-*.sh, slurm-*.sh,
# yarn-*.sh). Sourced, never run; it sets no shell options (the scripts do) and works
# with and without `set -e`. Sourcing it starts the clock that log() reports.
#
#   log MSG...            "[<script> <elapsed>s] MSG" on stdout (LOG_FD)
#   die MSG...            log "ERROR: MSG" on stderr, exit 1
#   require_root          die unless running as root
#   wait_until [-s WHAT] SECS CMD...   poll CMD until it succeeds; 1 after SECS
#   wait_for SECS WHAT CMD...          the same, but die on timeout
#   pid_alive PID / pids_alive PID... / pids_gone PID...
#   pid_from_file FILE COMM [ARG]      the live pid a pid file names, checked by name
#   live_pids COMM FILE...             the same for several pid files
#   stop_pids NAME GRACE PID...        SIGTERM, GRACE seconds, SIGKILL
#   write_atomic FILE                  stdin into FILE (0644), all or nothing
#
# Knobs a script may set after sourcing: LOG_FD (1; 2 logs to stderr), LOG_DECIMALS
# (2: digits of the elapsed seconds).

LOG_TAG=${BASH_SOURCE[-1]##*/}   # the script that was run: sge-up.sh -> "sge-up"
LOG_TAG=${LOG_TAG%.sh}
LOG_FD=1
LOG_DECIMALS=2
LOG_T0=${EPOCHREALTIME//[!0-9]/}   # microseconds (whatever the locale's decimal point)

log() {
    local us=$(( ${EPOCHREALTIME//[!0-9]/} - LOG_T0 )) d=$LOG_DECIMALS
    printf '[%s %3d.%0*ds] %s\n' "$LOG_TAG" $(( us / 1000000 )) "$d" \
        $(( us / 10 ** (6 - d) % 10 ** d )) "$*" >&"$LOG_FD"
}
die() { log "ERROR: $*" >&2; exit 1; }

require_root() { [[ $(id -u) == 0 ]] || die "must run as root"; }

# wait_until [-s WHAT] <seconds> <cmd...>: run cmd until it succeeds (after 0.05 s, 0.1 s,
# then every 0.2 s); 1 if it has not within <seconds>. With -s, log "waiting for WHAT
# (up to Ns)" once, after the first failed try. cmd runs in this shell (it may set
# variables, or die); the _wu_ locals keep out of its way.
wait_until() {
    local _wu_what="" _wu_secs _wu_end _wu_pauses=(0.05 0.1) _wu_n=0
    if [[ $1 == -s ]]; then
        _wu_what=$2
        shift 2
    fi
    _wu_secs=$1
    _wu_end=$(( ${EPOCHREALTIME//[!0-9]/} + _wu_secs * 1000000 ))
    shift
    until "$@"; do
        (( ${EPOCHREALTIME//[!0-9]/} < _wu_end )) || return 1
        if [[ -n $_wu_what ]]; then
            log "waiting for $_wu_what (up to ${_wu_secs}s)"
            _wu_what=""
        fi
        sleep "${_wu_pauses[_wu_n++]:-0.2}"
    done
}

# wait_for <seconds> <what> <cmd...>: wait_until, but die on timeout
wait_for() {
    wait_until "$1" "${@:3}" || die "timeout (${1}s) waiting for $2"
}

# pid_alive <pid>: is it a live process? A zombie is not; a process whose main thread
# has exited while other threads still run is. (/proc/PID/task/TID/stat: "TID (comm) S ...")
pid_alive() {
    local t stat
    [[ $1 =~ ^[0-9]+$ ]] || return 1
    for t in /proc/"$1"/task/*/stat; do
        read -r stat 2>/dev/null <"$t" || continue
        stat=${stat##*) }
        [[ ${stat:0:1} == [ZX] ]] || return 0
    done
    return 1
}
# pids_alive <pid...>: print those of them that are alive, on one line (none: nothing)
pids_alive() {
    local p left=()
    for p in "$@"; do
        if pid_alive "$p"; then left+=("$p"); fi
    done
    if (( ${#left[@]} )); then echo "${left[*]}"; fi
}
# pids_gone <pid...>: none of them alive any more?
pids_gone() {
    local p
    for p in "$@"; do
        if pid_alive "$p"; then return 1; fi
    done
}

# pid_from_file <pidfile> <comm> [<arg>]: print the pid the file holds if that process
# is alive, is named comm (/proc/PID/comm; "": any name) and, if arg is given, has it in
# its command line; 1 otherwise (no file, stale pid, pid reused by another program)
pid_from_file() {
    local pid args
    [[ -s $1 ]] || return 1
    pid=$(cat "$1" 2>/dev/null) || return 1
    pid_alive "$pid" || return 1
    [[ -z $2 || $(cat "/proc/$pid/comm" 2>/dev/null) == "$2" ]] || return 1
    if [[ -n ${3:-} ]]; then
        args=$(tr '\0' ' ' 2>/dev/null <"/proc/$pid/cmdline") || return 1
        [[ $args == *"$3"* ]] || return 1
    fi
    echo "$pid"
}
# live_pids <comm> <pidfile...>: pid_from_file for each file (a glob that matched nothing
# is fine); always 0
live_pids() {
    local comm=$1 f
    shift
    for f in "$@"; do
        pid_from_file "$f" "$comm" || true
    done
}

# stop_pids <name> <grace> <pid...>: SIGTERM them, wait up to grace seconds, SIGKILL what
# is left (logged) and wait up to 10 s more; 1 if one survives even that
stop_pids() {
    local name=$1 grace=$2 left
    shift 2
    (( $# )) || return 0
    kill -TERM "$@" 2>/dev/null || true
    wait_until "$grace" pids_gone "$@" && return 0
    left=$(pids_alive "$@")
    [[ -n $left ]] || return 0
    log "$name (pid $left) still running ${grace}s after SIGTERM: SIGKILL"
    # shellcheck disable=SC2086  # one word per pid
    kill -KILL $left 2>/dev/null || true
    wait_until 10 pids_gone "$@"
}

# write_atomic <file>: write stdin to file (mode 0644) through a temporary file next to
# it, so that a reader never sees a half-written file
write_atomic() {
    local tmp
    tmp=$(mktemp "$1.XXXXXX") || return 1
    if cat >"$tmp" && chmod 0644 "$tmp" && mv -f "$tmp" "$1"; then
        return 0
    fi
    rm -f "$tmp"
    return 1
}

# stop NAME PID... : log, then stop_pids: SIGTERM, $TIMEOUT s (the caller's; default
# 30), SIGKILL
stop() {
    local name=$1
    shift
    (($#)) || return 0
    log "stopping $name (pid $*)"
    stop_pids "$name" "${TIMEOUT:-30}" "$@" || log "$name (pid $(pids_alive "$@")) survives SIGKILL"
}

# ancestors: this shell and its ancestors (never to be killed)
ancestors() {
    local pid=$$
    while [[ -n $pid && $pid != 0 ]]; do
        echo "$pid"
        pid=$(ps -o ppid= -p "$pid" 2>/dev/null | tr -d ' ')
    done
}
