#!/usr/bin/env bash
# hosts-up.sh - bring up mxbatch's ssh/MPI test network: 4 "hosts" on one machine, each
# a Linux network namespace with its own address, sshd, hostname and private directory.
#
#   name   address        role
#   mxbh1  10.213.57.11   good host  (MXBATCH_TEST_HOSTFILE lists mxbh1..mxbh4)
#   mxbh2  10.213.57.12   good host
#   mxbh3  10.213.57.13   good host
#   mxbh4  10.213.57.14   good host
#   mxbh5  10.213.57.15   MXBATCH_TEST_HOST_NOPYTHON: ssh works, python3 "not found" (127)
#   mxbh6  10.213.57.16   MXBATCH_TEST_HOST_UNKNOWN_KEY: its host key is not in known_hosts
#   mxbh7  10.213.57.17   MXBATCH_TEST_HOST_UNREACHABLE: nothing listens (refused at once)
#   -      10.213.57.18   MXBATCH_TEST_HOST_NOROUTE: no such host ("No route to host", 0.6 s)
#   bridge mxbhost0 10.213.57.1 in the root namespace, which is the submit host.
# (10.213.57 is MXBATCH_HOSTS_NET's default.)
# The namespaces have no default route and nothing is NATed or forwarded: traffic goes
# only to loopback and these addresses.
#
# Each host's sshd runs in its network namespace (nsenter --net; not `ip netns exec`,
# which remounts /sys) and in its own mount and UTS namespaces (unshare -m -u): hostname
# = the host's name; $BASE/<host>/private bind-mounted onto the common path $BASE/private
# (MXBATCH_TEST_PRIVATE_DIR; in the root namespace a plain directory, the submit host's
# own), so a file written there over ssh is seen by that host only; /etc/hosts replaced by
# one that also names the hosts (the root namespace does not resolve the names: ssh does,
# through the ssh config). Root's ~/.bashrc is covered by a fixed PATH (login_rc): its
# side effects (pyenv rehash's lock) do not run at every login. The rest of the
# filesystem (venv, checkout, $BASE) is shared, as on a cluster with a shared /home. Mounts made later in the root namespace are not
# seen by the hosts (/ is a private mount here). Processes started over ssh inherit the
# sshd's namespaces and stay in them. The pid namespace is shared: every host's processes
# are in the root namespace's /proc; `hosts-exec.sh --pids HOST` lists those in HOST's
# network namespace (readlink /proc/PID/ns/net == the "net:[...]" of hosts.map).
#
# Client side (nothing in ~/.ssh or /etc/ssh is read or written): a test key, an ssh
# config (-F) and a known_hosts file written from the host keys themselves (no keyscan).
# $MXBATCH_CLUSTER_STATE/hosts.env exports the settings for the tests (see write_env).
#
# Idempotent and quick: keeps what is already right (keys, namespaces, running sshds),
# repairs a half-up state or one left by a crash, then checks everything end to end.
#
# Usage: ci/clusters/hosts-up.sh
# Env:   MXBATCH_CLUSTER_STATE   state root (default /tmp/mxbatch-clusters)
#        MXBATCH_HOSTS_TIMEOUT   seconds for each wait (default 30)
#        MXBATCH_HOSTS_NET       the /24 to use, as its first 3 octets (default 10.213.57)
#        MXBATCH_HOSTS_PYTHONS   more python interpreters (colon-separated paths) to hide
#                                on mxbh5, besides python* on PATH and the venv's
set -euo pipefail

HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
# shellcheck source-path=SCRIPTDIR source=lib.sh
. "$HERE/lib.sh"
# shellcheck source-path=SCRIPTDIR source=hosts-common.sh
. "$HERE/hosts-common.sh"

TIMEOUT=${MXBATCH_HOSTS_TIMEOUT:-30}
REPO=$(cd "$HERE/../.." && pwd)
SSHD=/usr/sbin/sshd
# sshd's PATH for root sessions (Debian), searched for interpreters to hide on mxbh5
SSHD_ROOT_PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin

usage() { sed -n '2,/^set /{/^set /d;s/^# \{0,1\}//;p}' "$0"; }

# start_daemon LOG CMD... : run a self-daemonizing CMD with stdio on LOG and no other
# inherited descriptors (the lock on fd 9, a caller's pipe). Fails with LOG's tail.
start_daemon() {
    local out=$1
    shift
    if ! (
        for fd in "/proc/$BASHPID/fd/"*; do
            fd=${fd##*/}
            ((fd > 2)) && eval "exec $fd>&-" 2>/dev/null
        done
        exec "$@"
    ) </dev/null >>"$out" 2>&1; then
        tail -n 20 "$out" >&2 || true
        return 1
    fi
}

# --- packages ------------------------------------------------------------

# apt_get ARGS... : apt-get that waits (with a deadline) for a lock held by another
# apt/dpkg run on the machine. Services are not started: there is no init system here
# (invoke-rc.d then refuses), and policy-rc.d, where present, says no as well.
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
    local pkgs=(openssh-server openssh-client rsync openmpi-bin iproute2 util-linux)
    local cmd missing=0
    for cmd in "$SSHD" ssh ssh-keygen rsync mpirun orted ip nsenter unshare flock; do
        command -v "$cmd" >/dev/null || missing=1
    done
    ((missing)) || return 0
    log "installing ${pkgs[*]}"
    if ! apt_get install -y --no-install-recommends "${pkgs[@]}"; then
        log "install failed (no or stale package lists?): apt-get update and retry"
        apt_get update || die "apt-get update failed"
        apt_get install -y --no-install-recommends "${pkgs[@]}" \
            || die "apt-get install ${pkgs[*]} failed"
    fi
    log "installed openssh-server $(dpkg-query -W -f='${Version}' openssh-server)," \
        "openmpi-bin $(dpkg-query -W -f='${Version}' openmpi-bin)"
}

# --- keys and client files -------------------------------------------------

# keygen FILE COMMENT: an ed25519 key without passphrase, made once and kept
keygen() {
    [[ -s $1 && -s $1.pub ]] && return 0
    rm -f "$1" "$1.pub"
    ssh-keygen -q -t ed25519 -N '' -C "$2" -f "$1" || die "ssh-keygen $1 failed"
    log "generated ${1#"$BASE"/}"
}

make_keys() {
    local h
    mkdir -p "$BASE/keys"
    keygen "$KEY" "mxbatch-test-client"
    chmod 0600 "$KEY"   # ssh and sshd refuse private keys others can read
    for h in "${SSHD_HOSTS[@]}"; do
        mkdir -p "$BASE/$h"
        keygen "$BASE/$h/ssh_host_ed25519_key" "root@$h"
        chmod 0600 "$BASE/$h/ssh_host_ed25519_key"
    done
}

# update FILE TEXT: TEXT (and a newline) into FILE atomically if that changes it; 0 if it
# did, 1 if not. TEXT comes whole from a `text=$(...)` (whose failure stops this script),
# so that a failure while making it never leaves half a file.
update() {
    local tmp
    tmp=$(mktemp "$1.XXXXXX")
    printf '%s\n' "$2" >"$tmp"
    if cmp -s "$tmp" "$1"; then
        rm -f "$tmp"
        return 1
    fi
    chmod 0644 "$tmp"
    mv -f "$tmp" "$1"
}

# Key exchange: the default, post-quantum sntrup761x25519, costs ~0.15 s of CPU on each
# side per connection; curve25519 alone cuts an ssh command here from 0.5 s to 0.3 s
KEX=curve25519-sha256,curve25519-sha256@libssh.org,sntrup761x25519-sha512@openssh.com

# ssh_config: the client's configuration (the same options for every host)
ssh_config() {
    local h opts
    opts="    User root
    IdentityFile $KEY
    IdentitiesOnly yes
    UserKnownHostsFile $KNOWN_HOSTS
    GlobalKnownHostsFile /dev/null
    StrictHostKeyChecking yes
    UpdateHostKeys no
    CheckHostIP no
    BatchMode yes
    ConnectTimeout 5
    ConnectionAttempts 1
    AddressFamily inet
    KexAlgorithms $KEX"
    echo "# Generated by ci/clusters/hosts-up.sh: use with ssh -F $SSH_CONFIG"
    echo "# Test hosts by name; 'Host *' makes their addresses work the same way."
    for h in "${ALL_HOSTS[@]}"; do
        printf 'Host %s\n    HostName %s\n%s\n' "$h" "$(host_ip "$h")" "$opts"
    done
    printf 'Host *\n%s\n' "$opts"
}

# known_hosts: the host keys straight from the key files: no keyscan, no trust on first
# use. mxbh6's key is left out on purpose (MXBATCH_TEST_HOST_UNKNOWN_KEY).
known_hosts() {
    local h kt kb
    for h in "${SSHD_HOSTS[@]}"; do
        [[ $h == "$BADKEY_HOST" ]] && continue
        read -r kt kb _ <"$BASE/$h/ssh_host_ed25519_key.pub" || return 1
        echo "$h,$(host_ip "$h") $kt $kb"
    done
}

# etc_hosts: the hosts' /etc/hosts: the machine's, plus the test hosts
etc_hosts() {
    local h
    cat /etc/hosts
    echo "# mxbatch test hosts (ci/clusters/hosts-up.sh)"
    for h in "${ALL_HOSTS[@]}"; do echo "$(host_ip "$h") $h"; done
}

write_client_files() {
    local text
    text=$(ssh_config) || die "no ssh config"
    update "$SSH_CONFIG" "$text" || true
    text=$(known_hosts) || die "no known_hosts (host keys?)"
    update "$KNOWN_HOSTS" "$text" || true
    update "$HOSTFILE" "$(printf '%s\n' "${GOOD_HOSTS[@]}")" || true
    text=$(etc_hosts) || die "no /etc/hosts for the hosts"
    update "$BASE/etc/hosts" "$text" || true
    # shellcheck disable=SC2016  # for the stand-in to expand
    update "$BASE/etc/no-python" '#!/bin/sh
# python stand-in on the test host without Python (ci/clusters/hosts-up.sh)
echo "${0##*/}: command not found" >&2
exit 127' || true
    chmod 0755 "$BASE/etc/no-python"
    text=$(login_rc) || die "no login rc for the hosts"
    update "$BASE/etc/login-rc" "$text" || true
}

# login_rc: what a test host's login shell reads instead of root's ~/.bashrc: the PATH
# that file makes, fixed here. Running root's rc at every ssh login has side effects the
# tests must not inherit: pyenv's init runs `pyenv rehash`, which takes a lock file; a
# login killed meanwhile (the tests kill jobs on the hosts) leaves the lock behind, and
# every later login then waits 60 s for it and says "cannot overwrite existing file".
login_rc() {
    local path
    path=$(login_path)
    [[ -n $path ]] || return 1
    echo "# Generated by ci/clusters/hosts-up.sh: root's login PATH on the test hosts,"
    echo "# bind-mounted over root's ~/.bashrc in each host's mount namespace."
    printf 'export PATH=%q\n' "$path"
}

# root_rc: root's ~/.bashrc if it exists (what the hosts' mounts cover), else nothing
root_rc() {
    local home
    home=$(getent passwd root | cut -d: -f6)
    [[ -n $home && -f $home/.bashrc ]] && echo "$home/.bashrc"
    return 0
}

# --- network ---------------------------------------------------------------

# in_ns NAME CMD...: CMD in host NAME's network namespace only
in_ns() { nsenter --net="/run/netns/$1" -- "${@:2}"; }

check_subnet_free() {
    local line
    # an address or route of the /24 on any other interface: someone else uses it
    line=$(ip -4 -o addr show | awk -v net="$NET." -v br="$BRIDGE" \
        '$2 != br && index($4, net) == 1 {print; exit}')
    [[ -z $line ]] || die "$SUBNET is in use here ($line): set MXBATCH_HOSTS_NET"
    # a route into the /24 (or a part of it) but through another link; a wider one
    # (10.0.0.0/8 via ...) is fine: our /24 is more specific
    line=$(ip -4 route show root "$SUBNET" | grep -v " dev $BRIDGE " || true)
    [[ -z $line ]] || die "$SUBNET is routed elsewhere ($line): set MXBATCH_HOSTS_NET"
}

ensure_bridge() {
    if ip link show dev "$BRIDGE" >/dev/null 2>&1 \
            && ! ip -d link show dev "$BRIDGE" | grep -q ' bridge '; then
        die "$BRIDGE exists and is not a bridge"
    fi
    if ! ip link show dev "$BRIDGE" >/dev/null 2>&1; then
        log "creating bridge $BRIDGE ($BRIDGE_IP/24)"
        ip link add "$BRIDGE" type bridge stp_state 0 forward_delay 0
    fi
    # no IPv6 on our links (no link-local traffic between the hosts either)
    echo 1 >"/proc/sys/net/ipv6/conf/$BRIDGE/disable_ipv6" 2>/dev/null || true
    fast_arp
    if [[ $(ip -4 -o addr show dev "$BRIDGE" | awk '{print $4}') != "$BRIDGE_IP/24" ]]; then
        log "$BRIDGE: address $BRIDGE_IP/24"
        ip addr flush dev "$BRIDGE"
        ip addr add "$BRIDGE_IP/24" dev "$BRIDGE"
    fi
    ip link set "$BRIDGE" up
}

# fast_arp: give up on an address nobody answers for after 3 ARP probes 0.2 s apart
# (default: 1 s apart), so that connecting to MXBATCH_TEST_HOST_NOROUTE fails with "No
# route to host" in 0.6 s, not 3 s. On our links only (the bridge here, eth0 in a host).
fast_arp() {
    local d=/proc/sys/net/ipv4/neigh/$BRIDGE
    echo 200 >"$d/retrans_time_ms"
    echo 3 >"$d/mcast_solicit"
}

# ensure_host_net NAME: namespace NAME with lo up and eth0 (a veth whose peer is a port
# of the bridge) holding the host's address and nothing else; no default route. One
# look inside, one set of fixes (ip -batch): this runs for 7 hosts on every hosts-up.sh.
ensure_host_net() {
    local h=$1 veth ip idx state="" addrs="" line script cmds
    veth=$(host_veth "$h")
    ip=$(host_ip "$h")
    # (not ip -batch: its "addr show" after a "link show" lists no addresses)
    if [[ -e /run/netns/$h ]] && ! state=$(in_ns "$h" sh -c 'ip -o link show dev eth0
            ip -4 -o addr show dev eth0; ip -4 route show default' 2>/dev/null); then
        # a name in /run/netns that is no namespace (a crash between file and mount)
        log "$h: /run/netns/$h is no namespace: removing it"
        ip netns delete "$h" 2>/dev/null || rm -f "/run/netns/$h"
    fi
    if [[ ! -e /run/netns/$h ]]; then
        log "creating namespace $h ($ip)"
        ip netns add "$h"
        state=""
    fi
    # eth0 must be the peer of the bridge port ("N: eth0@ifM: ..."); else both are remade
    read -r idx 2>/dev/null <"/sys/class/net/$veth/ifindex" || idx=none
    if [[ ! $state =~ (^|$'\n')[0-9]+:\ eth0@if$idx: ]]; then
        [[ -z $state ]] || log "$h: eth0 is not the peer of $veth: making both anew"
        ip link delete "$veth" 2>/dev/null || true
        in_ns "$h" ip link delete eth0 2>/dev/null || true
        ip link add "$veth" type veth peer name eth0 netns "$h"
        state=""
    fi
    echo 1 >"/proc/sys/net/ipv6/conf/$veth/disable_ipv6" 2>/dev/null || true
    ip link set "$veth" master "$BRIDGE" up
    while read -r line; do
        [[ $line =~ \ inet\ ([0-9./]+)\  ]] && addrs+="${BASH_REMATCH[1]} "
    done <<<"$state"
    # in the namespace: no IPv6 on eth0, quick ARP (see fast_arp), then ip -batch
    script='echo 1 >/proc/sys/net/ipv6/conf/eth0/disable_ipv6 2>/dev/null
        echo 200 >/proc/sys/net/ipv4/neigh/eth0/retrans_time_ms &&
        echo 3 >/proc/sys/net/ipv4/neigh/eth0/mcast_solicit && exec ip -batch -'
    cmds=""
    if [[ $addrs != "$ip/24 " ]]; then
        [[ -z $addrs ]] || log "$h: address(es) $addrs-> $ip/24"
        cmds+=$'addr flush dev eth0\n'"addr add $ip/24 dev eth0"$'\n'
    fi
    cmds+=$'link set lo up\nlink set eth0 up\n'
    if [[ $state =~ (^|$'\n')default\  ]]; then
        log "$h: removing its default route"
        cmds+=$'route flush exact 0.0.0.0/0\n'
    fi
    in_ns "$h" sh -c "$script" <<<"$cmds" || die "could not configure $h's eth0"
}

# --- sshd ------------------------------------------------------------------

# login_path: the PATH of a command run over ssh: sshd's, then what root's shell makes
# of it (Debian's bash reads ~/.bashrc when sshd runs it: pyenv, a venv, ...)
login_path() {
    local shell
    shell=$(getent passwd root | cut -d: -f7)
    # shellcheck disable=SC2016  # the login shell's PATH
    env -i HOME="$(getent passwd root | cut -d: -f6)" USER=root LOGNAME=root \
        SHELL="$shell" SSH_CLIENT="$BRIDGE_IP 22 22" PATH="$SSHD_ROOT_PATH" \
        "${shell:-/bin/sh}" -c 'echo "$PATH"' </dev/null 2>/dev/null || true
}

# python_paths: the files behind every python interpreter name on the PATH of an ssh
# command, on this one's, in the venvs and MXBATCH_HOSTS_PYTHONS: the stand-in is
# bind-mounted over each (a mount over a symlink lands on its target)
python_paths() {
    local dirs parts f p found=()
    dirs="$(login_path):$PATH:$SSHD_ROOT_PATH:${VIRTUAL_ENV:+$VIRTUAL_ENV/bin}:$REPO/.venv/bin"
    IFS=: read -ra parts <<<"$dirs"
    for p in "${parts[@]}"; do
        [[ -n $p && -d $p ]] || continue
        for f in "$p"/python*; do
            [[ ${f##*/} =~ ^python([0-9](\.[0-9]+m?)?)?$ && -f $f && -x $f ]] && found+=("$f")
        done
    done
    IFS=: read -ra parts <<<"${MXBATCH_HOSTS_PYTHONS:-}"
    for f in "${parts[@]}"; do
        [[ -z $f || -f $f ]] || die "MXBATCH_HOSTS_PYTHONS: no file $f"
        [[ -n $f ]] && found+=("$f")
    done
    ((${#found[@]})) || return 0
    realpath -e -- "${found[@]}" | sort -u
}

# sshd_config NAME: host NAME's sshd configuration
sshd_config() {
    local h=$1 d=$BASE/$1
    cat <<EOF
# Generated by ci/clusters/hosts-up.sh: sshd of test host $h (network namespace $h)
ListenAddress $(host_ip "$h")
Port 22
AddressFamily inet
HostKey $d/ssh_host_ed25519_key
PidFile $d/sshd.pid
AuthorizedKeysFile $KEY.pub
AuthorizedPrincipalsFile none
UsePAM no
StrictModes no
PermitRootLogin prohibit-password
PubkeyAuthentication yes
PasswordAuthentication no
KbdInteractiveAuthentication no
HostbasedAuthentication no
# Open MPI's and mxbatch's settings, passed with ssh -o SendEnv=...
AcceptEnv OMPI_* PMIX_* MXBATCH_* LANG LC_*
# tests open many sessions at once
MaxSessions 64
MaxStartups 64:30:128
LoginGraceTime 30
UseDNS no
PrintMotd no
PrintLastLog no
X11Forwarding no
Subsystem sftp internal-sftp
LogLevel INFO
EOF
}

# start_script NAME: what starts host NAME's sshd; run by /bin/sh in NAME's network
# namespace and in new, private mount and UTS namespaces
start_script() {
    local h=$1 d=$BASE/$1 f paths rc
    echo "#!/bin/sh"
    echo "# Generated by ci/clusters/hosts-up.sh: starts host $h's sshd; runs in $h's"
    echo "# network namespace and in new, private mount and UTS namespaces."
    echo "set -e"
    echo "hostname $h"
    echo "# drop this mount namespace's copies of the netns bind mounts (they would keep"
    echo "# those namespaces alive after 'ip netns delete')"
    # shellcheck disable=SC2016  # for start.sh to expand
    echo 'for f in /run/netns/*; do umount "$f" 2>/dev/null || true; done'
    echo "mount --bind $d/private $PRIVATE"
    echo "mount --bind $BASE/etc/hosts /etc/hosts"
    rc=$(root_rc)
    if [[ -n $rc ]]; then
        echo "# root's login shell: a fixed PATH, not root's rc (login_rc in hosts-up.sh)"
        echo "mount --bind $BASE/etc/login-rc $rc"
    fi
    if [[ $h == "$NOPY_HOST" ]]; then
        echo "# no Python on this host: a stand-in over each interpreter"
        paths=$(python_paths) || return 1   # (no set -e inside a $(...))
        for f in $paths; do
            echo "mount --bind $BASE/etc/no-python $f"
        done
    fi
    echo "exec $SSHD -f $d/sshd_config -E $d/sshd.log"
}

# write_sshd_files NAME: its sshd_config and start.sh; 0 if one of them changed. (Called
# in a condition, where set -e is off: hence the || die.)
write_sshd_files() {
    local h=$1 changed=1 text
    text=$(sshd_config "$h") || die "no sshd_config for $h"
    update "$BASE/$h/sshd_config" "$text" && changed=0
    text=$(start_script "$h") || die "no start.sh for $h"
    update "$BASE/$h/start.sh" "$text" && changed=0
    return "$changed"
}

# masks_ok PID: every stand-in of mxbh5's start.sh is still mounted in PID's mount
# namespace (a file replaced in the root namespace, e.g. by `pyenv rehash`, loses its
# mount there): each is a mount point in /proc/PID/mountinfo
masks_ok() {
    local f line points=" "
    while read -r line; do
        line=${line#* * * * }          # from the mount point on
        points+="${line%% *} "
    done <"/proc/$1/mountinfo"
    while read -r _ _ _ f; do
        [[ $points == *" $f "* ]] || return 1
    done < <(grep "^mount --bind $BASE/etc/no-python " "$BASE/$NOPY_HOST/start.sh")
}

# ensure_sshd NAME: host NAME's sshd runs, in its namespace, with the current files
ensure_sshd() {
    local h=$1 d=$BASE/$1 pid changed=0
    mkdir -p "$d/private"
    write_sshd_files "$h" && changed=1
    if pid=$(sshd_pid "$h"); then
        if ((changed)); then
            log "$h: configuration changed: restarting sshd"
        elif [[ $(readlink "/proc/$pid/ns/net") != "$(netns_id "$h")" ]]; then
            log "$h: sshd (pid $pid) runs in a stale network namespace: restarting it"
        elif [[ $h == "$NOPY_HOST" ]] && ! masks_ok "$pid"; then
            log "$h: python is visible again: restarting sshd"
        else
            return 0
        fi
        stop_pids "sshd of $h" 5 "$pid" || die "sshd of $h (pid $pid) does not stop"
    fi
    rm -f "$d/sshd.pid"
    "$SSHD" -t -f "$d/sshd_config" || die "sshd -t -f $d/sshd_config failed"
    log "$h: starting sshd on $(host_ip "$h"):22"
    start_daemon "$d/sshd.out" nsenter --net="/run/netns/$h" -- \
        unshare --mount --uts --propagation private -- /bin/sh "$d/start.sh" \
        || die "sshd of $h failed to start (see $d/sshd.out, $d/sshd.log)"
}

# stray_sshds: kill sshd listeners of ours that no pid file names (a crashed run's)
stray_sshds() {
    local pid h known=" " stray=()
    for h in "${SSHD_HOSTS[@]}"; do
        pid=$(sshd_pid "$h") && known+="$pid "
    done
    for pid in $(our_sshd_pids); do
        [[ $known == *" $pid "* ]] || stray+=("$pid")
    done
    ((${#stray[@]})) || return 0
    log "stopping stray sshd (pid ${stray[*]})"
    stop_pids "stray sshd" 5 "${stray[@]}" || die "stray sshd (pid ${stray[*]}) does not stop"
}

sshds_ready() {
    local h
    for h in "${SSHD_HOSTS[@]}"; do
        sshd_pid "$h" >/dev/null || return 1
    done
}

# host_map: "name address role netns private-storage" for each host
host_map() {
    local h role priv
    echo "# Generated by ci/clusters/hosts-up.sh: name address role netns private-storage"
    for h in "${ALL_HOSTS[@]}"; do
        case $h in
            "$NOPY_HOST") role=nopython ;;
            "$BADKEY_HOST") role=unknown-key ;;
            "$REFUSE_HOST") role=unreachable ;;
            *) role=good ;;
        esac
        priv=$BASE/$h/private
        [[ $h == "$REFUSE_HOST" ]] && priv=-   # no sshd, no mount namespace
        echo "$h $(host_ip "$h") $role $(netns_id "$h") $priv"
    done
    echo "- $NOROUTE_IP noroute - -"
}

# --- checks ------------------------------------------------------------------

SSH=(ssh -F "$SSH_CONFIG")

# Each check_* runs in the background (stdout+stderr to a file); non-zero = failed.

# check_login TARGET NAME: ssh to TARGET (name or address) lands on host NAME
check_login() {
    local out ip
    ip=$(host_ip "$2")
    out=$("${SSH[@]}" "$1" 'hostname; ip -4 -o addr show') || { echo "ssh $1 failed"; return 1; }
    [[ ${out%%$'\n'*} == "$2" ]] || { echo "ssh $1: hostname is not $2: $out"; return 1; }
    grep -q " inet $ip/24 " <<<"$out" || { echo "ssh $1: no $ip/24: $out"; return 1; }
    # only loopback and its own address
    [[ $(grep -c ' inet ' <<<"$out") == 2 ]] || { echo "ssh $1: other addresses: $out"; return 1; }
}

# check_private: a file written over ssh into the private dir on mxbh1 lands in mxbh1's
# storage and is not seen on mxbh2 (reached from mxbh1: host to host over the bridge,
# with the same ssh config) nor here; rsync copies a directory into mxbh2's private dir,
# seen there only
check_private() {
    local f=.up-check-$$ src out h
    out=$("${SSH[@]}" mxbh1 "echo mxbh1 >$PRIVATE/$f &&
        ssh -F $SSH_CONFIG mxbh2 'hostname; test ! -e $PRIVATE/$f || echo SEEN'") \
        || { echo "ssh mxbh1 (write, then ssh mxbh2) failed: $out"; return 1; }
    [[ $out == mxbh2 ]] || { echo "mxbh1 -> mxbh2: '$out' (SEEN: mxbh1's file is there)"; return 1; }
    [[ $(cat "$BASE/mxbh1/private/$f") == mxbh1 ]] || { echo "not in mxbh1's storage"; return 1; }
    if [[ -e $PRIVATE/$f ]]; then echo "mxbh1's file seen on the submit host"; return 1; fi
    rm -f "$BASE/mxbh1/private/$f"
    src=$(mktemp -d "$BASE/.rsync-check.XXXXXX")
    mkdir "$src/sub" && echo synced >"$src/sub/file"
    out=$(rsync -a -e "ssh -F $SSH_CONFIG" "$src/" "mxbh2:$PRIVATE/$f/" 2>&1) \
        || { echo "rsync to mxbh2 failed: $out"; return 1; }
    rm -rf "$src"
    [[ $(cat "$BASE/mxbh2/private/$f/sub/file") == synced ]] || { echo "rsync: not on mxbh2"; return 1; }
    for h in "$PRIVATE" "$BASE/mxbh1/private" "$BASE/mxbh3/private"; do
        if [[ -e $h/$f ]]; then echo "rsync to mxbh2 seen in $h"; return 1; fi
    done
    rm -rf "${BASE:?}/mxbh2/private/$f"
}

# (its stderr is only shown: under load Open MPI warns "setpgid(...) failed in parent"
# when a child has exec'd first, a harmless race)
check_mpi() {
    local out want err
    err=$(mktemp)
    out=$(timeout "$TIMEOUT" mpirun --allow-run-as-root -np 4 --host mxbh1,mxbh2,mxbh3,mxbh4 \
        hostname 2>"$err") || { echo "mpirun failed: $out $(cat "$err")"; rm -f "$err"; return 1; }
    want=$(printf '%s\n' "${GOOD_HOSTS[@]}")
    [[ $(sort <<<"$out") == "$want" ]] || { echo "mpirun printed: $out $(cat "$err")"; rm -f "$err"; return 1; }
    rm -f "$err"
}

# check_fails WHAT MAXSECS PATTERN CMD...: CMD fails within MAXSECS with PATTERN in its output
check_fails() {
    local what=$1 max=$2 pat=$3 out t0 us
    shift 3
    t0=${EPOCHREALTIME//[!0-9]/}
    if out=$("$@" 2>&1); then echo "$what: succeeded: $out"; return 1; fi
    us=$(( ${EPOCHREALTIME//[!0-9]/} - t0 ))
    grep -qiE "$pat" <<<"$out" || { echo "$what: no /$pat/ in: $out"; return 1; }
    ((us < max * 1000000)) || { echo "$what: took $((us / 1000)) ms"; return 1; }
    echo "$what: $(tail -n 1 <<<"$out")"
}

run_checks() {
    local tmp h name pids=() names=() i bad=0 ip times=""
    tmp=$(mktemp -d "$BASE/.checks.XXXXXX")
    export OMPI_MCA_plm_rsh_agent="ssh -F $SSH_CONFIG"
    export OMPI_MCA_btl_tcp_if_include=$SUBNET OMPI_MCA_oob_tcp_if_include=$SUBNET
    # bg NAME CHECK...: run CHECK in the background; its output, then its time in ms,
    # go to $tmp/NAME. Not holding the lock (fd 9): a killed run's checks, which go on
    # for a few seconds, do not hold up the next run.
    bg() {
        name=$1
        shift
        {
            local t0=${EPOCHREALTIME//[!0-9]/} rc=0
            "$@" || rc=$?
            echo "$(( (${EPOCHREALTIME//[!0-9]/} - t0) / 1000 ))"
            exit "$rc"
        } >"$tmp/$name" 2>&1 9>&- &
        pids+=($!)
        names+=("$name")
    }
    # the longest first: all run at once
    bg private check_private
    bg mpirun check_mpi
    for h in "${GOOD_HOSTS[@]}"; do
        bg "ssh-$h" check_login "$h" "$h"
        bg "ssh-$(host_ip "$h")" check_login "$(host_ip "$h")" "$h"
    done
    ip=$(host_ip "$NOPY_HOST")
    # the limits say "fails, and does not hang": generous, as every check runs at once and
    # a loaded 2-core machine took 12.6 s for one that takes 1 s when quiet
    bg nopython check_fails "python3 on $ip" 30 'not found' "${SSH[@]}" "$ip" python3 -c 1
    bg nopython-venv check_fails "venv python on $ip" 30 'not found' \
        "${SSH[@]}" "$ip" "$REPO/.venv/bin/python" -c 1
    ip=$(host_ip "$BADKEY_HOST")
    bg unknown-key check_fails "ssh $ip (unknown key)" 30 'Host key verification failed' \
        "${SSH[@]}" "$ip" true
    ip=$(host_ip "$REFUSE_HOST")
    bg unreachable check_fails "ssh $ip (unreachable)" 15 'refused' "${SSH[@]}" "$ip" true
    bg noroute check_fails "ssh $NOROUTE_IP (no route)" 15 'no route|timed out' \
        "${SSH[@]}" "$NOROUTE_IP" true
    for i in "${!pids[@]}"; do
        if ! wait "${pids[i]}"; then
            log "check ${names[i]} FAILED: $(sed '$d' "$tmp/${names[i]}")"
            bad=1
        elif [[ -n $(sed '$d' "$tmp/${names[i]}") ]]; then
            log "  ${names[i]} ($(tail -n 1 "$tmp/${names[i]}") ms): $(sed '$d' "$tmp/${names[i]}")"
        else
            times+=" ${names[i]} $(tail -n 1 "$tmp/${names[i]}"),"
        fi
    done
    log "  passed, in ms:${times%,}"
    rm -rf "$tmp"
    if ((bad)); then
        if [[ $(cat /proc/sys/net/bridge/bridge-nf-call-iptables 2>/dev/null) == 1 ]]; then
            log "note: bridged traffic between the hosts passes iptables' FORWARD chain" \
                "(bridge-nf-call-iptables=1): it must accept $SUBNET"
        fi
        die "checks failed (logs: $BASE/mxbh*/sshd.log)"
    fi
}

# --- env -----------------------------------------------------------------------

write_env() {
    local h addrs=() names=()
    for h in "${GOOD_HOSTS[@]}"; do
        addrs+=("$(host_ip "$h")")
        names+=("$h")
    done
    write_atomic "$ENV_FILE" <<EOF
# ssh/MPI test hosts (ci/clusters/hosts-up.sh); source with bash. Names, addresses and
# roles: $HOST_MAP ("name address role netns private-storage").
# ssh config for all test hosts, by name or address: ssh -F \$MXBATCH_SSH_CONFIG HOST
export MXBATCH_SSH_CONFIG=$SSH_CONFIG
export MXBATCH_TEST_SSH_KEY=$KEY
export MXBATCH_TEST_KNOWN_HOSTS=$KNOWN_HOSTS
# the 4 good hosts: a launch.py-style hostfile (names), their addresses, their names
export MXBATCH_TEST_HOSTFILE=$HOSTFILE
export MXBATCH_TEST_HOSTS="${addrs[*]}"
export MXBATCH_TEST_HOST_NAMES="${names[*]}"
export MXBATCH_TEST_HOST_MAP=$HOST_MAP
export MXBATCH_TEST_SUBNET=$SUBNET
export MXBATCH_TEST_BRIDGE_IP=$BRIDGE_IP
# same path on every host, different storage on each (here: the submit host's own);
# host N's is $BASE/mxbhN/private as seen from here
export MXBATCH_TEST_PRIVATE_DIR=$PRIVATE
# failure hosts (addresses; names in the map): ssh works but python3 is "not found"
# (exit 127); host key not in known_hosts ("Host key verification failed"); nothing
# listens ("Connection refused", at once); no host at all ("No route to host", 0.6 s)
export MXBATCH_TEST_HOST_NOPYTHON=$(host_ip "$NOPY_HOST")
export MXBATCH_TEST_HOST_UNKNOWN_KEY=$(host_ip "$BADKEY_HOST")
export MXBATCH_TEST_HOST_UNREACHABLE=$(host_ip "$REFUSE_HOST")
export MXBATCH_TEST_HOST_NOROUTE=$NOROUTE_IP
# run a command in a host's namespaces: \$MXBATCH_TEST_HOSTS_EXEC HOST CMD...
export MXBATCH_TEST_HOSTS_EXEC=$HERE/hosts-exec.sh
# Open MPI over these hosts: mpirun --host mxbh1,mxbh2 ... OMPI_ALLOW_RUN_AS_ROOT* is
# deliberately not set: running as root is the caller's explicit choice
# (mpirun --allow-run-as-root).
export OMPI_MCA_plm_rsh_agent="ssh -F $SSH_CONFIG"
export OMPI_MCA_btl_tcp_if_include=$SUBNET
export OMPI_MCA_oob_tcp_if_include=$SUBNET
EOF
}

main() {
    local h text
    case ${1:-} in
        "") ;;
        -h | --help) usage; exit 0 ;;
        *) usage >&2; die "unknown argument: $1" ;;
    esac
    require_root
    check_names
    install_packages
    lock_hosts
    trap '[[ $? == 0 ]] || rm -f "$ENV_FILE"' EXIT   # no env file for a broken network
    mkdir -p "$BASE/etc" "$PRIVATE" /run/sshd
    chmod 0755 /run/sshd
    make_keys
    write_client_files

    check_subnet_free
    ensure_bridge
    for h in "${ALL_HOSTS[@]}"; do
        ensure_host_net "$h"
    done
    stray_sshds
    for h in "${SSHD_HOSTS[@]}"; do
        ensure_sshd "$h"
    done
    if ! wait_until -s "sshd pid files" "$TIMEOUT" sshds_ready; then
        for h in "${SSHD_HOSTS[@]}"; do
            sshd_pid "$h" >/dev/null \
                || log "$h: no sshd; $BASE/$h/sshd.log ends: $(tail -n 2 "$BASE/$h/sshd.log" 2>/dev/null)"
        done
        die "an sshd did not come up"
    fi
    text=$(host_map) || die "no host map"
    update "$HOST_MAP" "$text" || true
    log "network up: $SUBNET on $BRIDGE; checking"
    run_checks
    write_env
    log "hosts up: ${GOOD_HOSTS[*]} ($NET.11-14); env: $ENV_FILE"
}

main "$@"
