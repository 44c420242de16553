# shellcheck shell=bash disable=SC2034  # its variables are used by the scripts that source it
# ci/clusters/oar-common.sh -- what oar-up.sh and oar-down.sh share: where the cluster
# lives, OAR's own fixed paths, the lock. Sourced after lib.sh; the script sets TIMEOUT
# (seconds for each wait).

STATE_ROOT=${MXBATCH_CLUSTER_STATE:-/tmp/mxbatch-clusters}
BASE=$STATE_ROOT/oar
ENV_FILE=$STATE_ROOT/oar.env
HOSTS_ENV=$STATE_ROOT/hosts.env
# OAR 2.5 reads its configuration from here only (oarsub, oarstat, Almighty, oarexec)
OAR_CONF=/etc/oar/oar.conf
# OAR's own sshd (the oar-node package's configuration: port 6667, user oar only)
OAR_SSHD_CONF=/etc/oar/sshd_config
SERVER_PORT=6666
# the name oar-up.sh's check job runs under (an earlier run's leftovers are deleted)
CHECK_NAME=mxbatch-up-check

# oar_states_live: the states of a job that has not ended (oarstat/oardel --sql)
OAR_LIVE_STATES="'Waiting','Hold','toLaunch','toError','toAckReservation','Launching',\
'Running','Suspended','Resuming','Finishing'"

# lock_cluster: hold $BASE/lock (fd 9) for the rest of this run, so that oar-up.sh and
# oar-down.sh never run at the same time
lock_cluster() {
    mkdir -p "$BASE"
    exec 9>"$BASE/lock"
    flock -w "$TIMEOUT" 9 || die "another oar-up/down holds $BASE/lock"
}

# descendants PID: every descendant of PID, deepest first
descendants() {
    local child
    for child in $(ps -o pid= --ppid "$1" 2>/dev/null); do
        descendants "$child"
        echo "$child"
    done
}

# almighty_pid: the live Almighty this cluster started (its pid file), else 1
almighty_pid() { pid_from_file "$BASE/run/almighty.pid" "" Almighty; }
