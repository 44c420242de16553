# shellcheck shell=bash disable=SC2034  # its variables are used by the scripts that source it
# ci/clusters/yarn-common.sh -- what yarn-up.sh and yarn-down.sh share: where the
# cluster lives, the ResourceManager's address, the daemons' pids. Sourced after lib.sh.

STATE_ROOT=${MXBATCH_CLUSTER_STATE:-/tmp/mxbatch-clusters}
STATE=$STATE_ROOT/yarn
RUN=$STATE/run
RM_WEB_PORT=8088
RM_URL=http://127.0.0.1:$RM_WEB_PORT
RM_CLASS=org.apache.hadoop.yarn.server.resourcemanager.ResourceManager
NM_CLASS=org.apache.hadoop.yarn.server.nodemanager.NodeManager
LOG_FD=2   # the YARN scripts log on stderr

# pid_of NAME CLASS -> print the pid from RUN/NAME.pid if it is a live process running
# CLASS (any name: the pid file is written by the `bash -c` that then execs java)
pid_of() { pid_from_file "$RUN/$1.pid" "" "$2"; }
