# shellcheck shell=bash disable=SC2034  # its variables are used by the scripts that source it
# ci/clusters/hosts-common.sh -- what hosts-up.sh, hosts-down.sh and hosts-exec.sh share:
# the test network's names and addresses, where its state lives, the lock. Sourced after
# lib.sh; the script sets TIMEOUT (seconds for each wait) before calling lock_hosts.
#
# The network (root namespace = the submit host; see hosts-up.sh):
#   bridge mxbhost0          $NET.1/24   (MXBATCH_TEST_BRIDGE_IP)
#   mxbh1 .. mxbh4           $NET.11-14  good hosts: sshd, private work-tree dir
#   mxbh5                    $NET.15     sshd works, python3 does not ("not found", 127)
#   mxbh6                    $NET.16     sshd whose host key is not in known_hosts
#   mxbh7                    $NET.17     a host where nothing listens (connection refused)
#   (nobody)                 $NET.18     no host at all ("No route to host" after 0.6 s)
# Each mxbhN is a network namespace (/run/netns/mxbhN) whose eth0 is a veth; its peer,
# mxbhvN, is a port of the bridge. No default route, no NAT, no forwarding changes.
# These names are machine-wide: one such network per machine, whatever the state dir.

STATE_ROOT=${MXBATCH_CLUSTER_STATE:-/tmp/mxbatch-clusters}
BASE=$STATE_ROOT/hosts
ENV_FILE=$STATE_ROOT/hosts.env
LOCK_FILE=$STATE_ROOT/hosts.lock   # outside BASE: hosts-down.sh --wipe removes BASE

NET=${MXBATCH_HOSTS_NET:-10.213.57}   # the /24's first three octets (RFC 1918)
SUBNET=$NET.0/24
BRIDGE=mxbhost0
BRIDGE_IP=$NET.1
GOOD_HOSTS=(mxbh1 mxbh2 mxbh3 mxbh4)
NOPY_HOST=mxbh5
BADKEY_HOST=mxbh6
REFUSE_HOST=mxbh7
ALL_HOSTS=("${GOOD_HOSTS[@]}" "$NOPY_HOST" "$BADKEY_HOST" "$REFUSE_HOST")
SSHD_HOSTS=("${GOOD_HOSTS[@]}" "$NOPY_HOST" "$BADKEY_HOST")   # hosts that run an sshd
NOROUTE_IP=$NET.18

PRIVATE=$BASE/private             # each host mounts its own $BASE/<host>/private here
KEY=$BASE/keys/id_ed25519         # the test client's key (root@any host)
SSH_CONFIG=$BASE/etc/ssh_config
KNOWN_HOSTS=$BASE/etc/known_hosts
HOSTFILE=$BASE/etc/hostfile
HOST_MAP=$BASE/etc/hosts.map

# host_ip NAME: its address; host_veth NAME: the bridge port
host_ip() { echo "$NET.$((10 + ${1#mxbh}))"; }
host_veth() { echo "mxbhv${1#mxbh}"; }

# check_names: die unless NET and BASE are safe to paste into configs unquoted
check_names() {
    if [[ ! $NET =~ ^10\.([0-9]{1,3})\.([0-9]{1,3})$ ]] \
            || ((BASH_REMATCH[1] > 255 || BASH_REMATCH[2] > 255)); then
        die "MXBATCH_HOSTS_NET must be 10.X.Y (a /24 in 10/8), not '$NET'"
    fi
    [[ $BASE =~ ^/[A-Za-z0-9_./+-]+$ ]] \
        || die "state dir '$BASE' must be an absolute path without spaces or special characters"
}

# sshd_pid NAME: the live pid of host NAME's sshd listener (1 if none); pid_from_file
# without its forks, as up and down call this often
sshd_pid() {
    local pid comm args
    read -r pid 2>/dev/null <"$BASE/$1/sshd.pid" || return 1
    pid_alive "$pid" || return 1
    read -r comm 2>/dev/null <"/proc/$pid/comm" && [[ $comm == sshd ]] || return 1
    mapfile -d '' args 2>/dev/null <"/proc/$pid/cmdline" || return 1
    [[ " ${args[*]} " == *" $BASE/$1/sshd_config "* ]] || return 1
    echo "$pid"
}

# our_sshd_pids: every live sshd listener started with a config under BASE, pid file or
# not (a crashed hosts-up.sh may have lost one)
our_sshd_pids() {
    local f pid comm args
    for f in /proc/[0-9]*/comm; do
        read -r comm 2>/dev/null <"$f" || continue
        [[ $comm == sshd ]] || continue
        pid=${f#/proc/}
        pid=${pid%/comm}
        args=$(tr '\0' ' ' 2>/dev/null <"/proc/$pid/cmdline") || continue
        [[ $args == *" -f $BASE/mxbh"*"/sshd_config"* ]] && pid_alive "$pid" && echo "$pid"
    done
    return 0
}

# netns_id NAME: "net:[INODE]" of network namespace NAME, as /proc/PID/ns/net reads
netns_id() {
    local ino
    ino=$(stat -L -c %i "/run/netns/$1" 2>/dev/null) || return 1
    echo "net:[$ino]"
}

# lock_hosts: hold LOCK_FILE (fd 9) for the rest of this run, so that hosts-up.sh and
# hosts-down.sh never run at the same time. Daemons must not inherit fd 9.
lock_hosts() {
    mkdir -p "$STATE_ROOT"
    exec 9>"$LOCK_FILE"
    flock -n 9 && return 0
    log "waiting for $LOCK_FILE (another hosts-up/down runs)"
    flock -w "$TIMEOUT" 9 || die "another hosts-up/down holds $LOCK_FILE"
}
