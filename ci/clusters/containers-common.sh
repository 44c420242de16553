# shellcheck shell=bash disable=SC2034  # its variables are used by the scripts that source it
# ci/clusters/containers-common.sh -- what containers-up.sh and containers-down.sh share:
# where the private dockerd and podman keep their state, the lock, and the clean-up of
# what a crashed dockerd/podman leaves behind (processes, mounts). Sourced after lib.sh;
# the script sets TIMEOUT (seconds for each wait).
#
# Layout under $BASE ($MXBATCH_CLUSTER_STATE/containers):
#   etc/      containers.conf, storage.conf (podman), daemon.json (dockerd)
#   docker/   data/ (images, containers), exec/ (containerd, runc state), docker.sock
#   podman/   storage/ (graphroot: images, containers), run/ (runroot), tmp/ (libpod
#             tmp_dir, events), networks/
#   run/      dockerd.pid, dockerd.args, boot_id
#   log/      dockerd.log
#   image/    the test image's rootfs tar and its input hash
#   check/    scratch files of the checks
# Outside it, by the runtimes' fixed defaults: /dev/shm/libpod_lock (podman's lock
# segment), /run/runc/<id> (podman's runc state while a container exists),
# /run/containerd/s/ (shim sockets of dockerd's containerd), /var/lib/containers/cache
# (podman's blob-info cache, written by podman import).

STATE_ROOT=${MXBATCH_CLUSTER_STATE:-/tmp/mxbatch-clusters}
BASE=$STATE_ROOT/containers
ENV_FILE=$STATE_ROOT/containers.env

DOCKER_DIR=$BASE/docker
DOCKER_SOCK=$DOCKER_DIR/docker.sock
DOCKER_DATA=$DOCKER_DIR/data
DOCKER_EXEC=$DOCKER_DIR/exec
DOCKERD_PIDFILE=$BASE/run/dockerd.pid
DOCKERD_LOG=$BASE/log/dockerd.log

PODMAN_DIR=$BASE/podman
PODMAN_CONF=$BASE/etc/containers.conf
PODMAN_STORAGE_CONF=$BASE/etc/storage.conf

# Our daemon and our podman storage only, whatever the caller's environment says.
export DOCKER_HOST=unix://$DOCKER_SOCK
export CONTAINERS_CONF=$PODMAN_CONF
export CONTAINERS_STORAGE_CONF=$PODMAN_STORAGE_CONF
unset DOCKER_CONTEXT DOCKER_TLS_VERIFY DOCKER_CERT_PATH DOCKER_API_VERSION CONTAINER_HOST

# docker / podman: the clients (whichever are first on PATH, as for the tests), with a
# deadline and with the lock's descriptor closed: podman leaves conmon running for a
# detached container, and conmon keeps every descriptor it inherits, so an inherited
# lock would stay held until that container ends.
docker() { timeout -k 5 "$TIMEOUT" docker "$@" 9>&-; }
podman() { timeout -k 5 "$TIMEOUT" podman "$@" 9>&-; }

dockerd_pid() { pid_from_file "$DOCKERD_PIDFILE" dockerd "$DOCKER_SOCK"; }
dockerd_answers() { timeout 10 docker version --format '{{.Server.Version}}' >/dev/null 2>&1; }

# lock_containers: hold $BASE/lock (fd 9) for the rest of this run, so that
# containers-up.sh and containers-down.sh never run at the same time
lock_containers() {
    mkdir -p "$BASE"
    exec 9>"$BASE/lock"
    flock -w "$TIMEOUT" 9 || die "another containers-up/down holds $BASE/lock"
}

# mounts_under DIR: mount points at or below DIR (deepest first), from /proc/self/mountinfo
# (field 5; its octal escapes for space, tab, newline and backslash decoded)
mounts_under() {
    awk -v dir="${1%/}" '{
        mp = $5
        gsub(/\\040/, " ", mp); gsub(/\\011/, "\t", mp); gsub(/\\012/, "\n", mp)
        gsub(/\\134/, "\\", mp)
        if (mp == dir || index(mp, dir "/") == 1) print length(mp) "\t" mp
    }' /proc/self/mountinfo | sort -rn | cut -f2- | uniq
}

# unmount_under DIR: unmount everything at or below DIR (a busy one lazily); 1 if a
# mount is still there afterwards
unmount_under() {
    local mp left n=0
    while read -r mp; do
        [[ -n $mp ]] || continue
        umount "$mp" 2>/dev/null || umount -l "$mp" 2>/dev/null || true
        n=$((n + 1))
    done < <(mounts_under "$1")
    ((n == 0)) || log "unmounted $n leftover mount(s) under $1"
    left=$(mounts_under "$1")
    [[ -z $left ]] || { log "still mounted: ${left//$'\n'/ }"; return 1; }
}

# pids_mentioning TEXT COMM...: live processes named COMM... whose command line contains TEXT
pids_mentioning() {
    local text=$1 pid comm args
    shift
    while read -r pid comm; do
        [[ " $* " == *" $comm "* ]] || continue
        pid_alive "$pid" || continue
        args=$(tr '\0' ' ' 2>/dev/null <"/proc/$pid/cmdline") || continue
        if [[ $args == *"$text"* ]]; then echo "$pid"; fi
    done < <(ps -eo pid=,comm=)
}

# docker_leftovers: what a dockerd that died (SIGKILL, crash) leaves running: the
# containers' processes (runc state under exec-root), its containerd and shims; and a
# dockerd of ours that lost its pid file. Only when our pid file names no live dockerd.
docker_leftovers() {
    local runc_root=$DOCKER_EXEC/runtime-runc/moby id pids
    mapfile -t pids < <(pids_mentioning "unix://$DOCKER_SOCK " dockerd)
    if ((${#pids[@]})); then
        log "stopping a dockerd of ours without a pid file (pid ${pids[*]})"
        stop_pids dockerd "$TIMEOUT" "${pids[@]}" || die "pid $(pids_alive "${pids[@]}") survives SIGKILL"
    fi
    if [[ -d $runc_root ]]; then
        for id in $(runc --root "$runc_root" list -q 2>/dev/null); do
            log "removing leftover docker container $id (runc)"
            runc --root "$runc_root" delete -f "$id" 9>&- >/dev/null 2>&1 || true
        done
    fi
    # comm is truncated to 15 characters: containerd-shim-runc-v2 -> containerd-shim
    mapfile -t pids < <(pids_mentioning "$DOCKER_EXEC/" containerd containerd-shim)
    if ((${#pids[@]})); then
        log "stopping leftover containerd/shims of our dockerd (pid ${pids[*]})"
        stop_pids containerd "$TIMEOUT" "${pids[@]}" || die "pid $(pids_alive "${pids[@]}") survives SIGKILL"
    fi
    # dockerd adopts the containerd its pid file names if that process exists, and
    # then waits in vain for it when it is a zombie not yet reaped: forget a dead one
    if ! pid_from_file "$DOCKER_EXEC/containerd/containerd.pid" containerd >/dev/null; then
        rm -f "$DOCKER_EXEC/containerd/containerd.pid"
    fi
}

# podman_leftovers: what podman may leave once all its containers are removed:
# conmon processes that outlived their container, and runc state (podman's runc uses
# its default root, /run/runc) of containers whose conmon was killed, which podman
# rm -f does not delete; ours are those whose bundle is in our storage
podman_leftovers() {
    local pids id bundle
    mapfile -t pids < <(pids_mentioning "$PODMAN_DIR/" conmon)
    if ((${#pids[@]})); then
        log "stopping leftover conmon (pid ${pids[*]})"
        stop_pids conmon "$TIMEOUT" "${pids[@]}" || die "pid $(pids_alive "${pids[@]}") survives SIGKILL"
    fi
    command -v runc >/dev/null || return 0
    for id in $(runc list -q 2>/dev/null); do
        bundle=$(runc state "$id" 2>/dev/null | sed -n 's/^ *"bundle": "\(.*\)",$/\1/p')
        if [[ $bundle == "$PODMAN_DIR/"* ]]; then
            log "deleting leftover runc state of podman container $id"
            runc delete -f "$id" 9>&- >/dev/null 2>&1 || log "runc delete -f $id failed"
        fi
    done
}

# podman_per_boot_reset: podman keeps per-boot state (runroot, tmp_dir) that must be
# on a tmpfs; ours is on disk, so forget it whenever no container of ours runs (down,
# and up after a reboot): podman's next call then refreshes its database
podman_per_boot_reset() {
    unmount_under "$PODMAN_DIR" || return 1
    rm -rf "${PODMAN_DIR:?}/run" "${PODMAN_DIR:?}/tmp"
}

# --- limits --------------------------------------------------------------

# Without CAP_SYS_RESOURCE a container cannot get more than the hard limits of the
# process that starts it, and rootful podman's default (nofile=nproc=1048576) then
# fails in setrlimit. Both runtimes get the same explicit limits: at most 16384, and
# no more than this shell's hard limits (nproc: nor kernel.pid_max).
hard_limit() {
    local v
    v=$(ulimit -H "$1")
    [[ $v == unlimited ]] && v=1048576
    echo "$v"
}
NOFILE=$(hard_limit -n)
NPROC=$(hard_limit -u)
PID_MAX=$(cat /proc/sys/kernel/pid_max)
((NOFILE > 16384)) && NOFILE=16384
((NPROC > PID_MAX)) && NPROC=$PID_MAX
((NPROC > 16384)) && NPROC=16384

# --- the private dockerd -------------------------------------------------

# dockerd_args: the daemon's command line (one argument a line). No iptables, no
# bridge, no NAT, no userland proxy: containers use --network host (or none).
# --config-file keeps /etc/docker/daemon.json out; daemon.json only moves the trust
# key, which dockerd 20.10 would otherwise write to /etc/docker/key.json.
dockerd_args() {
    printf '%s\n' --config-file "$BASE/etc/daemon.json" -H "unix://$DOCKER_SOCK" \
        --data-root "$DOCKER_DATA" --exec-root "$DOCKER_EXEC" --pidfile "$DOCKERD_PIDFILE" \
        --storage-driver overlay2 --iptables=false --ip6tables=false --ip-forward=false \
        --ip-masq=false --bridge=none --userland-proxy=false \
        --default-ulimit "nofile=$NOFILE:$NOFILE" --default-ulimit "nproc=$NPROC:$NPROC"
}

# dockerd_started PID: the dockerd just started answers (die if it exited)
dockerd_started() {
    pid_alive "$1" || { tail -n 20 "$DOCKERD_LOG" >&2; die "dockerd exited (see $DOCKERD_LOG)"; }
    dockerd_answers
}

# start_dockerd: start our dockerd detached (own session, stdio on its log, no
# descriptor of ours, the lock included) and wait until it answers
start_dockerd() {
    local args pid
    mapfile -t args < <(dockerd_args)
    mkdir -p "$BASE"/{etc,run,log} "$DOCKER_DIR"
    if [[ ! -s $BASE/etc/daemon.json ]]; then
        printf '{\n  "deprecated-key-path": "%s"\n}\n' "$DOCKER_DIR/key.json" \
            | write_atomic "$BASE/etc/daemon.json"
    fi
    # leftovers of a dockerd that died: it refuses a pid file that names a live
    # process, and its containerd/shims/mounts would be in the way
    docker_leftovers
    unmount_under "$DOCKER_DIR" || die "cannot unmount the leftovers under $DOCKER_DIR"
    rm -f "$DOCKERD_PIDFILE" "$DOCKER_SOCK"
    log "starting dockerd (socket $DOCKER_SOCK)"
    (
        for fd in "/proc/$BASHPID/fd/"*; do
            fd=${fd##*/}
            ((fd > 2)) && eval "exec $fd>&-" 2>/dev/null
        done
        exec setsid dockerd "${args[@]}"
    ) </dev/null >>"$DOCKERD_LOG" 2>&1 &
    pid=$!
    printf '%s\n' "${args[@]}" | write_atomic "$BASE/run/dockerd.args"
    wait_until -s dockerd "$TIMEOUT" dockerd_started "$pid" \
        || die "dockerd does not answer after ${TIMEOUT}s (see $DOCKERD_LOG)"
    [[ $(dockerd_pid) == "$pid" ]] || die "dockerd (pid $pid) did not write $DOCKERD_PIDFILE"
}

# stop_dockerd: stop our dockerd (it stops its containerd), then whatever a crashed
# one left: containerd, shims, container processes, mounts (netns/default, overlays)
stop_dockerd() {
    local pid
    if pid=$(dockerd_pid); then
        log "stopping dockerd (pid $pid)"
        stop_pids dockerd "$TIMEOUT" "$pid" || die "dockerd (pid $pid) survives SIGKILL"
    fi
    rm -f "$DOCKERD_PIDFILE"
    docker_leftovers
    unmount_under "$DOCKER_DIR" || die "cannot unmount the leftovers under $DOCKER_DIR"
}
