# shellcheck shell=bash disable=SC2034  # its variables are used by the scripts that source it
# ci/clusters/cachefs/common.sh -- what cachefs-up.sh and cachefs-down.sh share: the layout,
# the lock, the namespaces and daemons of the clients. Sourced after lib.sh; the script sets
# TIMEOUT (seconds for each wait).
#
#   $BASE/export      the shared directory (the "server's" export)
#   $BASE/mnt         where each client mounts it, in its own mount namespace; in the root
#                     namespace a plain bind mount of export (uncached)
#   $BASE/ns/cN       client N's mount namespace (an nsfs bind mount), on a private bind
#                     mount of $BASE/ns
#   $BASE/run/cN.pid  client N's FUSE daemon (cachefs/cachefs.py); its log: $BASE/log/cN.log
#   $BASE/venv        Python with mfusepy, for the daemons
#   $BASE/config      what the running clients were started with

STATE_ROOT=${MXBATCH_CLUSTER_STATE:-/tmp/mxbatch-clusters}
BASE=$STATE_ROOT/cachefs
EXPORT=$BASE/export
MNT=$BASE/mnt
NSDIR=$BASE/ns
RUN=$BASE/run
ENV_FILE=$STATE_ROOT/cachefs.env

# lock_cachefs: hold $BASE/lock (fd 9) for the rest of this run, so that cachefs-up.sh and
# cachefs-down.sh never run at the same time (again if a down --wipe removed it meanwhile)
lock_cachefs() {
    local try
    for try in 1 2 3; do
        mkdir -p "$BASE"
        exec 9>>"$BASE/lock"
        flock -w "$TIMEOUT" 9 || die "another cachefs-up/down holds $BASE/lock"
        [[ /proc/$$/fd/9 -ef $BASE/lock ]] && return 0
    done
    die "$BASE/lock keeps being removed"
}

# mount_type PATH [PID]: print the type of what is mounted at PATH (the last mount there)
# in the mount namespace of PID (default: this one); 1 if nothing is. Mount points with
# blanks are written \040 in mountinfo: this state dir has none (cachefs-up.sh checks).
mount_type() {
    awk -v p="$1" '$5 == p { for (i = 7; $i != "-"; i++); t = $(i + 1) } END { if (t == "") exit 1; print t }' \
        "/proc/${2:-self}/mountinfo" 2>/dev/null
}

# ns_file N / ns_alive N: client N's namespace file; is a namespace bound to it?
ns_file() { echo "$NSDIR/c$1"; }
ns_alive() { [[ $(mount_type "$(ns_file "$1")") == nsfs ]]; }

# client_pids N: the processes on client N: in its mount namespace, or in one made from
# it (they hold a copy of its FUSE mount), its daemon included
client_pids() {
    local n=$1 ino
    {
        if ns_alive "$n" && ino=$(stat -c %i "$(ns_file "$n")"); then
            find /proc/[0-9]*/ns/mnt -maxdepth 0 -lname "mnt:\[$ino\]" 2>/dev/null
        fi
        grep -lF -- " - fuse.cachefs $(fs_name "$n") " /proc/[0-9]*/mountinfo 2>/dev/null
    } | sed -n 's|^/proc/\([0-9]*\)/.*|\1|p' | sort -un
}

# fs_name N: the source of client N's mount in mountinfo, unique to this state dir
fs_name() { echo "cachefs-c$1:$EXPORT"; }

# unmount_client N: unmount whatever is mounted at $MNT on client N (a live mount, or
# one left by a killed daemon: "Transport endpoint is not connected"), lazily
unmount_client() {
    # shellcheck disable=SC2016  # $1: the inner shell's
    in_client "$1" sh -c 'while umount -c -l "$1" 2>/dev/null; do :; done' sh "$MNT"
}

# daemon_pid N: the live FUSE daemon of client N, checked by its command line
daemon_pid() {
    pid_from_file "$RUN/c$1.pid" "" "--name $(fs_name "$1") $EXPORT "
}

# clients_known: the numbers of all clients with a namespace file or a pid file, sorted
clients_known() {
    local f n
    for f in "$NSDIR"/c* "$RUN"/c*.pid; do
        n=${f##*/c}
        n=${n%.pid}
        [[ $n =~ ^[0-9]+$ ]] && echo "$n"
    done | sort -un
}

# in_client N CMD...: run CMD in client N's mount namespace (at most 20 s)
in_client() {
    local n=$1
    shift
    timeout 20 nsenter --mount="$(ns_file "$n")" --wd=/ -- "$@"
}
