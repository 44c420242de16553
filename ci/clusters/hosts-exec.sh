#!/usr/bin/env bash
# hosts-exec.sh - run a command inside one test host of hosts-up.sh, as if logged in
# there but without ssh: in that host's network, mount and UTS namespaces (those of its
# sshd, which every process started over ssh also has). For tests that look at a
# host's private files or sockets. The pid namespace is shared by all hosts, so a
# host's processes are also visible in this machine's /proc: --pids lists them.
#
# Usage: ci/clusters/hosts-exec.sh HOST CMD [ARG...]
#        ci/clusters/hosts-exec.sh --pids HOST
#   HOST    a host's name (mxbh1) or address (10.213.57.11)
#   CMD     runs in the caller's working directory as the host sees that path (in
#           MXBATCH_TEST_PRIVATE_DIR: the host's own; exit 125 if the host has no such
#           directory), with the caller's environment; its exit status is returned
#   --pids  print the pids of the processes in HOST's network namespace, one a line,
#           except its sshd listener (what an ssh session or a test left there)
# mxbh7 has no sshd: CMD runs in its network namespace only.
# Env: MXBATCH_CLUSTER_STATE  state root (default /tmp/mxbatch-clusters)
#      MXBATCH_HOSTS_NET      the /24 hosts-up.sh used (default 10.213.57)
set -euo pipefail

HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
# shellcheck source-path=SCRIPTDIR source=lib.sh
. "$HERE/lib.sh"
# shellcheck source-path=SCRIPTDIR source=hosts-common.sh
. "$HERE/hosts-common.sh"
LOG_FD=2

usage() { sed -n '2,/^set /{/^set /d;s/^# \{0,1\}//;p}' "$0"; }

# resolve HOST: print the host's name (from a name or an address)
resolve() {
    local h
    for h in "${ALL_HOSTS[@]}"; do
        if [[ $1 == "$h" || $1 == "$(host_ip "$h")" ]]; then
            echo "$h"
            return 0
        fi
    done
    return 1
}

list_pids() {
    local h=$1 sshd d pid
    [[ -e /run/netns/$h ]] || die "host $h is down"
    sshd=$(sshd_pid "$h" || true)
    for d in /proc/[0-9]*; do
        pid=${d#/proc/}
        [[ $pid == "$sshd" ]] && continue
        # -ef: the same namespace (device and inode of the nsfs files)
        [[ $d/ns/net -ef /run/netns/$h ]] && pid_alive "$pid" && echo "$pid"
    done
    return 0
}

main() {
    local h pid
    case ${1:-} in
        "" | -h | --help) usage; [[ -n ${1:-} ]] ;;
        --pids)
            (($# == 2)) || { usage >&2; exit 2; }
            h=$(resolve "$2") || die "unknown host: $2"
            list_pids "$h" ;;
        *)
            (($# >= 2)) || { usage >&2; exit 2; }
            h=$(resolve "$1") || die "unknown host: $1"
            shift
            [[ -e /run/netns/$h ]] || die "host $h is down (run ci/clusters/hosts-up.sh)"
            # env --chdir once inside: nsenter --wd would keep the directory of this
            # mount namespace (the submit host's $MXBATCH_TEST_PRIVATE_DIR, not the host's)
            if pid=$(sshd_pid "$h"); then
                exec nsenter --target "$pid" --net --mount --uts -- env --chdir="$PWD" -- "$@"
            fi
            [[ $h == "$REFUSE_HOST" ]] || die "the sshd of host $h is not running"
            exec nsenter --net="/run/netns/$h" -- "$@" ;;
    esac
}

main "$@"
