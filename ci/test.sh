#!/usr/bin/env bash
# Run the whole mxbatch test suite on a fresh machine of this kind (Debian 12, root).
#
# Installs what the tests need into ./.venv (mxbatch with the mxnet, test and docs
# extras), builds the documentation site (mkdocs build --strict), starts the test
# clusters the suite needs, runs pytest, and stops the clusters again, also on failure. pytest's "no tests ran" (exit 5) fails.
#
# Env: MXBATCH_TEST_CLUSTERS  space-separated clusters to start and require
#                             (default: sge slurm oar yarn cachefs containers); sge,
#                             slurm and oar run their execds and nodes on the namespace
#                             test hosts, so "hosts" is started before them (and stopped
#                             after them) whenever one is listed; "hosts" are also the ssh/MPI
#                             test hosts (markers ssh and mpi)
#      PYTEST_ARGS            extra pytest arguments
#      MXBATCH_TEST_WORKERS   pytest-xdist workers (default 3; 0: one process, in order)
set -euo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$ROOT"
export MXBATCH_CLUSTER_STATE=${MXBATCH_CLUSTER_STATE:-/tmp/mxbatch-clusters}
CLUSTERS=${MXBATCH_TEST_CLUSTERS-sge slurm oar yarn cachefs containers}
# SGE's execds, slurm's slurmd nodes and OAR's nodes live in the test hosts (hosts-up.sh):
# hosts come right before the first of them
if [[ " $CLUSTERS " == *" slurm "* || " $CLUSTERS " == *" sge "* || " $CLUSTERS " == *" oar "* ]]; then
    ordered=""
    for name in $CLUSTERS; do
        case $name in
            hosts) ;;
            sge | slurm | oar)
                [[ " $ordered " == *" hosts "* ]] || ordered="$ordered hosts"
                ordered="$ordered $name" ;;
            *) ordered="$ordered $name" ;;
        esac
    done
    CLUSTERS=${ordered# }
fi
STARTED=()

log() { printf '[test.sh %(%H:%M:%S)T] %s\n' -1 "$*"; }

# in reverse order: sge, slurm and oar before the hosts their daemons run in
stop_clusters() {
    local i name
    for ((i = ${#STARTED[@]} - 1; i >= 0; i--)); do
        name=${STARTED[i]}
        log "stopping $name"
        bash "ci/clusters/$name-down.sh" || log "WARNING: $name-down.sh failed"
    done
}
trap stop_clusters EXIT

log "python environment"
[ -x .venv/bin/python ] || python3 -m venv .venv
.venv/bin/python -m pip install --quiet --upgrade pip
extras="mxnet,test,docs"
for name in $CLUSTERS; do
    case $name in sge) extras="$extras,drmaa" ;; yarn) extras="$extras,yarn" ;; esac
done
.venv/bin/python -m pip install --quiet -e ".[$extras]"
export PATH="$ROOT/.venv/bin:$PATH"

# tests/test_progress.py drives the status line in a real terminal
if ! command -v tmux >/dev/null; then
    log "installing tmux"
    apt-get update -qq && apt-get install -y -qq tmux >/dev/null
fi

log "documentation site (mkdocs build --strict; the reference is generated from the code)"
site=$(mktemp -d)
NO_MKDOCS_2_WARNING=1 .venv/bin/mkdocs build --strict --quiet --site-dir "$site"
rm -rf "$site"

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
# the clusters' tests run side by side, each cluster's in one worker (tests/conftest.py
# CLUSTER_GROUPS); MXBATCH_TEST_WORKERS=0 runs everything in this process, in order
workers=${MXBATCH_TEST_WORKERS:-3}
parallel=()
[ "$workers" -gt 0 ] && parallel=(-n "$workers" --dist loadgroup)
MXBATCH_REQUIRE=$require python -m pytest -p no:cacheprovider -ra "${parallel[@]}" ${PYTEST_ARGS:-} tests
status=$?
set -e
if [ "$status" -eq 5 ]; then
    log "ERROR: pytest collected no tests"
    exit 1
fi
exit "$status"
