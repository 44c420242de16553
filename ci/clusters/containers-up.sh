#!/usr/bin/env bash
# containers-up.sh - make Docker and Podman usable for mxbatch's container tests.
#
# Brings up, on this host:
#   docker  a private dockerd (Debian's docker.io) with its socket, data-root and
#           exec-root under the state dir; no iptables, no bridge (--network host).
#   podman  rootful podman with runc, cgroupfs, file events, host network and explicit
#           ulimits by default; its containers.conf and storage.conf (graphroot and
#           runroot under the state dir) are pointed to by CONTAINERS_CONF and
#           CONTAINERS_STORAGE_CONF, so the system's podman configuration is untouched.
#   images  in both, imported from tars built here, again only when their inputs change
#           (a label holds their hash); nothing is pulled:
#           localhost/mxbatch-test:1, for the fast tests: static busybox, /etc/passwd+group,
#           no Python of its own; roles run the host's virtualenv Python through
#           read-only bind mounts (MXBATCH_TEST_CONTAINER_MOUNTS). Built in < 1 s.
#           localhost/mxbatch-mxnet:1, an image like the ones users run: Debian bookworm
#           with its own Python, mxnet in /opt/mxnet-venv (first on its PATH) and a
#           non-root default user (containers-mxnet-image.sh; mmdebstrap, about 1.5 min).
# then checks, for each runtime: the venv Python imports mxnet in a busybox container
# (--network host --init), the MXNet image's own Python imports mxnet with no mounts,
# a containerised server on 127.0.0.1 answers the host, the runtime's marker file
# (/.dockerenv, /run/.containerenv), rm -f of a running container within a second,
# --env-file; and reports the cost of `run --rm ... true`.
# The tests source $MXBATCH_CLUSTER_STATE/containers.env (written only once all
# checks passed; see it for the variables).
#
# Idempotent and fast when already up; recovers from a half-up state and from a
# dockerd or podman that crashed (leftover processes and mounts are cleared).
# Packages (docker.io, podman, runc, catatonit, tini, busybox-static, mmdebstrap) are installed
# when missing; no system service is started, and these scripts write nothing to /etc.
#
# Usage: ci/clusters/containers-up.sh
# Env:   MXBATCH_CLUSTER_STATE        state root (default /tmp/mxbatch-clusters)
#        MXBATCH_CONTAINERS_TIMEOUT   seconds for each wait (default 60)
#        MXBATCH_CONTAINER_RUNTIMES   runtimes to bring up (default "docker podman")
#        MXBATCH_TEST_VENV            virtualenv whose Python runs in the containers
#                                     (default: <checkout>/.venv; needs mxnet)
#        MXBATCH_TEST_IMAGE           busybox image name (default localhost/mxbatch-test:1)
#        MXBATCH_TEST_MXNET_IMAGE     MXNet image name (default localhost/mxbatch-mxnet:1)
#        MXBATCH_CONTAINERS_RM_MAX_MS most milliseconds `rm -f` may take (default 1000)
set -euo pipefail

HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
# shellcheck source-path=SCRIPTDIR source=lib.sh
. "$HERE/lib.sh"
# shellcheck source-path=SCRIPTDIR source=containers-common.sh
. "$HERE/containers-common.sh"

TIMEOUT=${MXBATCH_CONTAINERS_TIMEOUT:-60}
RUNTIMES=${MXBATCH_CONTAINER_RUNTIMES:-docker podman}
REPO=$(cd "$HERE/../.." && pwd)
VENV=${MXBATCH_TEST_VENV:-$REPO/.venv}
IMAGE=${MXBATCH_TEST_IMAGE:-localhost/mxbatch-test:1}
MXNET_IMAGE=${MXBATCH_TEST_MXNET_IMAGE:-localhost/mxbatch-mxnet:1}
MXNET_BUILD=$HERE/containers-mxnet-image.sh
RM_MAX_MS=${MXBATCH_CONTAINERS_RM_MAX_MS:-1000}
IMAGE_LABEL=org.mxbatch.test-image.inputs
BUSYBOX=/bin/busybox          # from busybox-static
CHECK_NAME=mxbatch-upcheck    # + -<runtime>: the detached container of the checks

read -ra RT_LIST <<<"$RUNTIMES"
for rt in "${RT_LIST[@]}"; do
    [[ $rt == docker || $rt == podman ]] \
        || { echo "containers-up: unknown runtime '$rt' in MXBATCH_CONTAINER_RUNTIMES" >&2; exit 2; }
done
((${#RT_LIST[@]})) || { echo "containers-up: MXBATCH_CONTAINER_RUNTIMES is empty" >&2; exit 2; }
RUNTIMES=${RT_LIST[*]}   # spacing normalised

# --- timing ----------------------------------------------------------------

# tick: start a stopwatch; tock: seconds since the last tick (2 decimals)
tick() { TICK=${EPOCHREALTIME//[!0-9]/}; }
tock() {
    local us=$((${EPOCHREALTIME//[!0-9]/} - TICK))
    printf '%d.%02d' $((us / 1000000)) $((us / 10000 % 100))
}
tock_ms() { echo $(((${EPOCHREALTIME//[!0-9]/} - TICK) / 1000)); }

# --- packages --------------------------------------------------------------

# apt_get ARGS... : apt-get that waits (with a deadline) for a lock held by
# another apt/dpkg run on the machine.
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

# docker.io: dockerd, containerd, docker-init (tini); podman + runc (crun refuses this
# host's hybrid cgroup layout) + catatonit (podman --init); busybox-static: the busybox
# image; mmdebstrap: the MXNet image.
install_packages() {
    local pkgs=(docker.io podman runc catatonit tini busybox-static mmdebstrap) missing=() p
    local policy=/usr/sbin/policy-rc.d made_policy=0
    for p in "${pkgs[@]}"; do
        [[ $(dpkg-query -W -f='${db:Status-Status}' "$p" 2>/dev/null) == installed ]] \
            || missing+=("$p")
    done
    ((${#missing[@]})) || return 0
    log "installing ${missing[*]}"
    # docker.io's postinst would start the system dockerd (invoke-rc.d) unless a
    # policy-rc.d forbids it; images of this kind ship one, create it if not
    if [[ ! -e $policy ]]; then
        printf '#!/bin/sh\n# containers-up.sh: start no service while installing\nexit 101\n' >"$policy"
        chmod 0755 "$policy"
        trap 'rm -f /usr/sbin/policy-rc.d' EXIT
        made_policy=1
    fi
    if ! apt-cache show "${missing[@]}" >/dev/null 2>&1; then
        log "package lists lack them: apt-get update"
        apt_get update || die "apt-get update failed"
    fi
    if ! apt_get install -y --no-install-recommends "${missing[@]}"; then
        log "install failed (stale package lists?): apt-get update and retry"
        apt_get update || die "apt-get update failed"
        apt_get install -y --no-install-recommends "${missing[@]}" \
            || die "apt-get install ${missing[*]} failed"
    fi
    if ((made_policy)); then
        rm -f "$policy"
        trap - EXIT
    fi
    log "installed docker.io $(dpkg-query -W -f='${Version}' docker.io)," \
        "podman $(dpkg-query -W -f='${Version}' podman)"
}

# --- podman configuration ------------------------------------------------

# write_if_changed FILE: stdin into FILE unless FILE already holds exactly that;
# 0 if it was written
write_if_changed() {
    local new
    new=$(cat)
    [[ -f $1 && $(cat "$1") == "$new" ]] && return 1
    printf '%s\n' "$new" | write_atomic "$1"
}

write_podman_conf() {
    write_if_changed "$PODMAN_CONF" <<EOF || true
# Generated by ci/clusters/containers-up.sh: rootful podman for mxbatch's tests
# (CONTAINERS_CONF points here; the system's /etc/containers is not used for this).
[containers]
# No CAP_SYS_RESOURCE here: podman's default (1048576) fails in setrlimit.
default_ulimits = ["nofile=$NOFILE:$NOFILE", "nproc=$NPROC:$NPROC"]
# Host network unless a run asks otherwise: no CNI bridge, no iptables rules.
netns = "host"
# No journald without systemd.
log_driver = "k8s-file"

[network]
network_config_dir = "$PODMAN_DIR/networks"

[engine]
# crun refuses this host's hybrid cgroup v1 + v2 layout.
runtime = "runc"
# No systemd: cgroupfs, and events to a file instead of the journal.
cgroup_manager = "cgroupfs"
events_logger = "file"
events_logfile_path = "$PODMAN_DIR/tmp/events/events.log"
# Per-boot state (containers-down.sh clears it; not a tmpfs here).
tmp_dir = "$PODMAN_DIR/tmp"
EOF
    write_if_changed "$PODMAN_STORAGE_CONF" <<EOF || true
# Generated by ci/clusters/containers-up.sh (CONTAINERS_STORAGE_CONF points here).
[storage]
driver = "overlay"
graphroot = "$PODMAN_DIR/storage"
runroot = "$PODMAN_DIR/run"
EOF
}

check_podman_info() {
    local want got
    want="runc cgroupfs file $PODMAN_DIR/storage $PODMAN_DIR/run"
    got=$(podman info --format '{{.Host.OCIRuntime.Name}} {{.Host.CgroupManager}} {{.Host.EventLogger}} {{.Store.GraphRoot}} {{.Store.RunRoot}}') \
        || die "podman info failed"
    [[ $got == "$want" ]] || die "podman does not use our configuration: got '$got', want '$want'"
    log "podman $(podman version --format '{{.Client.Version}}'): runtime runc, cgroupfs, events to a file, storage $PODMAN_DIR"
}

# --- dockerd -------------------------------------------------------------

# ensure_dockerd: our dockerd running with today's arguments and answering
ensure_dockerd() {
    local pid want have
    want=$(dockerd_args)
    if pid=$(dockerd_pid); then
        have=$(cat "$BASE/run/dockerd.args" 2>/dev/null || true)
        if [[ $have != "$want" ]]; then
            log "dockerd (pid $pid) runs with other arguments: restarting it"
            stop_dockerd
        elif ! wait_until -s "dockerd (pid $pid)" "$TIMEOUT" dockerd_answers; then
            log "dockerd (pid $pid) does not answer: restarting it"
            stop_dockerd
        fi
    fi
    dockerd_pid >/dev/null || start_dockerd
    local v
    v=$(docker version --format 'client {{.Client.Version}} (API {{.Client.APIVersion}}), server {{.Server.Version}} (API {{.Server.APIVersion}})') \
        || die "the docker client $(command -v docker) cannot talk to dockerd $DOCKER_SOCK"
    log "dockerd (pid $(dockerd_pid)) answers; $(command -v docker): $v"
}

# --- the images ----------------------------------------------------------

IMAGE_CHANGES=('ENV PATH=/usr/local/bin:/usr/bin:/bin:/usr/sbin:/sbin' 'CMD ["/bin/sh"]')

# build_rootfs DIR: the image's root file system. /bin is static busybox; lib and
# lib64 point into /usr, which the runs bind-mount read-only from the host (ld.so,
# libc, libstdc++ ...); /sbin is a real directory (docker --init mounts
# /sbin/docker-init). /etc/hosts, resolv.conf and hostname come from the runtime.
build_rootfs() {
    local r=$1 applet
    rm -rf "$r"
    mkdir -p "$r"/{bin,sbin,etc,usr,root,tmp,var/tmp,proc,sys,dev,run}
    cp "$BUSYBOX" "$r/bin/busybox"
    for applet in $("$r/bin/busybox" --list); do
        [[ $applet == busybox ]] || ln -s busybox "$r/bin/$applet"
    done
    ln -s usr/lib "$r/lib"
    ln -s usr/lib64 "$r/lib64"
    chmod 1777 "$r/tmp" "$r/var/tmp"
    chmod 0700 "$r/root"
    printf '%s\n' 'root:x:0:0:root:/root:/bin/sh' \
        'nobody:x:65534:65534:nobody:/nonexistent:/bin/false' >"$r/etc/passwd"
    printf '%s\n' 'root:x:0:' 'nogroup:x:65534:' >"$r/etc/group"
    printf '%s\n' 'passwd: files' 'group: files' 'hosts: files dns' >"$r/etc/nsswitch.conf"
}

# busybox_hash: a hash of everything the busybox image is made of
busybox_hash() {
    {
        sha256sum <"$BUSYBOX"
        declare -f build_rootfs
        printf '%s\n' "${IMAGE_CHANGES[@]}"
    } | sha256sum | cut -c1-16
}

# busybox_tar TAR: the busybox image's rootfs as a tar
busybox_tar() {
    [[ $(ldd "$BUSYBOX" 2>&1) == *"not a dynamic executable"* ]] \
        || die "$BUSYBOX is not static (busybox-static not installed?)"
    build_rootfs "$BASE/image/rootfs"
    tar -C "$BASE/image/rootfs" --sort=name --numeric-owner --owner=0 --group=0 \
        --mtime=@0 -cf "$1" .
    rm -rf "$BASE/image/rootfs"
}

# mxnet_tar TAR: the MXNet image's rootfs (Debian, its own Python and mxnet)
mxnet_tar() { bash "$MXNET_BUILD" "$1" "$PY"; }

image_label() {   # image_label RUNTIME IMAGE: the inputs label of IMAGE there ("" if none)
    "$1" image inspect --format "{{index .Config.Labels \"$IMAGE_LABEL\"}}" "$2" 2>/dev/null || true
}

# ensure_image IMAGE KEY HASH CHANGE...: IMAGE, labelled HASH (a hash of its inputs), in
# every runtime, imported with the given Dockerfile instructions from the tar that
# KEY_tar builds ($BASE/image/KEY.tar, kept with KEY.hash for the next runtime or run)
ensure_image() {
    local image=$1 key=$2 hash=$3 rt tar=$BASE/image/$2.tar changes=() c quiet
    shift 3
    for c in "$@" "LABEL $IMAGE_LABEL=$hash"; do changes+=(--change "$c"); done
    for rt in $RUNTIMES; do
        if [[ $(image_label "$rt" "$image") == "$hash" ]]; then
            log "$rt: image $image is up to date ($hash)"
            continue
        fi
        if [[ ! -s $tar || $(cat "$BASE/image/$key.hash" 2>/dev/null) != "$hash" ]]; then
            tick
            rm -f "$tar" "$BASE/image/$key.hash"
            "${key}_tar" "$tar.tmp"
            mv -f "$tar.tmp" "$tar"
            echo "$hash" | write_atomic "$BASE/image/$key.hash"
            log "built the rootfs tar of $image ($(($(stat -c %s "$tar") / 1024)) KiB) in $(tock)s"
        fi
        tick
        quiet=()
        [[ $rt == podman ]] && quiet=(-q)   # no progress lines
        "$rt" import "${quiet[@]}" "${changes[@]}" "$tar" "$image" >/dev/null || die "$rt import of $image failed"
        [[ $(image_label "$rt" "$image") == "$hash" ]] || die "$rt: $image lacks label $IMAGE_LABEL=$hash after import"
        "$rt" image prune -f >/dev/null 2>&1 || true   # the image it replaced
        log "$rt: imported $image ($hash) in $(tock)s"
    done
}

ensure_images() {
    local mxnet_changes
    rm -f "$BASE/image/rootfs.tar" "$BASE/image/rootfs.hash"   # before the MXNet image
    ensure_image "$IMAGE" busybox "$(busybox_hash)" "${IMAGE_CHANGES[@]}"
    mapfile -t mxnet_changes < <(bash "$MXNET_BUILD" --changes)
    ensure_image "$MXNET_IMAGE" mxnet "$(bash "$MXNET_BUILD" --inputs | sha256sum | cut -c1-16)" \
        "${mxnet_changes[@]}"
}

# --- the host's Python in the containers ---------------------------------

# compute_mounts: MOUNTS (src:dst:ro entries): /usr (ld.so, libc and the other system
# libraries the interpreter and libmxnet.so load), the Python installation the venv
# is made from (sys.base_prefix: interpreter, libpython, stdlib) and the venv itself
# (sys.prefix: pyvenv.cfg, site-packages with mxnet and numpy), each at its own path,
# so that the venv's symlinks and pyvenv.cfg resolve as on the host.
compute_mounts() {
    local info prefix base d src m
    PY=$VENV/bin/python
    [[ -x $PY ]] || die "no $PY: create it first (python3 -m venv $VENV &&" \
        "$VENV/bin/pip install 'mxnet==1.9.1' 'numpy<1.24')"
    mapfile -t info < <("$PY" -c 'import sys; print(sys.prefix); print(sys.base_prefix)
import importlib.metadata as m; print(m.version("mxnet"))' 2>/dev/null)
    ((${#info[@]} == 3)) \
        || die "$PY is broken or has no mxnet ($VENV/bin/pip install 'mxnet==1.9.1' 'numpy<1.24')"
    prefix=${info[0]} base=${info[1]} MXNET_VERSION=${info[2]}
    MOUNT_LIST=(/usr:/usr:ro)
    for d in "$base" "$prefix"; do
        case $d in /usr | /usr/*) continue ;; esac
        for m in "${MOUNT_LIST[@]}"; do
            m=${m#*:}
            m=${m%:ro}
            [[ $d == "$m" || $d == "$m"/* ]] && continue 2
        done
        src=$(readlink -f "$d")
        [[ $src$d != *[,:]* ]] || die "cannot mount $d: a comma or colon in the path"
        MOUNT_LIST+=("$src:$d:ro")
    done
    MOUNTS=$(IFS=,; echo "${MOUNT_LIST[*]}")
    VOLUMES=()
    for m in "${MOUNT_LIST[@]}"; do VOLUMES+=(-v "$m"); done
}

# --- checks --------------------------------------------------------------

SERVER='import socket, sys, time
s = socket.socket()
s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
s.bind(("127.0.0.1", int(sys.argv[1])))
s.listen(1)
c, _ = s.accept()
c.sendall(b"mxbatch-pong\n")
c.close()
time.sleep(3600)'

free_port() {
    "$PY" -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'
}

# tcp_hello PORT: connect to 127.0.0.1:PORT (bash's /dev/tcp), read one line into HELLO
tcp_hello() {
    # shellcheck disable=SC2016  # $1 and $line are the inner bash's
    HELLO=$(timeout 10 bash -c 'exec 3<>"/dev/tcp/127.0.0.1/$1" && read -r line <&3 &&
        echo "$line"' _ "$1" 2>/dev/null)
}

hello_ok() { tcp_hello "$1" && [[ $HELLO == mxbatch-pong ]]; }

# check_runtime RT: the checks for one runtime; SUMMARY gets its times
check_runtime() {
    local rt=$1 marker rm_opts name=$CHECK_NAME-$1 out port ms t_true=() t_mx t_img envf
    local version python uid
    case $rt in
        docker) marker=/.dockerenv rm_opts=(-f) ;;
        podman) marker=/run/.containerenv rm_opts=(-f -t 0) ;;
    esac
    "$rt" rm "${rm_opts[@]}" "$name" >/dev/null 2>&1 || true   # left by a killed run

    for _ in 1 2 3; do
        tick
        "$rt" run --rm --network host "$IMAGE" true || die "$rt: run --rm $IMAGE true failed"
        t_true+=("$(tock)")
    done
    log "$rt: run --rm --network host $IMAGE true: ${t_true[*]} s"

    tick
    out=$("$rt" run --rm --network host --init "${VOLUMES[@]}" "$IMAGE" \
        "$PY" -c 'import mxnet; print(mxnet.__version__)' 2>&1) \
        || die "$rt: $PY cannot import mxnet in the container: $out"
    t_mx=$(tock)
    [[ $out == "$MXNET_VERSION" ]] || die "$rt: import mxnet printed '$out', want '$MXNET_VERSION'"
    log "$rt: run --rm --network host --init <mounts> $PY -c 'import mxnet': $out in ${t_mx}s"

    # the MXNet image's own Python, as its PATH finds it, with no mounts
    tick
    out=$("$rt" run --rm --network host --init "$MXNET_IMAGE" python3 -c \
        'import mxnet, os, sys; print(mxnet.__version__, sys.executable, os.getuid())' 2>&1) \
        || die "$rt: python3 cannot import mxnet in $MXNET_IMAGE: $out"
    t_img=$(tock)
    read -r version python uid <<<"$out"
    [[ -n $uid && $python != "$PY" ]] || die "$rt: python3 -c 'import mxnet' in $MXNET_IMAGE printed '$out'"
    if [[ -n ${MXNET_FACTS:-} && $MXNET_FACTS != "$out" ]]; then
        die "$rt: $MXNET_IMAGE has mxnet, python, uid '$out', another runtime's has '$MXNET_FACTS'"
    fi
    MXNET_FACTS=$out MXNET_IMAGE_PYTHON=$python MXNET_IMAGE_UID=$uid
    log "$rt: run --rm --network host --init $MXNET_IMAGE python3 -c 'import mxnet': mxnet $version, $python, uid $uid in ${t_img}s"

    tick
    "$rt" run --rm --network host "$IMAGE" test -f "$marker" \
        || die "$rt: no $marker in the container"
    log "$rt: $marker exists in the container ($(tock)s)"

    tick
    envf=$BASE/check/env-file
    mkdir -p "$BASE/check"
    printf '%s\n' 'MXBATCH_CHECK_A=two words' 'MXBATCH_CHECK_B=x=y' >"$envf"
    # shellcheck disable=SC2016  # expanded by the container's shell
    out=$("$rt" run --rm --network host --env-file "$envf" "$IMAGE" \
        sh -c 'echo "$MXBATCH_CHECK_A|$MXBATCH_CHECK_B"') || die "$rt: run --env-file failed"
    [[ $out == "two words|x=y" ]] || die "$rt: --env-file gave '$out', want 'two words|x=y'"
    log "$rt: --env-file works ($(tock)s)"

    tick
    port=$(free_port)
    "$rt" run -d --init --network host --name "$name" "${VOLUMES[@]}" "$IMAGE" \
        "$PY" -c "$SERVER" "$port" >/dev/null || die "$rt: run -d $name failed"
    if ! wait_until "$TIMEOUT" hello_ok "$port"; then
        "$rt" logs "$name" >&2 || true
        die "$rt: no answer from the container's server on 127.0.0.1:$port (got '${HELLO:-}')"
    fi
    log "$rt: the host reached a server in the container on 127.0.0.1:$port ($(tock)s)"

    tick
    "$rt" rm "${rm_opts[@]}" "$name" >/dev/null || die "$rt: rm ${rm_opts[*]} $name failed"
    ms=$(tock_ms)
    [[ -z $("$rt" ps -a -q --filter "name=^$name\$") ]] || die "$rt: $name still there after rm"
    ((ms <= RM_MAX_MS)) || die "$rt: rm ${rm_opts[*]} of a running container took ${ms} ms (limit $RM_MAX_MS)"
    log "$rt: rm ${rm_opts[*]} of a running container: ${ms} ms"
    SUMMARY+=("$rt: run --rm true ${t_true[*]} s, import mxnet ${t_mx} s (MXNet image ${t_img} s), rm -f ${ms} ms")
}

# --- env file --------------------------------------------------------------

# shq VALUE: VALUE as a shell word: bare if plain, else in single quotes
shq() {
    if [[ $1 =~ ^[A-Za-z0-9_./:,@=+-]+$ ]]; then
        printf '%s' "$1"
    else
        printf "'%s'" "${1//\'/\'\\\'\'}"
    fi
}

write_env() {
    local rt has_docker=0 has_podman=0
    for rt in $RUNTIMES; do
        [[ $rt == docker ]] && has_docker=1
        [[ $rt == podman ]] && has_podman=1
    done
    {
        echo "# Container runtimes for mxbatch's tests (ci/clusters/containers-up.sh);"
        echo "# source it before running docker/podman or the container tests."
        if ((has_docker)); then
            echo "# DOCKER_HOST: the socket of the private dockerd (docker CLI, docker-py)"
            echo "export DOCKER_HOST=$(shq "unix://$DOCKER_SOCK")"
        fi
        if ((has_podman)); then
            echo "# CONTAINERS_CONF: podman's containers.conf (runc, cgroupfs, file events,"
            echo "# host network and nofile/nproc ulimits by default)"
            echo "export CONTAINERS_CONF=$(shq "$PODMAN_CONF")"
            echo "# CONTAINERS_STORAGE_CONF: podman's storage.conf (images and containers"
            echo "# under $PODMAN_DIR)"
            echo "export CONTAINERS_STORAGE_CONF=$(shq "$PODMAN_STORAGE_CONF")"
        fi
        echo "# MXBATCH_TEST_IMAGE: the fast tests' image, in every runtime below (busybox, no Python)"
        echo "export MXBATCH_TEST_IMAGE=$(shq "$IMAGE")"
        echo "# MXBATCH_TEST_CONTAINER_MOUNTS: comma-separated src:dst:ro bind mounts that let"
        echo "# MXBATCH_TEST_CONTAINER_PYTHON run (with mxnet) in MXBATCH_TEST_IMAGE"
        echo "export MXBATCH_TEST_CONTAINER_MOUNTS=$(shq "$MOUNTS")"
        echo "# MXBATCH_TEST_CONTAINER_PYTHON: the venv interpreter, same path on the host and"
        echo "# in the container"
        echo "export MXBATCH_TEST_CONTAINER_PYTHON=$(shq "$PY")"
        echo "# MXBATCH_TEST_MXNET_IMAGE: an image like the ones users run, in every runtime"
        echo "# below: its own Python with mxnet first on its PATH, a non-root default user"
        echo "export MXBATCH_TEST_MXNET_IMAGE=$(shq "$MXNET_IMAGE")"
        echo "# MXBATCH_TEST_MXNET_PYTHON: what python3 is in MXBATCH_TEST_MXNET_IMAGE (sys.executable)"
        echo "export MXBATCH_TEST_MXNET_PYTHON=$(shq "$MXNET_IMAGE_PYTHON")"
        echo "# MXBATCH_TEST_MXNET_UID: the uid MXBATCH_TEST_MXNET_IMAGE runs as by default"
        echo "export MXBATCH_TEST_MXNET_UID=$(shq "$MXNET_IMAGE_UID")"
        echo "# MXBATCH_TEST_RUNTIMES: the runtimes that passed the checks"
        echo "export MXBATCH_TEST_RUNTIMES=$(shq "$RUNTIMES")"
    } | write_atomic "$ENV_FILE"
}

# --- main ------------------------------------------------------------------

main() {
    local rt boot line
    require_root
    install_packages
    mkdir -p "$BASE"/{etc,run,log,image,check} "$PODMAN_DIR"
    # unix socket paths have at most 107 bytes; containerd's longest is this one
    local sock=$DOCKER_EXEC/containerd/containerd.sock.ttrpc
    ((${#sock} <= 107)) || die "MXBATCH_CLUSTER_STATE is too long for dockerd's sockets ($sock)"
    lock_containers
    rm -f "$ENV_FILE"   # only a checked setup gets one
    compute_mounts
    log "python in the containers: $PY (mxnet $MXNET_VERSION), mounts $MOUNTS"

    # after a reboot podman's per-boot state (not on a tmpfs here) is stale
    boot=$(cat /proc/sys/kernel/random/boot_id)
    if [[ -f $BASE/run/boot_id && $(cat "$BASE/run/boot_id") != "$boot" ]]; then
        log "the host rebooted since the last run: clearing podman's per-boot state"
        podman_per_boot_reset || die "cannot clear $PODMAN_DIR"
    fi
    echo "$boot" | write_atomic "$BASE/run/boot_id"

    for rt in $RUNTIMES; do
        case $rt in
            docker) ensure_dockerd ;;
            podman) write_podman_conf; check_podman_info ;;
        esac
    done
    ensure_images

    SUMMARY=()
    for rt in $RUNTIMES; do check_runtime "$rt"; done
    rm -rf "$BASE/check"

    write_env
    for line in "${SUMMARY[@]}"; do log "$line"; done
    log "containers up ($RUNTIMES); env: $ENV_FILE"
}

main "$@"
