#!/bin/bash
# yarn-up.sh - bring up a single-host YARN cluster for mxbatch's tests: the real Hadoop
# ResourceManager and NodeManager daemons on 127.0.0.1, no HDFS (the default file system
# is a viewfs over file:///, see yarn/conf/core-site.xml.in for why),
# run from a flat dir of jars fetched by Maven (ci/clusters/yarn/pom.xml), plus a `yarn`
# shim for skein. Idempotent: run while the cluster is up, it only re-checks it (and
# restarts the daemons if the rendered config changed).
#
# Writes STATE/yarn.env (source it before running the YARN tests):
#   PATH (the shim), HADOOP_CONF_DIR, YARN_CONF_DIR, JAVA_HOME, SKEIN_CONFIG,
#   SKEIN_DRIVER_JAVA_OPTIONS, MXBATCH_YARN_* (see write_env).
#
# Env knobs:
#   MXBATCH_CLUSTER_STATE     state root (default /tmp/mxbatch-clusters; ours is STATE/yarn)
#   MXBATCH_YARN_CACHE        jar cache, kept between runs (default ~/.cache/mxbatch-yarn)
#   MXBATCH_HADOOP_VERSION    Hadoop version to fetch (default 3.4.2)
#   MXBATCH_YARN_NM_MEMORY_MB NodeManager memory = max allocation (default 8192)
#   MXBATCH_YARN_NM_VCORES    NodeManager vcores = max allocation (default 8)
#   MXBATCH_YARN_UP_TIMEOUT   seconds to wait for the node to register (default 180)
#   JAVA_HOME                 Java 11, 17 or 21 (default: the `java` on PATH). Tested: 17.
#                             Not 23+: Hadoop 3.4's UGI needs Subject.getSubject.
set -euo pipefail

HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
# shellcheck source-path=SCRIPTDIR source=lib.sh
. "$HERE/lib.sh"
# shellcheck source-path=SCRIPTDIR source=yarn-common.sh
. "$HERE/yarn-common.sh"

SRC=$HERE/yarn
HADOOP_VERSION=${MXBATCH_HADOOP_VERSION:-3.4.2}
CACHE=${MXBATCH_YARN_CACHE:-$HOME/.cache/mxbatch-yarn}
NM_MEMORY_MB=${MXBATCH_YARN_NM_MEMORY_MB:-8192}
NM_VCORES=${MXBATCH_YARN_NM_VCORES:-8}
UP_TIMEOUT=${MXBATCH_YARN_UP_TIMEOUT:-180}

LIB=$CACHE/hadoop-$HADOOP_VERSION/lib
CONF=$STATE/conf
LOGS=$STATE/logs
BIN=$STATE/bin
NM_WEB_PORT=8042
NM_LOCALIZER_PORT=8040
# the RM's RPC ports (yarn-default.xml, with yarn.resourcemanager.hostname)
RM_RPC_PORTS="8030 8031 8032 8033"

# Java 17: what Hadoop's own hadoop-functions.sh adds since HADOOP-19310
JPMS=(--add-opens=java.base/java.lang=ALL-UNNAMED
      --add-opens=java.base/java.lang.reflect=ALL-UNNAMED
      --add-opens=java.base/java.lang.invoke=ALL-UNNAMED
      --add-opens=java.base/java.io=ALL-UNNAMED
      --add-opens=java.base/java.net=ALL-UNNAMED
      --add-opens=java.base/java.nio=ALL-UNNAMED
      --add-opens=java.base/java.util=ALL-UNNAMED
      --add-opens=java.base/java.util.concurrent=ALL-UNNAMED
      --add-opens=java.base/sun.nio.ch=ALL-UNNAMED
      --add-exports=java.base/sun.net.dns=ALL-UNNAMED
      --add-exports=java.base/sun.net.util=ALL-UNNAMED)
JPMS_OPTS="${JPMS[*]}"
DAEMON_OPTS=(-Xmx512m -XX:+UseSerialGC -Djava.net.preferIPv4Stack=true)

# java_home -> print a JAVA_HOME for Java 11..21 or die
java_home() {
    local home=${JAVA_HOME:-} java major
    if [ -z "$home" ]; then
        java=$(command -v java) || die "no java on PATH and JAVA_HOME unset (apt-get install openjdk-17-jdk-headless)"
        home=$(dirname "$(dirname "$(readlink -f "$java")")")
    fi
    [ -x "$home/bin/java" ] || die "JAVA_HOME=$home has no bin/java"
    major=$("$home/bin/java" -XshowSettings:properties -version 2>&1 \
        | awk -F'= ' '/java.specification.version/ {print $2}')
    case "$major" in
        11|17|21) ;;
        *) die "Java $major at $home: Hadoop $HADOOP_VERSION needs 11..21 (set JAVA_HOME)" ;;
    esac
    echo "$home"
}

port_busy() { ss -Hltn "sport = :$1" 2>/dev/null | grep -q .; }

# jars_complete -> true if the cache holds a finished fetch for this pom and version
jars_complete() {
    local stamp=$CACHE/hadoop-$HADOOP_VERSION/complete
    [ -f "$stamp" ] && [ "$(cat "$stamp")" = "$(pom_digest)" ] \
        && [ -f "$LIB/hadoop-yarn-server-resourcemanager-$HADOOP_VERSION.jar" ]
}

jar_count() { find "$1" -maxdepth 1 -name '*.jar' | wc -l; }

pom_digest() { { cat "$SRC/pom.xml"; echo "$HADOOP_VERSION"; } | sha256sum | cut -d' ' -f1; }

fetch_jars() {
    if jars_complete; then
        log "jars: cached in $LIB ($(jar_count "$LIB") jars)"
        return
    fi
    command -v mvn >/dev/null || {
        log "installing maven"
        DEBIAN_FRONTEND=noninteractive apt-get -o DPkg::Lock::Timeout=600 install -y maven >/dev/null
    }
    local dir=$CACHE/hadoop-$HADOOP_VERSION tmp
    tmp=$dir/lib.tmp
    log "jars: fetching Hadoop $HADOOP_VERSION with Maven into $dir (one-time)"
    mkdir -p "$dir"
    rm -rf "$tmp"
    # the local repo lives in the cache too, so that one dir is all a CI cache must keep
    if ! timeout 900 mvn -B -q -f "$SRC/pom.xml" -Dhadoop.version="$HADOOP_VERSION" \
            -Dmaven.repo.local="$CACHE/m2" \
            dependency:copy-dependencies -DincludeScope=runtime -DoutputDirectory="$tmp" \
            >"$dir/mvn.log" 2>&1; then
        tail -n 30 "$dir/mvn.log" >&2
        die "mvn dependency:copy-dependencies failed (full log: $dir/mvn.log)"
    fi
    check_jars "$tmp"
    rm -rf "$LIB"
    mv "$tmp" "$LIB"
    pom_digest >"$dir/complete"
    log "jars: $(jar_count "$LIB") jars, $(du -sh "$LIB" | cut -f1)"
}

# check_jars DIR: the classes the daemons, the CLI and skein need are there
check_jars() {
    local dir=$1 a
    for a in hadoop-yarn-server-resourcemanager hadoop-yarn-server-nodemanager \
             hadoop-yarn-server-web-proxy hadoop-yarn-client hadoop-mapreduce-client-core \
             hadoop-yarn-applications-distributedshell hadoop-common hadoop-hdfs-client; do
        [ -f "$dir/$a-$HADOOP_VERSION.jar" ] || die "fetch incomplete: no $a-$HADOOP_VERSION.jar in $dir"
    done
    ls "$dir"/reload4j-*.jar >/dev/null 2>&1 || die "fetch incomplete: no reload4j (log4j 1 API) in $dir"
}

# render SRC DEST: fill in the @VARS@ of a template
render() {
    sed -e "s|@STATE_DIR@|$STATE|g" -e "s|@CONF_DIR@|$CONF|g" -e "s|@LIB_DIR@|$LIB|g" \
        -e "s|@NM_MEMORY_MB@|$NM_MEMORY_MB|g" -e "s|@NM_VCORES@|$NM_VCORES|g" \
        -e "s|@RM_WEB_PORT@|$RM_WEB_PORT|g" -e "s|@NM_WEB_PORT@|$NM_WEB_PORT|g" \
        -e "s|@NM_LOCALIZER_PORT@|$NM_LOCALIZER_PORT|g" "$1" >"$2"
    ! grep -n '@[A-Z_]*@' "$2" >&2 || die "unrendered variable in $2"
}

# write_conf: render the config into CONF; CONF_CHANGED=1 if it differs from before
write_conf() {
    local new=$STATE/conf.new f
    rm -rf "$new"
    mkdir -p "$new"
    for f in core-site.xml yarn-site.xml capacity-scheduler.xml; do
        render "$SRC/conf/$f.in" "$new/$f"
    done
    cp "$SRC/conf/log4j.properties" "$new/"
    if [ -d "$CONF" ] && diff -rq "$CONF" "$new" >/dev/null; then
        CONF_CHANGED=0
        rm -rf "$new"
    else
        CONF_CHANGED=1
        rm -rf "$CONF"
        mv "$new" "$CONF"
        log "config written to $CONF"
    fi
}

write_shim() {
    mkdir -p "$BIN"
    cp "$SRC/yarn" "$BIN/yarn.new"
    chmod 0755 "$BIN/yarn.new"
    mv "$BIN/yarn.new" "$BIN/yarn"
    cat >"$BIN/yarn-shim.env" <<EOF
# written by ci/clusters/yarn-up.sh
YARN_SHIM_JAVA='$JAVA_HOME/bin/java'
YARN_SHIM_CONF='$CONF'
YARN_SHIM_LIB='$LIB'
YARN_SHIM_JAVA_OPTS='-Xmx256m -XX:+UseSerialGC -Djava.net.preferIPv4Stack=true $JPMS_OPTS'
EOF
}

# start_daemon NAME CLASS: run it in its own session, its pid in RUN/NAME.pid
start_daemon() {
    local name=$1 class=$2 pid
    if pid=$(pid_of "$name" "$class"); then
        log "$name already running (pid $pid)"
        return
    fi
    log "starting $name"
    rm -f "$RUN/$name.pid"
    # `echo $$; exec`: the pid file holds the java process itself
    # shellcheck disable=SC2016
    HADOOP_CONF_DIR=$CONF setsid bash -c 'echo $$ >"$0"; exec "$@"' \
        "$RUN/$name.pid" "$JAVA_HOME/bin/java" "${DAEMON_OPTS[@]}" "${JPMS[@]}" \
        -Dproc_"$name" -Dhadoop.log.dir="$LOGS" -Dyarn.log.dir="$LOGS" \
        -Dhadoop.log.file="$name.log" -Dyarn.log.file="$name.log" \
        -Dhadoop.root.logger=INFO,console \
        -cp "$CONF:$LIB/*" "$class" </dev/null >>"$LOGS/$name.log" 2>&1 &
    wait_until 10 test -s "$RUN/$name.pid" || die "$name did not start (see $LOGS/$name.log)"
}

# stop_daemons: what yarn-down.sh does, but keep the state (used on a config change)
stop_daemons() {
    MXBATCH_CLUSTER_STATE=$STATE_ROOT "$HERE/yarn-down.sh"
}

# check_ports: the ports of a daemon we are about to start must be free
check_ports() {
    local p
    if ! pid_of resourcemanager "$RM_CLASS" >/dev/null; then
        for p in $RM_WEB_PORT $RM_RPC_PORTS; do
            ! port_busy "$p" || die "port $p (ResourceManager) is taken: ss -ltnp 'sport = :$p'"
        done
    fi
    if ! pid_of nodemanager "$NM_CLASS" >/dev/null; then
        for p in $NM_WEB_PORT $NM_LOCALIZER_PORT; do
            ! port_busy "$p" || die "port $p (NodeManager) is taken: ss -ltnp 'sport = :$p'"
        done
    fi
}

rm_metrics() { curl -sf --max-time 3 "$RM_URL/ws/v1/cluster/metrics" 2>/dev/null; }

# node_active: the RM counts an active node (ACTIVE_NODES); dies if a daemon died
node_active() {
    ACTIVE_NODES=$(rm_metrics | sed -n 's/.*"activeNodes":\([0-9]*\).*/\1/p') || ACTIVE_NODES=0
    [ "${ACTIVE_NODES:-0}" -ge 1 ] && return 0
    pid_of resourcemanager "$RM_CLASS" >/dev/null || { tail -n 40 "$LOGS/resourcemanager.log" >&2; die "ResourceManager died"; }
    pid_of nodemanager "$NM_CLASS" >/dev/null || { tail -n 40 "$LOGS/nodemanager.log" >&2; die "NodeManager died"; }
    return 1
}

wait_ready() {
    log "waiting up to ${UP_TIMEOUT}s for the NodeManager to register"
    if ! wait_until "$UP_TIMEOUT" node_active; then
        tail -n 20 "$LOGS/resourcemanager.log" "$LOGS/nodemanager.log" >&2
        die "no active node after ${UP_TIMEOUT}s (logs in $LOGS)"
    fi
    log "ResourceManager $RM_URL: activeNodes $ACTIVE_NODES"
}

write_env() {
    local f=$STATE_ROOT/yarn.env
    write_atomic "$f" <<EOF
# written by ci/clusters/yarn-up.sh: source before the YARN tests
export PATH="$BIN:\$PATH"
export JAVA_HOME="$JAVA_HOME"
export HADOOP_CONF_DIR="$CONF"
export YARN_CONF_DIR="$CONF"
export SKEIN_CONFIG="$STATE/skein"
export SKEIN_DRIVER_JAVA_OPTIONS="-Xmx256m -XX:+UseSerialGC"
export MXBATCH_YARN_STATE="$STATE"
export MXBATCH_YARN_LIB="$LIB"
export MXBATCH_YARN_RM_URL="$RM_URL"
export MXBATCH_YARN_NM_LOG_DIR="$STATE/nm-logs"
export MXBATCH_YARN_JAVA_OPTS="$JPMS_OPTS"
EOF
    log "env written to $f"
}

main() {
    JAVA_HOME=$(java_home)
    export JAVA_HOME
    command -v curl >/dev/null || die "curl is needed"
    fetch_jars
    mkdir -p "$STATE" "$RUN" "$LOGS" "$STATE/nm-local" "$STATE/nm-logs" "$STATE/tmp" "$STATE/skein" "$STATE/home"
    write_conf
    if [ "$CONF_CHANGED" = 1 ] && { pid_of resourcemanager "$RM_CLASS" || pid_of nodemanager "$NM_CLASS"; } >/dev/null; then
        log "config changed: restarting the daemons"
        stop_daemons
    fi
    write_shim
    check_ports
    start_daemon resourcemanager "$RM_CLASS"
    start_daemon nodemanager "$NM_CLASS"
    wait_ready
    write_env
    log "cluster up (Hadoop $HADOOP_VERSION, Java $("$JAVA_HOME/bin/java" -XshowSettings:properties -version 2>&1 | awk -F'= ' '/java.specification.version/ {print $2}'))"
}

main "$@"
