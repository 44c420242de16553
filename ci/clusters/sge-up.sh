#!/usr/bin/env bash
# ci/clusters/sge-up.sh -- bring up mxbatch's multi-host Son of Grid Engine test cluster on
# the namespace test hosts of hosts-up.sh (which must be up first: ci/test.sh starts them
# before SGE).
#
# Uses Debian 12's Son of Grid Engine 8.1.9 packages (installed if missing), as root,
# without systemd. sge_qmaster runs on this host (the submit host); one sge_execd runs
# inside each good test host (mxbh1..mxbh4: its network, mount and UTS namespaces, like
# the Slurm nodes' slurmd; hosts-exec.sh), so jobs, parallel jobs and qrsh -inherit span
# distinct addresses. Idempotent: safe when the cluster is down, half up or already up
# (also the old single-host cell, whose execd on this host it retires); it converges the
# config.
#
# Host names: SGE's commlib checks that a peer's name (its own gethostbyname) is what
# the reverse lookup of its address gives. The root namespace does not resolve the test
# hosts' names, and in a test host this host's name resolves to 127.0.0.1 (the host's
# own loopback). So the qmaster and each execd run in a mount namespace of their own
# whose /etc/hosts is $MXBATCH_CLUSTER_STATE/sge/hosts: this host's name at the bridge
# address, and every test host's name at its address (the machine's /etc/hosts is not
# touched). qconf commands that name a test host run in the qmaster's mount namespace.
#
# What you get:
#   queue  all.q          SGE_SLOTS slots (8) on each test host: where jobs run by default
#   queue  $SGE_SMALL_QUEUE  SGE_SMALL_SLOTS slots (tiny.q, 2) on the last test host only:
#                         only jobs that request `-l small` run there, and `-l small
#                         -pe smp 3` pends forever (`-q tiny.q` alone pends forever too;
#                         DRMAA submits with -w e and rejects a job that can never fit:
#                         add -w n)
#   PE     smp            allocation_rule $pe_slots, in both queues (qsub -pe smp N)
#   PE     mpi            allocation_rule $round_robin, control_slaves TRUE,
#                         job_is_first_task FALSE, in both queues: parallel jobs across
#                         hosts whose master starts the tasks with qrsh -inherit (in the
#                         small queue, `-l small -pe mpi 3 -w n` pends forever: a gang
#                         job that cannot start)
#   complexes gpu (consumable YES: per slot) and gpuj (consumable JOB), 4 of each on
#                         each host: GPU bookkeeping without devices
#   root may submit (min_uid/min_gid 0); no load thresholds; the scheduler runs
#   every second and on each submit/finish (`qsub -sync y -b y true` takes ~1 s)
#   ${MXBATCH_CLUSTER_STATE:-/tmp/mxbatch-clusters}/sge.env: shell exports for tests
#
# Usage: sge-up.sh [--fresh]          --fresh: `sge-down.sh --wipe` first
# Env:   SGE_SLOTS (8)  SGE_SMALL_QUEUE (tiny.q; empty: none)  SGE_SMALL_SLOTS (2)
#        MXBATCH_SGE_TIMEOUT (120 s, per wait)  MXBATCH_CLUSTER_STATE (/tmp/mxbatch-clusters)
# Exit:  0 once `qsub -sync y -b y true` succeeded; non-zero with an ERROR line.
set -euo pipefail

HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
readonly HERE
# shellcheck source-path=SCRIPTDIR source=lib.sh
. "$HERE/lib.sh"
# shellcheck source-path=SCRIPTDIR source=sge-common.sh
. "$HERE/sge-common.sh"
export DEBIAN_FRONTEND=noninteractive

readonly PACKAGES=(gridengine-master gridengine-exec gridengine-client gridengine-drmaa1.0)
readonly APT_OPTS=(-q -o DPkg::Lock::Timeout=300)   # wait for a concurrent apt/dpkg
readonly SGEBIN=/usr/lib/gridengine
readonly ADMIN=sgeadmin
readonly DRMAA_LIB=/usr/lib/gridengine-drmaa/lib/libdrmaa.so.1.0
readonly MAIN_QUEUE=all.q
readonly SLOTS=${SGE_SLOTS:-8}
readonly SMALL_QUEUE=${SGE_SMALL_QUEUE-tiny.q}
readonly SMALL_SLOTS=${SGE_SMALL_SLOTS:-2}
# the first of the jobs' additional group ids (gid_range): above the 16-bit ids, so
# none is a group of this machine's (65534 is nogroup)
readonly GID_BASE=70000
readonly GPU_COUNT=4
readonly TIMEOUT=${MXBATCH_SGE_TIMEOUT:-120}
readonly DAEMON_LOG=$SPOOL/mxbatch-daemons.log
readonly HOSTS_ENV=$STATE_DIR/hosts.env
readonly GANG_PE=mpi
# Filled by load_hosts from hosts-up.sh's host map:
EXEC_HOSTS=()                 # the good test hosts: one execd each
declare -A HOST_ADDR=()       # host -> its address
declare -A HOST_NETNS=()      # host -> "net:[inode]" of its network namespace
BRIDGE_IP=
HOSTS_EXEC=
SMALL_HOST=                   # the host of the small queue

WORK=$(mktemp -d /tmp/sge-up.XXXXXX)
trap 'rm -rf "$WORK"' EXIT

# run an SGE client command with a deadline; on failure die with its output
must() {
    local out
    out=$(timeout 30 "$@" 2>&1) || die "'$*' failed: ${out:-timed out}"
}

# ---------------------------------------------------------------- packages
install_packages() {
    local missing=() p
    for p in "${PACKAGES[@]}"; do
        [[ $(dpkg-query -W -f='${Status}' "$p" 2>/dev/null) == 'install ok installed' ]] || missing+=("$p")
    done
    if (( ${#missing[@]} == 0 )); then
        log "packages present: ${PACKAGES[*]}"
        return
    fi
    # (never `cmd | grep -q` under pipefail: grep exits at the first match, cmd may
    # die of SIGPIPE and the pipeline then counts as failed)
    local policy
    policy=$(apt-cache policy "${missing[@]}" 2>/dev/null || true)
    if (( $(grep -c 'Candidate: [0-9]' <<<"$policy") < ${#missing[@]} )); then
        log "no install candidate for ${missing[*]}: apt-get update"
        apt-get "${APT_OPTS[@]}" update >"$WORK/apt.log" 2>&1 ||
            { tail -n 20 "$WORK/apt.log" >&2; die "apt-get update failed"; }
    fi
    log "installing ${missing[*]}"
    # Debian's postinst starts no daemon here (policy-rc.d / no init system) and
    # leaves act_qmaster empty; everything after this step works either way.
    apt-get "${APT_OPTS[@]}" install -y --no-install-recommends "${missing[@]}" >"$WORK/apt.log" 2>&1 ||
        { tail -n 20 "$WORK/apt.log" >&2; die "apt-get install ${missing[*]} failed"; }
    for p in sge_qmaster sge_execd qconf qsub spoolinit spooldefaults gethostname gethostbyaddr; do
        [[ -x $SGEBIN/$p ]] || die "$SGEBIN/$p missing after installing ${PACKAGES[*]}"
    done
    [[ -r $DRMAA_LIB ]] || die "$DRMAA_LIB missing after installing gridengine-drmaa1.0"
}

# ---------------------------------------------------------------- cell
# The packages' postinst does this on a first install; repeat it so that the
# cell also comes back after `sge-down.sh --wipe`.
ensure_cell() {
    id "$ADMIN" >/dev/null 2>&1 ||
        adduser --system --no-create-home --quiet --disabled-password --disabled-login \
            --shell /bin/false --group --home "$SGE_ROOT" "$ADMIN"
    install -d -o "$ADMIN" -g "$ADMIN" -m 755 "$SGE_ROOT/$SGE_CELL" "$COMMON" \
        "$SPOOL/qmaster" "$SPOOL/qmaster/job_scripts" "$SPOOL/spooldb" "$SPOOL/execd"
    [[ -s $COMMON/bootstrap ]] ||
        install -m 644 -o "$ADMIN" -g "$ADMIN" /usr/share/gridengine/default-bootstrap "$COMMON/bootstrap"
    if [[ ! -e $SPOOL/spooldb/sge ]]; then
        log "initialising an empty cell (spool $SPOOL/spooldb)"
        su -s /bin/sh -c "/usr/share/gridengine/scripts/init_cluster $SGE_ROOT $SGE_CELL $SPOOL/spooldb $ADMIN" \
            "$ADMIN" >"$WORK/init.log" 2>&1 || { cat "$WORK/init.log" >&2; die "init_cluster failed"; }
    fi
}

# install_if_changed <src> <dest>: replace dest (owned by sgeadmin) only if it differs
install_if_changed() {
    cmp -s "$1" "$2" 2>/dev/null || install -m 644 -o "$ADMIN" -g "$ADMIN" "$1" "$2"
}

# ---------------------------------------------------------------- test hosts
# hosts_setting NAME: the value hosts.env gives NAME (dies if none); read in a subshell
# so that its Open MPI settings never reach the daemons
hosts_setting() {
    local value
    # shellcheck disable=SC1090  # written by hosts-up.sh
    value=$(. "$HOSTS_ENV" && printf '%s' "${!1:-}")
    [[ -n $value ]] || die "$HOSTS_ENV sets no $1"
    printf '%s\n' "$value"
}

# load_hosts: the good test hosts of hosts-up.sh; dies with what to run when they are down
load_hosts() {
    local name addr role netns _
    [[ -s $HOSTS_ENV ]] ||
        die "the test hosts are down ($HOSTS_ENV missing): run ci/clusters/hosts-up.sh first"
    BRIDGE_IP=$(hosts_setting MXBATCH_TEST_BRIDGE_IP)
    HOSTS_EXEC=$(hosts_setting MXBATCH_TEST_HOSTS_EXEC)
    while read -r name addr role netns _; do
        [[ $role == good ]] || continue
        [[ -e /run/netns/$name ]] || die "test host $name is down: run ci/clusters/hosts-up.sh"
        EXEC_HOSTS+=("$name")
        HOST_ADDR[$name]=$addr
        HOST_NETNS[$name]=$netns
    done < <(grep -v '^#' "$(hosts_setting MXBATCH_TEST_HOST_MAP)")
    (( ${#EXEC_HOSTS[@]} >= 2 )) || die "hosts-up.sh made ${#EXEC_HOSTS[@]} good hosts, SGE needs 2"
    SMALL_HOST=${EXEC_HOSTS[-1]}
}

# write_hosts_file: the /etc/hosts of the qmaster's and the execds' mount namespaces
write_hosts_file() {
    local h
    mkdir -p "$SGE_STATE"
    {
        echo "# Generated by ci/clusters/sge-up.sh: /etc/hosts of the SGE daemons"
        echo "127.0.0.1 localhost"
        echo "$BRIDGE_IP $SELF"
        for h in "${EXEC_HOSTS[@]}"; do echo "${HOST_ADDR[$h]} $h"; done
    } | write_atomic "$HOSTS_FILE"
}

# MASTER_NS: the command prefix that runs a command in the qmaster's mount namespace
# (where the test hosts resolve); set by start_qmaster
MASTER_NS=()

# own_hosts_cmd DAEMON: the shell command that runs DAEMON with $HOSTS_FILE as /etc/hosts
# (run by unshare -m: in a new, private mount namespace), in a clean environment: every
# job inherits its execd's, so a variable of whoever ran sge-up.sh (DRMAA_LIBRARY_PATH
# from a sourced sge.env) would reach every task
own_hosts_cmd() {
    echo "mount --bind $HOSTS_FILE /etc/hosts && exec env -i PATH=/usr/sbin:/usr/bin:/sbin:/bin" \
        "SGE_ROOT=$SGE_ROOT SGE_CELL=$SGE_CELL LANG=C.UTF-8 $1"
}

# ---------------------------------------------------------------- host names
# SGE's commlib rejects a client whose own name (gethostbyname(hostname()), here
# "vm") differs from the reverse lookup of its source address (127.0.0.1 ->
# first /etc/hosts entry, "localhost"): "access denied: client IP resolved to host
# name "localhost". This is not identical to clients host name "vm"". Fix, without
# editing /etc/hosts: SGE's own host_aliases file, "vm localhost".
# Sets SELF: the SGE name of this host.
setup_host_names() {
    local host ip peer r aliases=""
    host=$(hostname)
    if ! getent ahostsv4 "$host" >/dev/null; then
        log "hostname '$host' does not resolve: appending '127.0.0.1 $host' to /etc/hosts"
        echo "127.0.0.1 $host" >>/etc/hosts
    fi
    read -r ip _ SELF < <(getent ahostsv4 "$host")    # first line: IP STREAM canonical-name
    SELF=${SELF:-$host}
    [[ $ip == 127.* ]] && peer=127.0.0.1 || peer=$ip   # source address of a local connect
    for r in "$peer" "$ip"; do
        r=$(getent hosts "$r" | awk 'NR == 1 {print $2}')
        [[ -n $r && $r != "$SELF" && " $aliases " != *" $r "* ]] && aliases+=" $r"
    done
    if [[ -n $aliases ]]; then
        echo "$SELF$aliases" >"$WORK/host_aliases"
        install_if_changed "$WORK/host_aliases" "$COMMON/host_aliases"
    else
        rm -f "$COMMON/host_aliases"
    fi
    echo "$SELF" >"$WORK/act_qmaster"
    install_if_changed "$WORK/act_qmaster" "$COMMON/act_qmaster"
    # check with SGE's own resolver (it applies host_aliases)
    local own by_addr
    own=$("$SGEBIN/gethostname" -aname)
    by_addr=$("$SGEBIN/gethostbyaddr" -aname "$peer")
    [[ $own == "$by_addr" ]] ||
        die "SGE host name mismatch: self '$own', $peer -> '$by_addr' (see /etc/hosts, $COMMON/host_aliases)"
    log "host '$host': SGE name '$SELF' (ip $ip, aliases:${aliases:- none})"
}

# ---------------------------------------------------------------- daemons
# resolves_hosts PID: does process PID see $HOSTS_FILE as its /etc/hosts?
resolves_hosts() { cmp -s "$HOSTS_FILE" "/proc/$1/root/etc/hosts"; }

# Sets QMASTER_STARTED=1 when this run started it.
start_qmaster() {
    local pid
    pid=$(qmaster_pids)
    QMASTER_STARTED=0
    if [[ -n $pid ]] && ! resolves_hosts "$pid"; then
        # (the single-host cell's qmaster, or one from before the hosts file changed)
        log "sge_qmaster (pid $pid) does not resolve the test hosts: restarting it"
        timeout 30 qconf -km >/dev/null 2>&1 || kill -TERM "$pid" 2>/dev/null || true
        wait_until 30 pids_gone "$pid" || stop_pids sge_qmaster 30 "$pid" ||
            die "sge_qmaster $pid survives SIGKILL"
        pid=""
    fi
    if [[ -n $pid ]]; then
        log "sge_qmaster already running (pid $pid)"
    else
        log "starting sge_qmaster (its /etc/hosts: $HOSTS_FILE)"
        # forks into the background and drops to sgeadmin; log: $SPOOL/qmaster/messages
        unshare -m --propagation private sh -c "$(own_hosts_cmd "$SGEBIN/sge_qmaster")" \
            </dev/null >>"$DAEMON_LOG" 2>&1 ||
            die "sge_qmaster failed to start (see $DAEMON_LOG, $SPOOL/qmaster/messages)"
        QMASTER_STARTED=1
    fi
    wait_for "$TIMEOUT" "sge_qmaster to answer (qconf -sss)" qmaster_answers
    MASTER_NS=(nsenter --mount="/proc/$(qmaster_pids)/ns/mnt" --)
    log "sge_qmaster answers (pid $(qmaster_pids))"
}

# execd_pid HOST: the live pid of HOST's sge_execd (1 if none)
execd_pid() { pid_from_file "$SPOOL/execd/$1/execd.pid" sge_execd; }
execd_running() { execd_pid "$1" >/dev/null; }

# start_execd HOST: HOST's execd runs inside the test host, with $HOSTS_FILE as its
# /etc/hosts (restarted if it runs in a namespace that is no longer the host's, or
# outlived its qmaster: measured, such an execd takes ~30 s to re-register, a fresh one
# ~2 s; SIGTERM is its controlled shutdown, running job shepherds survive it and the
# new execd adopts them)
start_execd() {
    local h=$1 pid
    if pid=$(execd_pid "$h"); then
        if [[ $QMASTER_STARTED == 0 && $(readlink "/proc/$pid/ns/net") == "${HOST_NETNS[$h]}" ]] &&
                resolves_hosts "$pid"; then
            return 0
        fi
        log "restarting sge_execd of $h (pid $pid): new qmaster, or not in host $h"
        stop_pids "sge_execd $h" 30 "$pid" || die "sge_execd $pid survives SIGKILL"
    fi
    log "starting sge_execd in host $h (${HOST_ADDR[$h]})"
    (cd / && "$HOSTS_EXEC" "$h" unshare -m --propagation private \
        sh -c "$(own_hosts_cmd "$SGEBIN/sge_execd")") </dev/null >>"$DAEMON_LOG" 2>&1 ||
        die "sge_execd of $h failed to start (see $DAEMON_LOG, $SPOOL/execd/$h/messages)"
}

# retire_local_execd: the single-host cell ran an execd on this host: stop it and drop
# this host from the exec hosts (after the queues list only the test hosts)
retire_local_execd() {
    local pid
    if pid=$(execd_pid "$SELF"); then
        log "stopping the execd of this host (pid $pid): execds run in the test hosts now"
        stop_pids "sge_execd $SELF" 30 "$pid" || die "sge_execd $pid survives SIGKILL"
    fi
    if timeout 30 qconf -se "$SELF" >/dev/null 2>&1; then
        must qconf -de "$SELF"
        log "exec host $SELF removed"
    fi
}

start_execds() {
    local h
    for h in "${EXEC_HOSTS[@]}"; do start_execd "$h"; done
    for h in "${EXEC_HOSTS[@]}"; do
        wait_for 30 "sge_execd of $h to write its pid file" execd_running "$h"
    done
    log "sge_execd running in ${EXEC_HOSTS[*]}"
}

# ---------------------------------------------------------------- configuration
# qconf -s* wraps long values ("value \" newline indent): join them into one line
# per attribute (qconf -M*/-A* accept that form) and drop blank lines.
joined() { timeout 30 "$@" | sed -e ':a' -e '/\\$/N; s/[[:space:]]*\\\n[[:space:]]*/ /; ta' -e '/^[[:space:]]*$/d'; }
# squeeze whitespace so that a file compares equal to qconf's column-aligned output
squeezed() { tr -s ' \t' '  ' | sed -e 's/ *$//'; }
# same <file> <qconf -s...>: does SGE already hold exactly this (line order ignored)?
same() {
    local file=$1
    shift
    [[ "$(joined "$@" | squeezed | sort)" == "$(squeezed <"$file" | sort)" ]]
}
# set_attrs <file> name=value...: rewrite attribute lines of a qconf-format file
set_attrs() {
    local file=$1 kv
    shift
    for kv in "$@"; do
        sed -i -E "s|^${kv%%=*}[[:space:]].*|${kv%%=*} ${kv#*=}|" "$file"
        grep -qE "^${kv%%=*} " "$file" || die "attribute ${kv%%=*} not found in $file"
    done
}

# listed <line> <cmd...>: does the command's output contain that exact line?
listed() {
    local want=$1 out
    shift
    out=$(timeout 30 "$@" 2>/dev/null) || return 1
    grep -qxF -- "$want" <<<"$out"
}

configure_hosts() {
    local h
    listed "$SELF" qconf -sh || { must qconf -ah "$SELF"; log "admin host $SELF added"; }
    listed "$SELF" qconf -ss || { must qconf -as "$SELF"; log "submit host $SELF added"; }
    for h in "${EXEC_HOSTS[@]}"; do
        # a submit host too: a job's own qsub, qrsh -inherit from a parallel job's master
        listed "$h" qconf -ss || { must "${MASTER_NS[@]}" qconf -as "$h"; log "submit host $h added"; }
        timeout 30 "${MASTER_NS[@]}" qconf -se "$h" >/dev/null 2>&1 && continue
        cat >"$WORK/exechost" <<EOF
hostname $h
load_scaling NONE
complex_values NONE
user_lists NONE
xuser_lists NONE
projects NONE
xprojects NONE
usage_scaling NONE
report_variables NONE
EOF
        must "${MASTER_NS[@]}" qconf -Ae "$WORK/exechost"
        log "exec host $h added"
    done
}

# Global config, rebuilt from the package default every time so that a damaged
# config converges back. NB: `qconf -Mconf` REPLACES the whole global config and
# exits 0 even for garbage -- hence the full file and the check afterwards.
configure_global() {
    { echo "#global:"; grep -vE '^[[:space:]]*(#|$)|^conf_version' /usr/share/gridengine/default-configuration; } \
        >"$WORK/global"
    # root jobs (default 1000); load reports every 5 s, not 40 s (a fresh execd
    # shows load values sooner); a dead execd noticed after 1 min, not 5; the
    # accounting file (qacct) written at once; a group id for each job an execd runs
    # at once (the default 65400-65500 holds 101: more slots than that on a host, and
    # the execd fails the rest, "can not find an unused add_grp_id", qacct's "failed 1
    # : assumedly before job")
    set_attrs "$WORK/global" min_uid=0 min_gid=0 load_report_time=00:00:05 max_unheard=00:01:00 \
        "gid_range=$GID_BASE-$((GID_BASE + SLOTS + SMALL_SLOTS + 100))" \
        "reporting_params=accounting=true reporting=false flush_time=00:00:01 joblog=false sharelog=00:00:00 accounting_flush_time=00:00:00"
    same "$WORK/global" qconf -sconf global && return
    must qconf -Mconf "$WORK/global"
    same "$WORK/global" qconf -sconf global || die "global config did not take (qconf -sconf global)"
    log "global config updated (min_uid/min_gid 0, fast load reports and accounting, gid_range)"
}

configure_scheduler() {
    joined qconf -ssconf >"$WORK/sconf" || die "qconf -ssconf failed"
    # schedule every second and right after each submit / job end
    set_attrs "$WORK/sconf" schedule_interval=0:0:1 flush_submit_sec=1 flush_finish_sec=1
    same "$WORK/sconf" qconf -ssconf && return
    must qconf -Msconf "$WORK/sconf"
    log "scheduler config updated (schedule_interval 0:0:1, flush_submit_sec/flush_finish_sec 1)"
}

# configure_pe NAME ALLOCATION_RULE CONTROL_SLAVES JOB_IS_FIRST_TASK
configure_pe() {
    cat >"$WORK/pe-$1" <<EOF
pe_name $1
slots 9999
user_lists NONE
xuser_lists NONE
start_proc_args NONE
stop_proc_args NONE
allocation_rule $2
control_slaves $3
job_is_first_task $4
urgency_slots min
accounting_summary FALSE
qsort_args NONE
EOF
    if timeout 30 qconf -sp "$1" >/dev/null 2>&1; then
        same "$WORK/pe-$1" qconf -sp "$1" && return
        must qconf -Mp "$WORK/pe-$1"
        log "parallel environment $1 updated"
    else
        must qconf -Ap "$WORK/pe-$1"
        log "parallel environment $1 added"
    fi
}

configure_pes() {
    # shellcheck disable=SC2016  # SGE's own $ names
    configure_pe smp '$pe_slots' FALSE TRUE
    # qrsh -inherit needs control_slaves; the master (the job script) is no task: every
    # granted slot is for the tasks it starts
    # shellcheck disable=SC2016
    configure_pe "$GANG_PE" '$round_robin' TRUE FALSE
}

# configure_queue <name> <slots> <hosts> <pes> [attr=value...]: no load thresholds
configure_queue() {
    local name=$1 slots=$2 hosts=$3 pes=$4
    shift 4
    joined qconf -sq >"$WORK/$name" || die "qconf -sq failed"   # no argument: the queue template
    # load_thresholds NONE: a busy 2-core box would put the queue into alarm state
    # (np_load_avg > 1.75) and nothing would be scheduled
    set_attrs "$WORK/$name" "qname=$name" "hostlist=$hosts" "slots=$slots" \
        load_thresholds=NONE "pe_list=$pes" "$@"
    if ! timeout 30 qconf -sq "$name" >/dev/null 2>&1; then
        must "${MASTER_NS[@]}" qconf -Aq "$WORK/$name"
        log "queue $name added ($slots slots on $hosts)"
    elif ! same "$WORK/$name" qconf -sq "$name"; then
        must "${MASTER_NS[@]}" qconf -Mq "$WORK/$name"
        log "queue $name updated ($slots slots on $hosts)"
    fi
}

# SGE puts a job without -q into any queue that has room, and a $pe_slots job even
# spreads over all queue instances of the host (measured: -pe smp 7 took 5 all.q +
# 2 tiny.q slots). So the small queue is opt-in, server-side: it offers a FORCED
# boolean complex `small`, and only jobs that request it (-l small) may run there.
# (The cell-wide default request file sge_request(5) with `-q all.q` is not enough:
# qsub replaces it with a job's own -q, but DRMAA merges them into "all.q,tiny.q".)
# GPUs as sites declare them: `gpu`, a per-slot consumable (YES: SGE multiplies a
# request by the job's slots), and `gpuj`, a per-job one (JOB); this host has
# GPU_COUNT of each (no real devices: only the scheduler's bookkeeping is tested).
readonly COMPLEXES=(
    "small small BOOL == FORCED NO FALSE 0"
    "gpu gpu INT <= YES YES 0 0"
    "gpuj gpuj INT <= YES JOB 0 0"
)
configure_complexes() {
    local cx line added=()
    cx=$(timeout 30 qconf -sc) || die "qconf -sc failed"
    for line in "${COMPLEXES[@]}"; do
        grep -q "^${line%% *}[[:space:]]" <<<"$cx" && continue
        cx+=$'\n'"$line"
        added+=("${line%% *}")
    done
    (( ${#added[@]} )) || return 0
    printf '%s\n' "$cx" >"$WORK/complexes"
    must qconf -Mc "$WORK/complexes"
    log "complexes added: ${added[*]} (small: only jobs with -l small run in $SMALL_QUEUE;" \
        "gpu: per slot, gpuj: per job)"
}

configure_gpus() {
    local want="gpu=$GPU_COUNT,gpuj=$GPU_COUNT" h
    for h in "${EXEC_HOSTS[@]}"; do
        [[ $(timeout 30 "${MASTER_NS[@]}" qconf -se "$h" | awk '$1 == "complex_values" {print $2}') == "$want" ]] \
            && continue
        must "${MASTER_NS[@]}" qconf -mattr exechost complex_values "$want" "$h"
        log "exec host $h: complex_values $want"
    done
}

# tmpdirs: each host's own directory for its jobs' TMPDIR ($SGE_STATE/tmp/HOST). The
# hosts share /tmp, and SGE names a job's TMPDIR after the job and task only: the master
# and the qrsh -inherit tasks of a parallel job on other hosts would share it, and the
# first task to end would remove it under the others' feet.
tmpdirs() {
    local h list="/tmp"
    for h in "${EXEC_HOSTS[@]}"; do
        install -d -m 1777 "$SGE_STATE/tmp/$h"
        list+=",[$h=$SGE_STATE/tmp/$h]"
    done
    echo "$list"
}

configure_queues() {
    local tmp
    configure_complexes
    configure_gpus
    tmp=$(tmpdirs)
    configure_queue "$MAIN_QUEUE" "$SLOTS" "${EXEC_HOSTS[*]}" "smp $GANG_PE" "tmpdir=$tmp"
    if [[ -n $SMALL_QUEUE ]]; then
        configure_queue "$SMALL_QUEUE" "$SMALL_SLOTS" "$SMALL_HOST" "smp $GANG_PE" complex_values=small=TRUE \
            "tmpdir=$tmp"
    fi
    # clear an error state a previous run may have left, re-enable if disabled
    timeout 30 qmod -cq '*' >/dev/null 2>&1 || true
    timeout 30 qmod -e '*' >/dev/null 2>&1 || true
}

# ---------------------------------------------------------------- readiness
# a queue instance is usable when it reports load values and has no state letters
# (u unknown, a alarm, E error, d disabled, s suspended, ...)
queue_ok() {
    local line
    line=$(timeout 10 qstat -f -q "$1@$2" 2>/dev/null | grep "^$1@") || return 1
    [[ $line != *-NA-* ]] && (( $(wc -w <<<"$line") <= 5 ))   # 6th column = states
}

# qsub -sync y blocks until the job ends, forever if it never starts: bound each try
probe_job() {
    local rc=0
    timeout $(( TIMEOUT < 30 ? TIMEOUT : 30 )) \
        qsub -sync y -b y -o /dev/null -e /dev/null -N mxbatch-up-probe true >/dev/null 2>&1 || rc=$?
    if (( rc != 0 )); then
        timeout 10 qdel -f mxbatch-up-probe >/dev/null 2>&1 || true   # don't leave it queued
    fi
    return $rc
}

# the parallel probe: a slot on each host, the master starting one task on each host of
# its PE_HOSTFILE with qrsh -inherit, each printing its host name: every host, once
probe_pe_job() {
    local out want rc=0
    rm -f "$WORK/pe.out"
    # shellcheck disable=SC2016  # for the job's shell
    printf '%s
' '#!/bin/sh'         'while read -r h _; do qrsh -inherit "$h" hostname </dev/null || exit 1; done <"$PE_HOSTFILE"'         >"$WORK/pe-probe.sh"
    out=$(timeout $(( TIMEOUT < 60 ? TIMEOUT : 60 )) qsub -sync y -j y -o "$WORK/pe.out"         -N mxbatch-up-probe -pe "$GANG_PE" "${#EXEC_HOSTS[@]}" "$WORK/pe-probe.sh" 2>&1) || rc=$?
    if (( rc != 0 )); then
        timeout 10 qdel -f mxbatch-up-probe >/dev/null 2>&1 || true
        log "parallel probe job failed ($rc): $out $(cat "$WORK/pe.out" 2>/dev/null)"
        return 1
    fi
    want=$(printf '%s
' "${EXEC_HOSTS[@]}" | sort)
    [[ $(sort "$WORK/pe.out" 2>/dev/null) == "$want" ]] ||
        die "parallel probe job printed '$(cat "$WORK/pe.out" 2>/dev/null)', not each host once"
}

wait_ready() {
    local h
    for h in "${EXEC_HOSTS[@]}"; do
        wait_for "$TIMEOUT" "queue instance $MAIN_QUEUE@$h to become usable (qstat -f)" \
            queue_ok "$MAIN_QUEUE" "$h"
    done
    if [[ -n $SMALL_QUEUE ]]; then
        wait_for "$TIMEOUT" "queue instance $SMALL_QUEUE@$SMALL_HOST to become usable" \
            queue_ok "$SMALL_QUEUE" "$SMALL_HOST"
    fi
    log "queues usable: $MAIN_QUEUE on ${EXEC_HOSTS[*]}${SMALL_QUEUE:+, $SMALL_QUEUE on $SMALL_HOST}"
    wait_for "$TIMEOUT" "probe job 'qsub -sync y -b y true'" probe_job
    log "probe job 'qsub -sync y -b y true' ran"
    wait_for "$TIMEOUT" "parallel probe job (qrsh -inherit to every host)" probe_pe_job
    log "parallel probe job: qrsh -inherit reached ${EXEC_HOSTS[*]}"
}

write_env_file() {
    mkdir -p "$STATE_DIR"
    write_atomic "$ENV_FILE" <<EOF
# written by ci/clusters/sge-up.sh; removed by sge-down.sh
export SGE_ROOT=$SGE_ROOT
export SGE_CELL=$SGE_CELL
export DRMAA_LIBRARY_PATH=$DRMAA_LIB
# No GLIBC_TUNABLES here: libdrmaa links libjemalloc, whose TLS does not fit glibc's
# default static TLS surplus ('import drmaa' fails with "libjemalloc.so.2: cannot
# allocate memory in static TLS block" unless the process starts with
# GLIBC_TUNABLES=glibc.rtld.optional_static_tls=1000000); mxbatch's DRMAA helper
# process sets it for itself, and jobs must not inherit it.
# what sge-up.sh built
export MXBATCH_SGE_QUEUE=$MAIN_QUEUE MXBATCH_SGE_SLOTS=$SLOTS MXBATCH_SGE_PE=smp
export MXBATCH_SGE_SMALL_QUEUE=$SMALL_QUEUE MXBATCH_SGE_SMALL_SLOTS=${SMALL_QUEUE:+$SMALL_SLOTS}
export MXBATCH_SGE_SMALL_REQUEST="${SMALL_QUEUE:+-l small}"
# consumables on each host: gpu (per slot), gpuj (per job), $GPU_COUNT of each
export MXBATCH_SGE_GPUS=$GPU_COUNT
# the exec hosts (test hosts of hosts-up.sh; all.q has MXBATCH_SGE_SLOTS slots on each),
# the host of the small queue, and the PE for jobs across hosts (qrsh -inherit)
export MXBATCH_SGE_HOSTS="${EXEC_HOSTS[*]}" MXBATCH_SGE_SMALL_HOST=$SMALL_HOST
export MXBATCH_SGE_GANG_PE=$GANG_PE
EOF
    log "wrote $ENV_FILE"
}

positive() { [[ $2 =~ ^[1-9][0-9]*$ ]] || die "$1 must be a positive integer, not '$2'"; }

main() {
    require_root
    positive SGE_SLOTS "$SLOTS"
    positive SGE_SMALL_SLOTS "$SMALL_SLOTS"
    positive MXBATCH_SGE_TIMEOUT "$TIMEOUT"
    case "${1:-}" in
        "") ;;
        --fresh) "$HERE/sge-down.sh" --wipe ;;
        *) echo "usage: $0 [--fresh]" >&2; exit 2 ;;
    esac
    install_packages
    load_hosts
    ensure_cell
    setup_host_names
    write_hosts_file
    start_qmaster
    configure_hosts
    configure_global
    configure_scheduler
    configure_pes
    configure_queues
    retire_local_execd
    start_execds
    wait_ready
    write_env_file
    log "SGE cluster up: $MAIN_QUEUE ($SLOTS slots on each of ${EXEC_HOSTS[*]})" \
        "${SMALL_QUEUE:+and $SMALL_QUEUE ($SMALL_SLOTS slots on $SMALL_HOST),} PEs smp $GANG_PE;" \
        "source $ENV_FILE"
}

main "$@"
