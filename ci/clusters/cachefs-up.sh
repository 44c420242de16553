#!/usr/bin/env bash
# cachefs-up.sh - bring up mxbatch's "caching NFS" test filesystem: one shared directory
# (the export) and K clients, each of which sees it through a mount that caches like a
# Linux NFS client, so that a writer on one client and a reader on another disagree for
# a while, as on a real cluster's shared storage.
#
#   $MXBATCH_CLUSTER_STATE/cachefs/export  the export (the "server" side)
#   $MXBATCH_CLUSTER_STATE/cachefs/mnt     the common mount path. In client N's mount
#       namespace a FUSE mount of the export (ci/clusters/cachefs/cachefs.py, one daemon
#       per client, with caches of its own); in the root namespace a plain bind mount of
#       the export: uncached, the server's own view.
#   ci/clusters/cachefs-exec.sh N CMD...   runs CMD "on" client N (in its mount namespace).
# The tests source $MXBATCH_CLUSTER_STATE/cachefs.env (MXBATCH_CACHEFS_* variables).
#
# What a client models (TIMEOUT = MXBATCH_CACHEFS_TIMEOUT, 30 s by default), for changes
# made by another client or in the export. Measured on Linux 6.18, libfuse 3.14, mfusepy
# 3.1.1: a reader on client 2 looks once, client 1 writes, the reader polls every 50 ms:
#   (a) negative lookups: a name looked up while missing stays missing (ENOENT to stat()
#       and open()) for TIMEOUT s after that lookup. Measured: visible 5.01-5.04 s after
#       the first lookup with TIMEOUT=5, 30.05 s with TIMEOUT=30; never earlier.
#   (b) attributes: stat() serves a name's first-fetched attributes (size, mtime, inode)
#       for TIMEOUT s, after a write-temp+rename or an in-place write elsewhere alike.
#       Measured: as (a), the old size and inode until then.
#   (c) directory listings: readdir()/os.listdir() serves a directory's first listing for
#       TIMEOUT s (real NFS can; bindfs cannot). Measured: as (a).
#   (d) close-to-open: open() of a name the client does not cache as missing revalidates
#       it, so the open reads the current file, whole (after a rename over it, a growth
#       to 3 MB, a shrink), fstat() of it and later stat() calls show the current
#       attributes. Measured: 492 of 492 opens during the stale window of (b) read the
#       new content; never a read cut to the cached size.
#   (e) own changes are seen at once by the client that made them (create, write,
#       rename, unlink, mkdir; a failed O_EXCL create or mkdir, EEXIST, too).
# O_CREAT|O_EXCL, mkdir and rename stay atomic (done on the export) whatever a client has
# cached. A file already open keeps serving the pages it has read (as on NFS).
# Faithfulness: each cache entry lives exactly TIMEOUT s, whatever other clients do: the
# worst case of a Linux NFS client (acdirmin..acdirmax 30-60 s; file attributes 3-60 s,
# adaptively; NFS may notice a change earlier, e.g. when opening a directory revalidates
# it or another reply brings newer directory attributes), so what is correct here is
# correct on NFS, and what needs luck on NFS fails here reliably. TIMEOUT=60 models
# acdirmax. Not modelled: delayed write-back (writes reach the export at each write();
# NFS's at close/fsync at the latest: publish by temp + rename anyway), cluster-wide locks
# (fcntl/flock locks are per client), ESTALE on a file removed elsewhere while open here
# (it stays readable), silly rename. bindfs was not chosen: it caches no listings and
# serves the cached size after open (reads cut to it): no close-to-open.
#
# Idempotent: ~0.6 s when up (it re-checks (a)-(e) every time), ~1.2 s from down, ~10 s
# the first time (it installs libfuse3-3 with apt, a venv with mfusepy under the state
# dir with pip). A changed configuration (clients, timeout, cachefs.py) restarts the
# clients. Processes started on a client see the mounts made before it was created only.
#
# Usage: ci/clusters/cachefs-up.sh
# Env:   MXBATCH_CLUSTER_STATE    state root (default /tmp/mxbatch-clusters)
#        MXBATCH_CACHEFS_CLIENTS  number of clients, 2..16 (default 3)
#        MXBATCH_CACHEFS_TIMEOUT  seconds each client caches a negative lookup, attributes
#                                 and a listing, 2..3600 (default 30)
#        MXBATCH_CACHEFS_WAIT     seconds for each wait (default 30)
set -euo pipefail

HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
# shellcheck source-path=SCRIPTDIR source=lib.sh
. "$HERE/lib.sh"
# shellcheck source-path=SCRIPTDIR source=cachefs/common.sh
. "$HERE/cachefs/common.sh"

TIMEOUT=${MXBATCH_CACHEFS_WAIT:-30}
CLIENTS=${MXBATCH_CACHEFS_CLIENTS:-3}
CACHE_TIMEOUT=${MXBATCH_CACHEFS_TIMEOUT:-30}
FS=$HERE/cachefs/cachefs.py
VENV=$BASE/venv
MFUSEPY=mfusepy==3.1.1
PYTHON=/usr/bin/python3   # Debian's: the venv's base and the checks' interpreter

if [[ ! $CLIENTS =~ ^[1-9][0-9]?$ ]] || ((CLIENTS < 2 || CLIENTS > 16)); then
    echo "cachefs-up: MXBATCH_CACHEFS_CLIENTS must be 2..16, not '$CLIENTS'" >&2
    exit 2
fi
if [[ ! $CACHE_TIMEOUT =~ ^[1-9][0-9]*$ ]] || ((CACHE_TIMEOUT < 2 || CACHE_TIMEOUT > 3600)); then
    echo "cachefs-up: MXBATCH_CACHEFS_TIMEOUT must be 2..3600 (seconds), not '$CACHE_TIMEOUT'" >&2
    exit 2
fi
if [[ $BASE =~ [[:space:]] ]]; then
    echo "cachefs-up: the state dir must not contain blanks: '$BASE'" >&2
    exit 2
fi

# --- packages --------------------------------------------------------------

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
    local pkgs=(libfuse3-3 python3-venv)
    if ldconfig -p | grep -q 'libfuse3\.so\.3 ' \
            && { [[ -x $VENV/bin/python ]] || "$PYTHON" -c 'import ensurepip' 2>/dev/null; }; then
        return 0
    fi
    log "installing ${pkgs[*]}"
    if ! apt-cache show "${pkgs[@]}" >/dev/null 2>&1; then
        log "package lists lack them: apt-get update"
        apt_get update || die "apt-get update failed"
    fi
    if ! apt_get install -y --no-install-recommends "${pkgs[@]}"; then
        log "install failed (stale package lists?): apt-get update and retry"
        apt_get update || die "apt-get update failed"
        apt_get install -y --no-install-recommends "${pkgs[@]}" \
            || die "apt-get install ${pkgs[*]} failed"
    fi
}

# ensure_venv: $VENV with mfusepy (its own, not the project's .venv)
ensure_venv() {
    if [[ -x $VENV/bin/python && $(cat "$VENV/.mxbatch-req" 2>/dev/null) == "$MFUSEPY" ]]; then
        return 0
    fi
    log "creating $VENV with $MFUSEPY"
    rm -rf "$VENV"
    "$PYTHON" -m venv "$VENV" || die "$PYTHON -m venv $VENV failed"
    "$VENV/bin/pip" install -q --disable-pip-version-check "$MFUSEPY" \
        || die "pip install $MFUSEPY failed"
    "$VENV/bin/python" -c 'import mfusepy' || die "mfusepy does not load"
    echo "$MFUSEPY" >"$VENV/.mxbatch-req"
}

# --- clients ---------------------------------------------------------------

# ensure_nsdir: $NSDIR as a private bind mount of itself, to bind namespace files on
ensure_nsdir() {
    [[ -n $(mount_type "$NSDIR") ]] && return 0
    mount --bind "$NSDIR" "$NSDIR" || die "cannot bind-mount $NSDIR"
    mount --make-private "$NSDIR" || die "cannot make $NSDIR a private mount"
}

# ensure_ns N: client N's mount namespace, created from this one (private propagation)
ensure_ns() {
    local n=$1 ns
    ns=$(ns_file "$n")
    ns_alive "$n" && return 0
    touch "$ns"
    unshare --mount="$ns" --propagation private true || die "unshare --mount=$ns failed"
    # It copied this namespace's mounts: drop ours (the bind at $MNT, other clients'
    # namespace files, which would keep those namespaces alive).
    # shellcheck disable=SC2016  # $1, $2: the inner shell's
    in_client "$n" sh -c 'umount -R "$1" 2>/dev/null; umount "$2" 2>/dev/null; true' sh \
        "$NSDIR" "$MNT"
}

# client_ok N PID: PID serves client N's mount, and answers
client_ok() {
    [[ $(mount_type "$MNT" "$2") == fuse.cachefs ]] || return 1
    in_client "$1" stat -c %i "$MNT" >/dev/null 2>&1
}

# start_client N: client N's FUSE daemon in its namespace, mounted at $MNT there
start_client() {
    local n=$1 pid log=$BASE/log/c$1.log
    log "starting client $n (timeout ${CACHE_TIMEOUT}s)"
    # setsid: not in this script's process group; the loop closes inherited descriptors
    # (the lock on fd 9 above all) before nsenter execs into the daemon.
    (
        for fd in "/proc/$BASHPID/fd/"*; do
            fd=${fd##*/}
            ((fd > 2)) && eval "exec $fd>&-" 2>/dev/null
        done
        exec setsid nsenter --mount="$(ns_file "$n")" --wd=/ -- env FUSE_LIBRARY_NAME=fuse3 \
            "$VENV/bin/python" "$FS" --timeout "$CACHE_TIMEOUT" --name "$(fs_name "$n")" \
            "$EXPORT" "$MNT"
    ) </dev/null >>"$log" 2>&1 &
    pid=$!
    echo "$pid" >"$RUN/c$n.pid"
    wait_until 20 mounted_or_dead "$pid" || die "client $n not mounted after 20s (see $log)"
    pid_alive "$pid" || { tail -n 20 "$log" >&2; die "client $n's daemon exited (see $log)"; }
}
mounted_or_dead() {
    ! pid_alive "$1" || [[ $(mount_type "$MNT" "$1") == fuse.cachefs ]]
}

ensure_client() {
    local n=$1 pid
    ensure_ns "$n"
    if pid=$(daemon_pid "$n"); then
        client_ok "$n" "$pid" && return 0
        log "client $n (pid $pid) does not answer: restarting it"
        stop_pids "cachefs client $n" 5 "$pid" || die "cannot stop pid $pid"
    fi
    unmount_client "$n"   # a mount left by a killed daemon
    start_client "$n"
    client_ok "$n" "$(daemon_pid "$n")" || die "client $n does not answer (see $BASE/log/c$n.log)"
}

# --- checks ----------------------------------------------------------------

# PROBE ACTION DIR: what this client sees of DIR (a JSON line); "write" first writes
PROBE='
import json, os, sys
act, d = sys.argv[1:3]
def size(name):
    try:
        return os.stat(os.path.join(d, name)).st_size
    except FileNotFoundError:
        return None
out = {}
if act == "write":
    with open(os.path.join(d, "new"), "w") as f:
        f.write("new")
    with open(os.path.join(d, "file.tmp"), "w") as f:
        f.write("changed")
    os.replace(os.path.join(d, "file.tmp"), os.path.join(d, "file"))
elif act == "open":
    try:
        open(os.path.join(d, "new")).close()
        out["open_new"] = "ok"
    except FileNotFoundError:
        out["open_new"] = "ENOENT"
    with open(os.path.join(d, "file")) as f:
        out["read"] = f.read()
        out["fstat"] = os.fstat(f.fileno()).st_size
out.update(new=size("new"), file=size("file"), ls=sorted(os.listdir(d)))
print(json.dumps(out, sort_keys=True))
'

# expect WHAT GOT WANT
expect() {
    [[ $2 == "$3" ]] || die "caching check failed: $1: got $2, expected $3"
}

# check_caching: client 1 writes while clients 2..K look: they must not see it (a, b, c),
# except through open() (d); client 1 sees its own changes (e). All within CACHE_TIMEOUT.
check_caching() {
    local name=.cachefs-check-${EPOCHREALTIME//[!0-9]/} dir n t0 took
    dir=$MNT/$name
    rm -rf "${EXPORT:?}/$name"
    mkdir "$EXPORT/$name"
    printf x >"$EXPORT/$name/file"
    t0=${EPOCHREALTIME//[!0-9]/}
    for ((n = 2; n <= CLIENTS; n++)); do
        expect "client $n, before" "$(in_client "$n" "$PYTHON" -c "$PROBE" look "$dir")" \
            '{"file": 1, "ls": ["file"], "new": null}'
    done
    expect "client 1, its own writes" "$(in_client 1 "$PYTHON" -c "$PROBE" write "$dir")" \
        '{"file": 7, "ls": ["file", "new"], "new": 3}'
    for ((n = 2; n <= CLIENTS; n++)); do
        expect "client $n, after client 1 wrote (stale lookup, attributes, listing)" \
            "$(in_client "$n" "$PYTHON" -c "$PROBE" look "$dir")" \
            '{"file": 1, "ls": ["file"], "new": null}'
        expect "client $n, open (close-to-open; still no new)" \
            "$(in_client "$n" "$PYTHON" -c "$PROBE" open "$dir")" \
            '{"file": 7, "fstat": 7, "ls": ["file"], "new": null, "open_new": "ENOENT", "read": "changed"}'
    done
    took=$(((${EPOCHREALTIME//[!0-9]/} - t0) / 1000))
    rm -rf "${EXPORT:?}/$name"
    ((took < CACHE_TIMEOUT * 1000)) \
        || die "the caching check took ${took} ms, longer than the cache timeout: inconclusive"
    log "caching checked on clients 1..$CLIENTS (${took} ms): stale lookups, attributes" \
        "and listings; close-to-open; own writes"
}

write_env() {
    write_atomic "$ENV_FILE" <<EOF
# cachefs test filesystem (ci/clusters/cachefs-up.sh); source before the cachefs tests.
# The directory every client shares, at this path on each of them (in the root
# namespace: a plain, uncached bind mount of the export):
export MXBATCH_CACHEFS_MNT=$MNT
# The export itself (the "server"): written here, seen by each client when its caches expire:
export MXBATCH_CACHEFS_EXPORT=$EXPORT
# Number of clients; they are numbered 1..N:
export MXBATCH_CACHEFS_CLIENTS=$CLIENTS
# "\$MXBATCH_CACHEFS_EXEC N CMD..." runs CMD on client N (in its mount namespace):
export MXBATCH_CACHEFS_EXEC=$HERE/cachefs-exec.sh
# Seconds a client caches a negative lookup, a file's attributes and a directory listing:
export MXBATCH_CACHEFS_TIMEOUT=$CACHE_TIMEOUT
EOF
}

main() {
    local n config running=()
    require_root
    [[ -c /dev/fuse ]] || modprobe fuse 2>/dev/null || die "no /dev/fuse"
    lock_cachefs
    mkdir -p "$EXPORT" "$MNT" "$NSDIR" "$RUN" "$BASE/log"
    install_packages
    ensure_venv

    config="clients=$CLIENTS timeout=$CACHE_TIMEOUT fs=$(sha256sum <"$FS" | cut -c1-16)"
    if [[ $(cat "$BASE/config" 2>/dev/null) != "$config" ]]; then
        mapfile -t running < <(clients_known)
        if ((${#running[@]})); then
            log "configuration changed ($config): restarting the clients"
            MXBATCH_CACHEFS_LOCKED=1 "$HERE/cachefs-down.sh" || die "could not stop the clients"
            mkdir -p "$EXPORT" "$MNT" "$NSDIR" "$RUN" "$BASE/log"
        fi
        echo "$config" >"$BASE/config"
    fi

    ensure_nsdir
    for ((n = 1; n <= CLIENTS; n++)); do
        ensure_client "$n"
    done
    if [[ -z $(mount_type "$MNT") ]]; then
        mount --bind "$EXPORT" "$MNT" || die "cannot bind $EXPORT to $MNT"
    fi
    check_caching
    write_env
    log "up: $CLIENTS clients of $EXPORT at $MNT (timeout ${CACHE_TIMEOUT}s)"
    log "env: $ENV_FILE"
}

main "$@"
