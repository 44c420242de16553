#!/usr/bin/env bash
# oar-up.sh - bring up mxbatch's OAR 2.5 test cluster (Debian's oar-server, oar-node,
# oar-user, PostgreSQL) on the namespace test hosts of hosts-up.sh, which must be up
# first (ci/test.sh starts them before OAR).
#
# PostgreSQL and OAR's server (Almighty, port 6666 on every address) run in the root
# namespace; OAR reaches its nodes, and they it, on the hosts' bridge address
# (SERVER_HOSTNAME = MXBATCH_TEST_BRIDGE_IP). Each node is one test host: OAR's own sshd
# (port 6667, user oar only: /etc/oar/sshd_config) runs inside the host's network, mount
# and UTS namespaces (hosts-exec.sh) on its address, so a job's tasks run on distinct
# IPs; the node's resources are MXBATCH_OAR_CORES cores (network_address = the host's
# address). No systemd and a policy-rc.d that blocks service starts: every daemon is
# started here, by hand, and stopped by pid (oar-down.sh).
#
# What is changed outside $MXBATCH_CLUSTER_STATE/oar (OAR reads only /etc/oar/oar.conf,
# and keeps its jobs in PostgreSQL): oar.conf (non-empty database passwords, which
# `oar-database --create` needs; CPUSET_PATH commented out, so that OAR builds no cpuset
# cgroups in the machine's shared cgroup tree; SERVER_HOSTNAME and DB_HOSTNAME: the
# bridge address; a 1 s security time between jobs instead of 60 s, and at most 1 s
# between two scheduler runs instead of 5 s), kept first as $BASE/etc/oar.conf.orig;
# PostgreSQL's listen_addresses and hba_file (ALTER SYSTEM: nodes read OAR's database;
# the rules are the cluster's own plus one for the test hosts); the database "oar";
# one admission rule: OAR's rule that refuses root and oar refuses only oar here (CI
# runs as root, as on the project's other clusters).
# The tests source $MXBATCH_CLUSTER_STATE/oar.env.
#
# Idempotent: safe when the cluster is down, half up or up. A changed oar.conf restarts
# Almighty; a node's sshd whose host was recreated (hosts-down.sh, hosts-up.sh) is
# restarted inside the new one, and its resources set Alive again.
#
# Usage: ci/clusters/oar-up.sh
# Env:   MXBATCH_CLUSTER_STATE  state root (default /tmp/mxbatch-clusters)
#        MXBATCH_OAR_TIMEOUT    seconds for each wait (default 60)
#        MXBATCH_OAR_NODES      how many test hosts are nodes (default 3)
#        MXBATCH_OAR_CORES      cores of each node (default 4; more than the machine has
#                               oversubscribes it)
set -euo pipefail

HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
# shellcheck source-path=SCRIPTDIR source=lib.sh
. "$HERE/lib.sh"
# shellcheck source-path=SCRIPTDIR source=oar-common.sh
. "$HERE/oar-common.sh"

TIMEOUT=${MXBATCH_OAR_TIMEOUT:-60}
NODE_COUNT=${MXBATCH_OAR_NODES:-3}
CORES=${MXBATCH_OAR_CORES:-4}
[[ $NODE_COUNT =~ ^[1-9]$ ]] || { echo "oar-up: MXBATCH_OAR_NODES must be 1..9" >&2; exit 2; }
[[ $CORES =~ ^[1-9][0-9]?$ ]] || { echo "oar-up: MXBATCH_OAR_CORES must be 1..99" >&2; exit 2; }
PACKAGES=(postgresql oar-server oar-server-pgsql oar-node oar-user oar-user-pgsql)

# Filled by load_hosts
NODES=()                      # host names
declare -A NODE_ADDR=()       # host -> its address
declare -A NODE_NETNS=()      # host -> "net:[inode]" of its namespace
BRIDGE_IP=
SUBNET=
HOSTS_EXEC=
HBA_FILE=$BASE/etc/pg_hba.conf

# --- packages ------------------------------------------------------------

# apt_get ARGS... : apt-get that waits (with a deadline) for a lock held by another
# apt/dpkg run on the machine.
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
    local missing=()
    mapfile -t missing < <(for p in "${PACKAGES[@]}"; do
        [[ $(dpkg-query -W -f='${Status}' "$p" 2>/dev/null) == *" installed" ]] || echo "$p"
    done)
    ((${#missing[@]})) || return 0
    log "installing ${missing[*]}"
    if ! apt_get install -y --no-install-recommends "${missing[@]}"; then
        log "install failed (stale package lists?): apt-get update and retry"
        apt_get update || die "apt-get update failed"
        apt_get install -y --no-install-recommends "${missing[@]}" \
            || die "apt-get install ${missing[*]} failed"
    fi
    log "installed OAR $(dpkg-query -W -f='${Version}' oar-server)"
}

# --- the test hosts --------------------------------------------------------

# hosts_setting NAME: the value hosts.env gives NAME (dies if none)
hosts_setting() {
    local value
    # shellcheck disable=SC1090  # written by hosts-up.sh
    value=$(. "$HOSTS_ENV" && printf '%s' "${!1:-}")
    [[ -n $value ]] || die "$HOSTS_ENV sets no $1"
    printf '%s\n' "$value"
}

# load_hosts: the first NODE_COUNT good test hosts of hosts-up.sh's map
load_hosts() {
    local name addr role netns _ good=()
    [[ -s $HOSTS_ENV ]] \
        || die "the test hosts are down ($HOSTS_ENV missing): run ci/clusters/hosts-up.sh first"
    BRIDGE_IP=$(hosts_setting MXBATCH_TEST_BRIDGE_IP)
    SUBNET=$(hosts_setting MXBATCH_TEST_SUBNET)
    HOSTS_EXEC=$(hosts_setting MXBATCH_TEST_HOSTS_EXEC)
    while read -r name addr role netns _; do
        [[ $role == good ]] || continue
        [[ -e /run/netns/$name ]] || die "test host $name is down: run ci/clusters/hosts-up.sh"
        good+=("$name")
        NODE_ADDR[$name]=$addr
        NODE_NETNS[$name]=$netns
    done < <(grep -v '^#' "$(hosts_setting MXBATCH_TEST_HOST_MAP)")
    ((${#good[@]} >= NODE_COUNT)) \
        || die "$NODE_COUNT nodes need $NODE_COUNT test hosts, hosts-up.sh made ${#good[@]}"
    NODES=("${good[@]:0:NODE_COUNT}")
}

# --- PostgreSQL and the database -------------------------------------------

# pg_cluster: "VERSION NAME STATUS" of the machine's first PostgreSQL cluster
pg_cluster() { pg_lsclusters -h 2>/dev/null | awk 'NR == 1 { print $1, $2, $4 }'; }

pg_setting() { su -s /bin/sh postgres -c "psql -XtAc 'SHOW $1'" 2>/dev/null; }

# write_hba VERSION NAME: the cluster's own pg_hba.conf, plus password logins to the
# database oar from the test hosts (oarsh and oarexec on a node read the database)
write_hba() {
    local own=/etc/postgresql/$1/$2/pg_hba.conf
    [[ -r $own ]] || die "no $own"
    {
        echo "# Generated by ci/clusters/oar-up.sh: $own, and OAR's nodes (the test hosts)"
        cat "$own"
        echo "host oar oar,oar_ro $SUBNET scram-sha-256"
    } | write_atomic "$HBA_FILE"
}

# start_postgres: PostgreSQL up, listening on localhost and the bridge address, with
# write_hba's rules (set with ALTER SYSTEM: in postgresql.auto.conf, oar-down.sh --wipe
# resets them), restarted if it had other ones
start_postgres() {
    local version name status listen="localhost,$BRIDGE_IP"
    read -r version name status <<<"$(pg_cluster)"
    [[ -n $version ]] || die "no PostgreSQL cluster (pg_lsclusters lists none)"
    write_hba "$version" "$name"
    if [[ $status != online ]]; then
        log "starting PostgreSQL $version/$name"
        pg_ctlcluster "$version" "$name" start 9>&- || die "pg_ctlcluster $version $name start failed"
        echo "$version $name" >"$BASE/run/postgres-started"   # oar-down.sh stops only this
    fi
    if [[ $(pg_setting listen_addresses) != "$listen" || $(pg_setting hba_file) != "$HBA_FILE" ]]; then
        log "PostgreSQL: listen on $listen, rules of $HBA_FILE: restarting it"
        su -s /bin/sh postgres -c "psql -Xq -c \"ALTER SYSTEM SET listen_addresses = '$listen'\" \
            -c \"ALTER SYSTEM SET hba_file = '$HBA_FILE'\"" || die "ALTER SYSTEM failed"
        pg_ctlcluster "$version" "$name" restart 9>&- || die "pg_ctlcluster $version $name restart failed"
    else
        su -s /bin/sh postgres -c "psql -XtAc 'SELECT pg_reload_conf()'" >/dev/null
    fi
}

# conf_set KEY VALUE: KEY="VALUE" in oar.conf (the line replaced, or added); 0 if changed
conf_set() {
    local line="$1=\"$2\""
    grep -qxF "$line" "$OAR_CONF" && return 1
    if grep -q "^$1=" "$OAR_CONF"; then
        sed -i "s|^$1=.*|$line|" "$OAR_CONF"
    else
        echo "$line" >>"$OAR_CONF"
    fi
}

# configure: oar.conf's test-cluster settings (the original kept once); 0 if changed
configure() {
    local changed=1 key value
    mkdir -p "$BASE/etc"
    [[ -e $BASE/etc/oar.conf.orig ]] || cp -p "$OAR_CONF" "$BASE/etc/oar.conf.orig"
    if grep -q '^CPUSET_PATH=' "$OAR_CONF"; then
        sed -i 's|^CPUSET_PATH=|#CPUSET_PATH=|' "$OAR_CONF"
        changed=0
    fi
    # an empty password keeps `oar-database --create` from creating the users
    for key in DB_BASE_PASSWD DB_BASE_PASSWD_RO; do
        grep -q "^$key=\"\"" "$OAR_CONF" || continue
        value="mxbatch-$(tr -dc a-z0-9 </dev/urandom | head -c 16)"
        conf_set "$key" "$value" && changed=0
    done
    conf_set SERVER_HOSTNAME "$BRIDGE_IP" && changed=0
    conf_set DB_HOSTNAME "$BRIDGE_IP" && changed=0
    conf_set SCHEDULER_JOB_SECURITY_TIME 1 && changed=0
    conf_set SCHEDULER_MIN_TIME_BETWEEN_2_CALLS 1 && changed=0
    return "$changed"
}

create_database() {
    oar-database --check >/dev/null 2>&1 && return 0
    log "creating OAR's database"
    oar-database --create --db-is-local >>"$BASE/log/oar-database.log" 2>&1 \
        || die "oar-database --create failed (see $BASE/log/oar-database.log)"
    oar-database --check >/dev/null 2>&1 || die "OAR's database is not ready after --create"
}

# --- nodes: OAR's sshd inside each test host -------------------------------

oar_ssh_ok() {
    su -s /bin/sh oar -c "ssh -p 6667 -o BatchMode=yes -o ConnectTimeout=5 $1 true" \
        >/dev/null 2>&1
}

# start_node_sshd HOST: OAR's sshd in HOST's namespaces, on its address (restarted if it
# runs in a namespace that is no longer the host's)
start_node_sshd() {
    local n=$1 pid pidfile=$BASE/run/sshd-$1.pid
    if pid=$(pid_from_file "$pidfile" sshd); then
        [[ $(readlink "/proc/$pid/ns/net") == "${NODE_NETNS[$n]}" ]] && return 0
        log "OAR's sshd of $n (pid $pid) runs outside host $n: restarting it"
        stop_pids "sshd $n" 10 "$pid" || die "sshd $n (pid $pid) does not stop"
    fi
    rm -f "$pidfile"
    log "starting OAR's sshd in host $n (${NODE_ADDR[$n]}:6667)"
    mkdir -p /run/sshd
    (cd / && "$HOSTS_EXEC" "$n" /usr/sbin/sshd -f "$OAR_SSHD_CONF" \
        -o "ListenAddress=${NODE_ADDR[$n]}" -o "PidFile=$pidfile" -E "$BASE/log/sshd-$n.log") \
        </dev/null >>"$BASE/log/sshd-$n.log" 2>&1 9>&- \
        || die "OAR's sshd in $n failed to start (see $BASE/log/sshd-$n.log)"
}

# --- the server ------------------------------------------------------------

server_listens() { (exec 3<>"/dev/tcp/127.0.0.1/$SERVER_PORT") 2>/dev/null; }

start_almighty() {
    almighty_pid >/dev/null && return 0
    server_listens && die "something else listens on port $SERVER_PORT (another OAR server?)"
    log "starting OAR's server (Almighty, port $SERVER_PORT)"
    # its own session, no inherited descriptors but stdio on its log
    (
        for fd in "/proc/$BASHPID/fd/"*; do
            fd=${fd##*/}
            ((fd > 2)) && eval "exec $fd>&-" 2>/dev/null
        done
        cd /
        exec setsid /usr/sbin/Almighty
    ) </dev/null >>"$BASE/log/almighty.out" 2>&1 &
    echo $! >"$BASE/run/almighty.pid"
    wait_until -s "Almighty" "$TIMEOUT" server_listens \
        || die "Almighty does not listen after ${TIMEOUT}s (see /var/log/oar.log)"
}

stop_almighty() {
    local pid pids
    pid=$(almighty_pid) || return 0
    mapfile -t pids < <(descendants "$pid")
    log "stopping Almighty (pid $pid ${pids[*]})"
    stop_pids Almighty 10 "$pid" "${pids[@]}" || die "Almighty (pid $pid) does not stop"
    rm -f "$BASE/run/almighty.pid"
}

# --- resources and admission ------------------------------------------------

add_properties() {
    local p out
    for p in cpu core host; do
        oarproperty -l | grep -qx "$p" && continue
        # host is a string; "already exists": another run added it meanwhile
        if ! out=$(oarproperty $([[ $p == host ]] && echo -c) -a "$p" 2>&1) \
                && [[ $out != *"already exists"* ]]; then
            die "oarproperty -a $p: $out"
        fi
    done
}

add_resources() {
    local n a i=0 c listed
    listed=$(oarnodes -l)
    for n in "${NODES[@]}"; do
        i=$((i + 1))
        a=${NODE_ADDR[$n]}
        if grep -qxF "$a" <<<"$listed"; then
            oarnodesetting -s Alive -h "$a" >/dev/null   # after a restart of its sshd
            continue
        fi
        log "adding node $n ($a): $CORES cores"
        for c in $(seq 1 "$CORES"); do
            oarnodesetting -a -h "$a" -p host="$a" -p cpu="$i" -p core=$((i * 100 + c)) \
                -p cpuset=$(((c - 1) % $(nproc))) >/dev/null || die "oarnodesetting -a -h $a failed"
        done
    done
}

# admit_root: OAR's rule "root and oar users are not allowed to submit jobs" refuses
# only oar on this test cluster
admit_root() {
    local id rule=$BASE/etc/admission-no-oar-user.pl
    id=$(oaradmissionrules -S -f | awk '
        /^--- \(([A-Z]+\/)?[0-9]+\) RULE #[0-9]+/ { id = $NF; sub(/^#/, "", id) }
        /root and oar users are not allowed to submit/ { print id; exit }')
    [[ -n $id ]] || return 0
    cat >"$rule" <<'EOF'
# Prevent user oar from submitting jobs (mxbatch's test cluster, ci/clusters/oar-up.sh:
# root may, as on the project's other test clusters; its CI runs as root)
die ("[ADMISSION RULE] the oar user is not allowed to submit jobs.\n") if ( $user eq "oar" );
EOF
    log "admission rule #$id: root may submit, oar may not"
    oaradmissionrules -m "$id" -r "$rule" >/dev/null || die "oaradmissionrules -m $id failed"
}

# --- the check job -----------------------------------------------------------

# job_field ID FIELD: a field of `oarstat -f -J -j ID`
job_field() {
    oarstat -f -J -j "$1" 2>/dev/null \
        | python3 -c 'import json, sys; print(next(iter(json.load(sys.stdin).values()))[sys.argv[1]])' "$2" \
        2>/dev/null
}

job_ended() { case $(job_field "$1" state) in Terminated | Error) return 0 ;; esac; return 1; }

# check_job: a job on every node whose first task reaches each node with oarsh (OAR's
# in-allocation starter) and prints the hosts' names
check_job() {
    local dir=$BASE/check id out want n
    oardel --sql "job_name = '$CHECK_NAME' AND state IN ($OAR_LIVE_STATES)" >/dev/null 2>&1 || true
    rm -rf "$dir"
    mkdir -p "$dir"
    cat >"$dir/check.sh" <<EOF
#!/bin/sh
#OAR -n $CHECK_NAME
#OAR -l /nodes=$NODE_COUNT/core=1,walltime=0:05:00
#OAR -d $dir
#OAR -O $dir/out
#OAR -E $dir/err
for node in \$(sort -u "\$OAR_NODEFILE"); do oarsh "\$node" hostname || exit 1; done
EOF
    chmod 0755 "$dir/check.sh"
    out=$(oarsub -S "$dir/check.sh" 2>&1) || die "oarsub of the check job failed: $out"
    id=$(sed -n 's/^OAR_JOB_ID=\([0-9]*\).*/\1/p' <<<"$out" | head -n 1)
    [[ -n $id ]] || die "no job id in oarsub's answer: $out"
    wait_until -s "check job $id" "$TIMEOUT" job_ended "$id" \
        || die "check job $id not ended after ${TIMEOUT}s (state $(job_field "$id" state))"
    [[ $(job_field "$id" state) == Terminated && $(job_field "$id" exit_code) == 0 ]] \
        || die "check job $id ended $(job_field "$id" state), exit status" \
            "$(job_field "$id" exit_code): $(cat "$dir/err" 2>/dev/null)"
    want=$(for n in "${NODES[@]}"; do echo "$n"; done | sort)
    [[ $(sort "$dir/out") == "$want" ]] \
        || die "check job $id: oarsh reached '$(tr '\n' ' ' <"$dir/out")', not the nodes $want"
}

write_env() {
    local n addrs=() names=()
    for n in "${NODES[@]}"; do
        addrs+=("${NODE_ADDR[$n]}")
        names+=("$n")
    done
    write_atomic "$ENV_FILE" <<EOF
# OAR test cluster (ci/clusters/oar-up.sh); OAR's tools read /etc/oar/oar.conf.
# the nodes (network_address = the test host's address) and their hosts' names
export MXBATCH_OAR_NODES="${addrs[*]}"
export MXBATCH_OAR_NODE_NAMES="${names[*]}"
export MXBATCH_OAR_CORES=$CORES
EOF
}

main() {
    local n
    require_root
    install_packages
    load_hosts
    lock_cluster
    mkdir -p "$BASE"/{etc,run,log}
    start_postgres
    if configure; then
        log "configured $OAR_CONF (original: $BASE/etc/oar.conf.orig)"
        stop_almighty
    fi
    create_database
    for n in "${NODES[@]}"; do
        start_node_sshd "$n"
    done
    for n in "${NODES[@]}"; do
        wait_until -s "OAR's sshd of $n" "$TIMEOUT" oar_ssh_ok "${NODE_ADDR[$n]}" \
            || die "user oar cannot ssh -p 6667 ${NODE_ADDR[$n]} (see $BASE/log/sshd-$n.log)"
    done
    start_almighty
    add_properties
    add_resources
    admit_root
    check_job
    write_env
    log "cluster up: $(oarnodes -s | tr -s '\n ' ' ')"
    log "env: $ENV_FILE"
}

main "$@"
