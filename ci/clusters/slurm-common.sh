# shellcheck shell=bash disable=SC2034  # its variables are used by the scripts that source it
# ci/clusters/slurm-common.sh -- what slurm-up.sh and slurm-down.sh share: where the
# cluster lives, slurmctld's health, the lock. Sourced after lib.sh; the script sets
# TIMEOUT (seconds for each wait).

STATE_ROOT=${MXBATCH_CLUSTER_STATE:-/tmp/mxbatch-clusters}
BASE=$STATE_ROOT/slurm
CONF=$BASE/etc/slurm.conf
ENV_FILE=$STATE_ROOT/slurm.env

ctld_up() { [[ $(timeout 10 scontrol ping 2>/dev/null) == *"is UP"* ]]; }

# lock_cluster: hold $BASE/lock (fd 9) for the rest of this run, so that slurm-up.sh
# and slurm-down.sh never run at the same time
lock_cluster() {
    exec 9>"$BASE/lock"
    flock -w "$TIMEOUT" 9 || die "another slurm-up/down holds $BASE/lock"
}
