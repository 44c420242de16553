# shellcheck shell=bash disable=SC2034  # its variables are used by the scripts that source it
# ci/clusters/sge-common.sh -- what sge-up.sh and sge-down.sh share: the cell's layout and
# its daemons' pids. Sourced after lib.sh.

export SGE_ROOT=/var/lib/gridengine SGE_CELL=default   # the Debian layout; fixed
export PATH=/usr/sbin:/usr/bin:/sbin:/bin:$PATH

readonly COMMON=$SGE_ROOT/$SGE_CELL/common
readonly SPOOL=/var/spool/gridengine          # fixed by the package's bootstrap file
readonly STATE_DIR=${MXBATCH_CLUSTER_STATE:-/tmp/mxbatch-clusters}
readonly ENV_FILE=$STATE_DIR/sge.env
readonly SGE_STATE=$STATE_DIR/sge
readonly HOSTS_FILE=$SGE_STATE/hosts   # /etc/hosts of the qmaster's and execds' namespaces
LOG_DECIMALS=1

qmaster_pids() { live_pids sge_qmaster "$SPOOL/qmaster/qmaster.pid"; }
execd_pids() { live_pids sge_execd "$SPOOL"/execd/*/execd.pid; }   # dir = execd's own name

qmaster_answers() { timeout 10 qconf -sss >/dev/null 2>&1; }
