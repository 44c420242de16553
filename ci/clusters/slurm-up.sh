#!/usr/bin/env bash
# slurm-up.sh - bring up mxbatch's multi-node Slurm test cluster on the namespace test
# hosts of hosts-up.sh (which must be up first: ci/test.sh starts them before Slurm).
#
# slurmctld and munged run in the root namespace; slurmctld is reached on the hosts'
# bridge address (MXBATCH_TEST_BRIDGE_IP, 10.213.57.1), from here and from the hosts.
# Each node's slurmd runs inside one test host (its network, mount and UTS namespaces,
# like the host's sshd: hosts-exec.sh), NodeName = NodeHostname = the host's name,
# NodeAddr = its address, so the tasks of a job run on distinct IPs:
#   partition debug (default): mxbh1..mxbh3, 4 CPUs, 4 GB and 2 fake GPUs each
#   partition tiny:            mxbh4, 1 CPU (tests fill it to starve jobs), no GPU
# The GPUs are GRES (GresTypes=gpu, Gres=gpu:2, gres.conf): $BASE/dev/gpu0, gpu1...,
# symbolic links to distinct character devices (/dev/null, /dev/zero...), so that
# Slurm numbers them from the names as it does /dev/nvidia0..., and gives a job or
# step that asks for them (--gres=gpu:K, --gpus=K) CUDA_VISIBLE_DEVICES. Jobs that
# ask for none see no difference.
# Everything (config, munge key and socket, state, spool, logs, pid files)
# lives under $MXBATCH_CLUSTER_STATE/slurm; nothing is written to /etc.
# The tests source $MXBATCH_CLUSTER_STATE/slurm.env (it exports SLURM_CONF).
#
# Idempotent: safe when the cluster is down, half up or up. A changed
# configuration restarts the daemons (state and job ids are kept;
# slurm-down.sh --wipe starts from scratch); a slurmd whose host was recreated
# (hosts-down.sh, hosts-up.sh) is restarted inside the new one.
#
# Usage: ci/clusters/slurm-up.sh
# Env:   MXBATCH_CLUSTER_STATE  state root (default /tmp/mxbatch-clusters)
#        MXBATCH_SLURM_TIMEOUT  seconds for each wait (default 60)
#        MXBATCH_SLURM_NODES    nodes in partition debug (default 3; the rest of the
#                               good test hosts, at least one, make partition tiny)
#        MXBATCH_SLURM_GPUS     fake GPUs of each debug node (default 2; 0..5, 0: no
#                               GRES at all)
#        MXBATCH_SLURM_CPUS     CPUs each debug node advertises (default 4; more than
#                               the machine's cores oversubscribes it: bench/scale.py)
#        MXBATCH_SLURM_MESSAGE_TIMEOUT  MessageTimeout and BatchStartTimeout, seconds
#                               (default 10, Slurm's; bench/scale.py's 1,000 tasks: 120)
set -euo pipefail

HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
# shellcheck source-path=SCRIPTDIR source=lib.sh
. "$HERE/lib.sh"
# shellcheck source-path=SCRIPTDIR source=slurm-common.sh
. "$HERE/slurm-common.sh"

TIMEOUT=${MXBATCH_SLURM_TIMEOUT:-60}
MUNGE_SOCKET=$BASE/munge/munge.socket
MUNGE_KEY=$BASE/munge/munge.key

CTLD_PORT=6817                # SGE uses 6444/6445; each slurmd: 6818 on its host's address
HOSTS_ENV=$STATE_ROOT/hosts.env
# Partition debug has the first N good hosts. A heterogeneous job needs one node per
# component here (see below), so N=3 fits scheduler + server + worker.
DEBUG_COUNT=${MXBATCH_SLURM_NODES:-3}
if [[ ! $DEBUG_COUNT =~ ^[1-9][0-9]?$ ]] || ((DEBUG_COUNT < 2)); then
    echo "slurm-up: MXBATCH_SLURM_NODES must be 2..99, not '$DEBUG_COUNT'" >&2
    exit 2
fi
# Filled by load_hosts from hosts-up.sh's host map:
DEBUG_NODES=()                # node names (= host names) of partition debug
TINY_NODE=                    # the node of partition tiny
NODES=()                      # all of them, in order
declare -A NODE_ADDR=()       # node -> its address
declare -A NODE_NETNS=()      # node -> "net:[inode]" of its host
BRIDGE_IP=
HOSTS_EXEC=
DEBUG_CPUS=${MXBATCH_SLURM_CPUS:-4}  # advertised (config_overrides), not real cores
if [[ ! $DEBUG_CPUS =~ ^[1-9][0-9]{0,3}$ ]]; then
    echo "slurm-up: MXBATCH_SLURM_CPUS must be 1..9999, not '$DEBUG_CPUS'" >&2
    exit 2
fi
# The fake GPUs of each debug node (GRES): links named gpu0, gpu1... to these devices
GPU_DEVICES=(/dev/null /dev/zero /dev/full /dev/random /dev/urandom)
DEBUG_GPUS=${MXBATCH_SLURM_GPUS:-2}
if [[ ! $DEBUG_GPUS =~ ^[0-9]$ ]] || ((DEBUG_GPUS > ${#GPU_DEVICES[@]})); then
    echo "slurm-up: MXBATCH_SLURM_GPUS must be 0..${#GPU_DEVICES[@]}, not '$DEBUG_GPUS'" >&2
    exit 2
fi
GRES_CONF=$BASE/etc/gres.conf
TINY_CPUS=1
MESSAGE_TIMEOUT=${MXBATCH_SLURM_MESSAGE_TIMEOUT:-10}
if [[ ! $MESSAGE_TIMEOUT =~ ^[1-9][0-9]{0,3}$ ]]; then
    echo "slurm-up: MXBATCH_SLURM_MESSAGE_TIMEOUT must be 1..9999, not '$MESSAGE_TIMEOUT'" >&2
    exit 2
fi
NODE_MEM_MB=4096

# start_daemon LOG CMD... : run a self-daemonizing CMD with stdio on LOG and
# no other inherited descriptors (a caller's pipe held open by a daemon
# would hang it). Fails with the tail of LOG if CMD fails.
start_daemon() {
    local out=$1
    shift
    if ! (
        for fd in "/proc/$BASHPID/fd/"*; do
            fd=${fd##*/}
            ((fd > 2)) && eval "exec $fd>&-" 2>/dev/null
        done
        exec "$@"
    ) </dev/null >>"$out" 2>&1; then
        tail -n 20 "$out" >&2 || true
        return 1
    fi
}

# --- packages ------------------------------------------------------------

# apt_get ARGS... : apt-get that waits (with a deadline) for a lock held by
# another apt/dpkg run on the machine.
apt_get() {
    local deadline=$((SECONDS + 600)) out
    while :; do
        if out=$(DEBIAN_FRONTEND=noninteractive apt-get -q \
                -o DPkg::Lock::Timeout=60 "$@" 2>&1); then
            return 0
        fi
        if grep -qiE 'could not get lock|unable to lock' <<<"$out" \
                && ((SECONDS < deadline)); then
            log "apt is locked by another process, retrying"
            sleep 3
            continue
        fi
        printf '%s\n' "$out" | tail -n 20 >&2
        return 1
    done
}

install_packages() {
    local pkgs=(slurmctld slurmd slurm-client munge) cmd missing=0
    for cmd in slurmctld slurmd sbatch srun squeue scontrol scancel sinfo \
            munged munge unmunge mungekey; do
        command -v "$cmd" >/dev/null || missing=1
    done
    ((missing)) || return 0
    log "installing ${pkgs[*]}"
    if ! apt-cache show "${pkgs[@]}" >/dev/null 2>&1; then
        log "package lists lack them: apt-get update"
        apt_get update || die "apt-get update failed"
    fi
    if ! apt_get install -y --no-install-recommends "${pkgs[@]}"; then
        log "install failed (stale package lists?): apt-get update and retry"
        apt_get update || die "apt-get update failed"
        apt_get install -y --no-install-recommends "${pkgs[@]}" \
            || die "apt-get install ${pkgs[*]} failed"
    fi
    log "installed $(dpkg-query -W -f='${Version}' slurmctld)"
}

# --- munge ---------------------------------------------------------------

munge_ok() {
    munge -n -S "$MUNGE_SOCKET" 2>/dev/null \
        | unmunge -S "$MUNGE_SOCKET" >/dev/null 2>&1
}

start_munge() {
    mkdir -p "$BASE/munge"
    chmod 0755 "$BASE/munge"     # the socket must be reachable by all users
    if [[ ! -s $MUNGE_KEY ]]; then
        log "creating munge key"
        mungekey --create --keyfile="$MUNGE_KEY"
    fi
    chmod 0400 "$MUNGE_KEY"
    if pid_from_file "$BASE/run/munged.pid" munged >/dev/null && munge_ok; then
        return 0
    fi
    log "starting munged (socket $MUNGE_SOCKET)"
    # --force: take over a socket/lock left by a killed munged
    start_daemon "$BASE/log/munged.out" munged --force \
        --socket="$MUNGE_SOCKET" --key-file="$MUNGE_KEY" \
        --pid-file="$BASE/run/munged.pid" --log-file="$BASE/log/munged.log" \
        --seed-file="$BASE/munge/munge.seed" \
        || die "munged failed to start (see $BASE/log/munged.log)"
    wait_until -s munged "$TIMEOUT" munge_ok \
        || die "munged does not answer after ${TIMEOUT}s (see $BASE/log/munged.log)"
}

# --- configuration -------------------------------------------------------

# load_hosts: the good test hosts of hosts-up.sh (its env file and host map); dies
# with what to run when the hosts are down
load_hosts() {
    local name addr role netns _ good=()
    [[ -s $HOSTS_ENV ]] \
        || die "the test hosts are down ($HOSTS_ENV missing): run ci/clusters/hosts-up.sh first"
    # (read in a subshell: its Open MPI settings must not reach the daemons)
    BRIDGE_IP=$(hosts_setting MXBATCH_TEST_BRIDGE_IP)
    HOSTS_EXEC=$(hosts_setting MXBATCH_TEST_HOSTS_EXEC)
    while read -r name addr role netns _; do
        [[ $role == good ]] || continue
        [[ -e /run/netns/$name ]] || die "test host $name is down: run ci/clusters/hosts-up.sh"
        good+=("$name")
        NODE_ADDR[$name]=$addr
        NODE_NETNS[$name]=$netns
    done < <(grep -v '^#' "$(hosts_setting MXBATCH_TEST_HOST_MAP)")
    ((${#good[@]} > DEBUG_COUNT)) \
        || die "$DEBUG_COUNT debug nodes + 1 tiny node need $((DEBUG_COUNT + 1)) test hosts," \
            "hosts-up.sh made ${#good[@]}"
    DEBUG_NODES=("${good[@]:0:DEBUG_COUNT}")
    TINY_NODE=${good[DEBUG_COUNT]}
    NODES=("${DEBUG_NODES[@]}" "$TINY_NODE")
}

# hosts_setting NAME: the value hosts.env gives NAME (dies if none)
hosts_setting() {
    local value
    # shellcheck disable=SC1090  # written by hosts-up.sh
    value=$(. "$HOSTS_ENV" && printf '%s' "${!1:-}")
    [[ -n $value ]] || die "$HOSTS_ENV sets no $1"
    printf '%s\n' "$value"
}

# node_lines: one NodeName line per node: its host's name and address
node_lines() {
    local n cpus gres
    for n in "${NODES[@]}"; do
        cpus=$DEBUG_CPUS gres=
        ((DEBUG_GPUS)) && gres=" Gres=gpu:$DEBUG_GPUS"
        [[ $n == "$TINY_NODE" ]] && cpus=$TINY_CPUS gres=
        echo "NodeName=$n NodeHostname=$n NodeAddr=${NODE_ADDR[$n]} CPUs=$cpus$gres"
    done
}

# fake_gpus: $BASE/dev/gpu<i> -> a distinct character device, one per GPU of a node
# (every node's slurmd sees this machine's /tmp and /dev)
fake_gpus() {
    local i dev
    mkdir -p "$BASE/dev"
    for ((i = 0; i < DEBUG_GPUS; i++)); do
        dev=${GPU_DEVICES[i]}
        [[ -c $dev ]] || die "$dev is no character device here: cannot fake GPU $i"
        [[ $(readlink "$BASE/dev/gpu$i" 2>/dev/null) == "$dev" ]] \
            || ln -sfn "$dev" "$BASE/dev/gpu$i"
    done
}

# write_gres: gres.conf (next to slurm.conf, where Slurm looks for it); 0 if it
# changed
write_gres() {
    local new
    new=$(mktemp "$BASE/etc/gres.conf.XXXXXX")
    {
        echo "# Generated by ci/clusters/slurm-up.sh: fake GPUs, links to character devices."
        if ((DEBUG_GPUS)); then
            echo "NodeName=$(IFS=,; echo "${DEBUG_NODES[*]}") Name=gpu" \
                "File=$BASE/dev/gpu[0-$((DEBUG_GPUS - 1))]"
        fi
    } >"$new"
    chmod 0644 "$new"
    if cmp -s "$new" "$GRES_CONF"; then
        rm -f "$new"
        return 1
    fi
    mv -f "$new" "$GRES_CONF"
}

# write_conf: slurm.conf and gres.conf; 0 if either changed
write_conf() {
    local host new gres_changed=1 gres_types=
    host=$(hostname -s)
    fake_gpus
    write_gres && gres_changed=0
    ((DEBUG_GPUS)) && gres_types="GresTypes=gpu"

    new=$(mktemp "$BASE/etc/slurm.conf.XXXXXX")
    cat >"$new" <<EOF
# Generated by ci/clusters/slurm-up.sh: mxbatch test cluster, one slurmd in each
# namespace test host (hosts-up.sh), slurmctld on their bridge address.
ClusterName=mxbatch
$gres_types
SlurmctldHost=$host($BRIDGE_IP)
SlurmctldPort=$CTLD_PORT
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
CredType=cred/munge
AuthInfo=socket=$MUNGE_SOCKET
StateSaveLocation=$BASE/state
SlurmdSpoolDir=$BASE/spool/%n
SlurmctldPidFile=$BASE/run/slurmctld.pid
SlurmdPidFile=$BASE/run/slurmd-%n.pid
SlurmctldLogFile=$BASE/log/slurmctld.log
SlurmdLogFile=$BASE/log/slurmd-%n.log
SlurmctldDebug=info
SlurmdDebug=info
# No cgroups here: plain process tracking, no task binding/affinity.
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
MpiDefault=none
SwitchType=switch/none
# Nodes advertise their configured CPUs/memory, not the hardware's.
SlurmdParameters=config_overrides
SelectType=select/cons_tres
SelectTypeParameters=CR_CPU
# Fast scheduling. Heterogeneous jobs are started only by the backfill
# scheduler, hence bf_interval=1 (default 30 s); its plan reserves whole
# nodes, so the components of one such job never share a node: a job with
# more components than the partition has nodes stays PENDING (Resources).
SchedulerType=sched/backfill
SchedulerParameters=sched_interval=1,sched_min_interval=0,batch_sched_delay=0,bf_interval=1
# No accounting daemon: sacct does not work, use squeue/scontrol.
AccountingStorageType=accounting_storage/none
JobAcctGatherType=jobacct_gather/none
JobCompType=jobcomp/none
# Finished jobs stay visible to 'scontrol show job' for an hour.
MinJobAge=3600
ReturnToService=2
KillWait=2
InactiveLimit=0
SlurmctldTimeout=30
SlurmdTimeout=60
# A node that cannot answer within MessageTimeout, or confirm a batch job's launch
# within BatchStartTimeout, has the job requeued (and killed if it had started): the
# defaults (10 s) hold up to 256 array tasks on this 2-core machine, bench/scale.py's
# 512 and 1,000 need more (MXBATCH_SLURM_MESSAGE_TIMEOUT).
MessageTimeout=$MESSAGE_TIMEOUT
BatchStartTimeout=$MESSAGE_TIMEOUT
# Every node is a test host: a network namespace with its own address and hostname.
NodeName=DEFAULT RealMemory=$NODE_MEM_MB State=UNKNOWN
$(node_lines)
# LLN: put each job on the least loaded node, so that small jobs (array
# tasks, one job per role) spread over the nodes instead of packing node1.
PartitionName=debug Nodes=$(IFS=,; echo "${DEBUG_NODES[*]}") Default=YES LLN=YES MaxTime=INFINITE State=UP
PartitionName=tiny Nodes=$TINY_NODE MaxTime=INFINITE State=UP
EOF
    chmod 0644 "$new"
    if cmp -s "$new" "$CONF"; then
        rm -f "$new"
        return "$gres_changed"
    fi
    mv -f "$new" "$CONF"
}

# --- daemons -------------------------------------------------------------

start_slurmctld() {
    if pid_from_file "$BASE/run/slurmctld.pid" slurmctld >/dev/null; then
        return 0
    fi
    log "starting slurmctld (port $CTLD_PORT)"
    # -i: ignore state files that cannot be recovered instead of aborting
    start_daemon "$BASE/log/slurmctld.out" slurmctld -i \
        || die "slurmctld failed to start (see $BASE/log/slurmctld.log)"
}

# start_slurmd NODE: NODE's slurmd runs inside its test host (restarted if it runs in
# a namespace that is no longer the host's: the hosts were recreated)
start_slurmd() {
    local n=$1 pid
    mkdir -p "$BASE/spool/$n"
    if pid=$(pid_from_file "$BASE/run/slurmd-$n.pid" slurmd); then
        [[ $(readlink "/proc/$pid/ns/net") == "${NODE_NETNS[$n]}" ]] && return 0
        log "slurmd -N $n (pid $pid) runs outside host $n: restarting it"
        stop_pids "slurmd $n" "$TIMEOUT" "$pid" || die "slurmd $n (pid $pid) does not stop"
    fi
    rm -f "$BASE/run/slurmd-$n.pid"
    log "starting slurmd -N $n in host $n (${NODE_ADDR[$n]})"
    # hosts-exec.sh: the network, mount and UTS namespaces of the host's sshd
    (cd / && start_daemon "$BASE/log/slurmd-$n.out" "$HOSTS_EXEC" "$n" slurmd -N "$n") \
        || die "slurmd -N $n failed to start (see $BASE/log/slurmd-$n.log)"
}

# nodes_idle: true when every node is idle; resumes drained/down nodes
# (left so by an earlier, killed run) on the way.
nodes_idle() {
    local states bad=0 n st
    states=$(sinfo -h -N -o '%N %t' 2>/dev/null | sort -u) || return 1
    [[ -n $states ]] || return 1
    while read -r n st; do
        case $st in
            idle) ;;
            drain | drng | down | fail | failg)
                scontrol update NodeName="$n" State=RESUME 2>/dev/null || true
                bad=1 ;;
            *) bad=1 ;;
        esac
    done <<<"$states"
    NODE_STATES=$(tr '\n' ' ' <<<"$states")
    ((bad == 0))
}

# --- checks --------------------------------------------------------------

# job_state ID: print the job's state (PENDING, RUNNING, COMPLETED, ...).
job_state() {
    scontrol -o show job "$1" 2>/dev/null | grep -o 'JobState=[A-Z_]*' | cut -d= -f2
}

job_done() {
    case $(job_state "$1") in
        PENDING | CONFIGURING | RUNNING | COMPLETING | "") return 1 ;;
    esac
}

check_jobs() {
    local id st out want
    # one task on each debug node: each runs in its own host
    out=$(timeout "$TIMEOUT" srun --quiet -p debug -N "$DEBUG_COUNT" --ntasks-per-node=1 \
        -J mxbatch-up-check -t 1 hostname) || die "srun on all debug nodes failed (see $BASE/log/)"
    want=$(printf '%s\n' "${DEBUG_NODES[@]}")
    [[ $(sort <<<"$out") == "$want" ]] \
        || die "srun -N $DEBUG_COUNT hostname printed '$out', not the debug hosts"
    timeout "$TIMEOUT" srun --quiet -p tiny -n 1 -J mxbatch-up-check -t 1 true \
        || die "srun on partition tiny failed (see $BASE/log/)"
    if ((DEBUG_GPUS)); then
        # the GRES: a step that asks for every GPU of a node is told their indexes
        want=$(seq -s, 0 $((DEBUG_GPUS - 1)))
        out=$(timeout "$TIMEOUT" srun --quiet -p debug -N 1 --gres="gpu:$DEBUG_GPUS" \
            -J mxbatch-up-check -t 1 printenv CUDA_VISIBLE_DEVICES) \
            || die "srun --gres=gpu:$DEBUG_GPUS failed (see $BASE/log/)"
        [[ $out == "$want" ]] \
            || die "srun --gres=gpu:$DEBUG_GPUS got CUDA_VISIBLE_DEVICES='$out', not '$want'"
    fi
    id=$(sbatch --parsable -J mxbatch-up-check -t 1 -o /dev/null -D / --wrap true) \
        || die "sbatch failed"
    wait_until -s "batch job $id" "$TIMEOUT" job_done "$id" \
        || die "batch job $id not finished after ${TIMEOUT}s"
    st=$(job_state "$id")
    [[ $st == COMPLETED ]] || die "batch job $id ended $st (see $BASE/log/)"
}

write_env() {
    write_atomic "$ENV_FILE" <<EOF
# Slurm test cluster (ci/clusters/slurm-up.sh); source before sbatch etc.
export SLURM_CONF=$CONF
EOF
}

main() {
    local n
    install_packages
    load_hosts
    mkdir -p "$BASE"/{etc,state,spool,run,log}
    export SLURM_CONF=$CONF
    lock_cluster

    start_munge
    if write_conf; then
        log "wrote $CONF"
        if pid_from_file "$BASE/run/slurmctld.pid" slurmctld >/dev/null \
                || compgen -G "$BASE/run/slurmd-*.pid" >/dev/null; then
            log "configuration changed: restarting the Slurm daemons"
            MXBATCH_SLURM_LOCKED=1 "$HERE/slurm-down.sh" --keep-munge \
                || die "could not stop the running daemons"
        fi
    fi
    start_slurmctld
    wait_until -s slurmctld "$TIMEOUT" ctld_up \
        || die "slurmctld does not answer after ${TIMEOUT}s (see $BASE/log/slurmctld.log)"
    # A check job of an earlier run that slurmctld lost track of (killed
    # before saving its end) would keep its nodes allocated until its limit.
    scancel --quiet --name=mxbatch-up-check 2>/dev/null || true
    for n in "${NODES[@]}"; do
        start_slurmd "$n"
    done
    NODE_STATES=
    wait_until -s "idle nodes" "$TIMEOUT" nodes_idle \
        || die "nodes not idle after ${TIMEOUT}s: ${NODE_STATES:-no answer} (see $BASE/log/)"
    check_jobs
    write_env
    log "cluster up: $(sinfo -h -o '%P=%N(%c cpus,%G,%t)' | tr '\n' ' ')" \
        "on $(for n in "${NODES[@]}"; do printf '%s ' "${NODE_ADDR[$n]}"; done)"
    log "env: $ENV_FILE (SLURM_CONF=$CONF)"
}

main "$@"
