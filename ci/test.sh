#!/usr/bin/env bash
# Run the whole mxbatch test suite on a fresh machine of this kind (Debian 12, root).
#
# Installs what the tests need into ./.venv (mxbatch with the mxnet and test
# extras), starts the test clusters the suite needs, runs pytest, and stops
# the clusters again, also on failure. pytest's "no tests ran" (exit 5) fails.
#
# Env: MXBATCH_TEST_CLUSTERS  space-separated clusters to start and require
#                             (default: sge hosts slurm yarn cachefs; "hosts" are the
#                             ssh/MPI test hosts: markers ssh and mpi)
#      PYTEST_ARGS            extra pytest arguments
set -euo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$ROOT"
export MXBATCH_CLUSTER_STATE=${MXBATCH_CLUSTER_STATE:-/tmp/mxbatch-clusters}
CLUSTERS=${MXBATCH_TEST_CLUSTERS-sge hosts slurm yarn cachefs}
STARTED=()

log() { printf '[test.sh %(%H:%M:%S)T] %s\n' -1 "$*"; }

stop_clusters() {
    local name
    for name in "${STARTED[@]}"; do
        log "stopping $name"
        bash "ci/clusters/$name-down.sh" || log "WARNING: $name-down.sh failed"
    done
}
trap stop_clusters EXIT

log "python environment"
[ -x .venv/bin/python ] || python3 -m venv .venv
.venv/bin/python -m pip install --quiet --upgrade pip
extras="mxnet,test"
for name in $CLUSTERS; do
    case $name in sge) extras="$extras,drmaa" ;; yarn) extras="$extras,yarn" ;; esac
done
.venv/bin/python -m pip install --quiet -e ".[$extras]"
export PATH="$ROOT/.venv/bin:$PATH"

for name in $CLUSTERS; do
    log "starting $name"
    STARTED+=("$name")
    bash "ci/clusters/$name-up.sh"
done

require="mxnet"
for name in $CLUSTERS; do
    case $name in
        hosts) require="$require,ssh,mpi" ;;   # the markers of the tests on the test hosts
        *) require="$require,$name" ;;
    esac
done
log "pytest (required: $require)"
set +e
MXBATCH_REQUIRE=$require python -m pytest -p no:cacheprovider -ra ${PYTEST_ARGS:-} tests
status=$?
set -e
if [ "$status" -eq 5 ]; then
    log "ERROR: pytest collected no tests"
    exit 1
fi
exit "$status"
