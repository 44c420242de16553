#!/usr/bin/env bash
# cachefs-exec.sh - run a command "on" client N of the cachefs test filesystem
# (see cachefs-up.sh): in client N's mount namespace, where $MXBATCH_CACHEFS_MNT is that
# client's caching mount. Everything else (network, pids, the rest of the filesystem,
# the environment, the working directory) is this machine's, as it is here.
#
# Usage: ci/clusters/cachefs-exec.sh N CMD [ARG...]    (as root; exit status: CMD's)
# Env:   MXBATCH_CLUSTER_STATE  state root (default /tmp/mxbatch-clusters)
set -euo pipefail

BASE=${MXBATCH_CLUSTER_STATE:-/tmp/mxbatch-clusters}/cachefs

if (($# < 2)) || [[ ! $1 =~ ^[1-9][0-9]*$ ]]; then
    echo "usage: ${0##*/} N CMD [ARG...]" >&2
    exit 2
fi
NS=$BASE/ns/c$1
shift
# Only a namespace bound to the file (nsfs) is a client: a plain file would make nsenter
# fail with a less helpful message.
if ! awk -v p="$NS" '$5 == p && / - nsfs / { found = 1 } END { exit !found }' /proc/self/mountinfo; then
    echo "${0##*/}: no client ${NS##*/c} (is cachefs up? see ci/clusters/cachefs-up.sh)" >&2
    exit 2
fi
# --wd: setns() into a mount namespace moves to its root; stay where we are
exec nsenter --mount="$NS" --wd="$PWD" -- "$@"
