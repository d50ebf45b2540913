#!/usr/bin/env bash
# minihdfs.sh: build and run MiniHDFS, a MiniDFSCluster for flexps tests.
#
#   minihdfs.sh install               build target/ (mvn; cached, idempotent)
#   minihdfs.sh start STATEDIR [ARGS] start in the background; wait for STATEDIR/state.json
#   minihdfs.sh stop STATEDIR         stop the cluster started in STATEDIR
#   minihdfs.sh run STATEFILE [ARGS]  run in the foreground (exec java); used by internal/hdfstest
#
# ARGS go to MiniHDFS: --datanodes N (3), --replication N (min(2,N)),
# --block-size BYTES (1048576), --nn-port N (0 = free), --http-port N (0 = free),
# --hostnames fake|ip (fake: datanodes register as dnI.localhost),
# --exit-on-stdin-eof, --cleanup-dir DIR (removed when the JVM exits).
# Env: MINIHDFS_START_TIMEOUT seconds (120), MINIHDFS_JAVA_OPTS extra JVM flags.
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
target="$here/target"
jar="$target/minihdfs-1.0.jar"
stamp="$target/.installed"

die() { echo "minihdfs: $*" >&2; exit 1; }

# Hadoop 3.4 reflects into JDK internals; Java 17 refuses without these.
java_opts=(
  -Xmx768m -XX:+UseSerialGC -XX:TieredStopAtLevel=1 -Xshare:auto
  -Djava.net.preferIPv4Stack=true
  -Dorg.slf4j.simpleLogger.defaultLogLevel=warn
  -Dorg.slf4j.simpleLogger.showDateTime=true
  --add-opens=java.base/java.lang=ALL-UNNAMED
  --add-opens=java.base/java.lang.reflect=ALL-UNNAMED
  --add-opens=java.base/java.io=ALL-UNNAMED
  --add-opens=java.base/java.net=ALL-UNNAMED
  --add-opens=java.base/java.nio=ALL-UNNAMED
  --add-opens=java.base/java.util=ALL-UNNAMED
  --add-opens=java.base/java.util.concurrent=ALL-UNNAMED
  --add-opens=java.base/java.util.concurrent.atomic=ALL-UNNAMED
  --add-opens=java.base/sun.nio.ch=ALL-UNNAMED
  --add-opens=java.base/sun.nio.cs=ALL-UNNAMED
  --add-opens=java.base/sun.security.action=ALL-UNNAMED
  --add-opens=java.base/sun.util.calendar=ALL-UNNAMED
  --add-exports=java.base/sun.net.dns=ALL-UNNAMED
  --add-exports=java.base/sun.net.util=ALL-UNNAMED
)

need() { command -v "$1" >/dev/null 2>&1 || die "$1 not found on PATH ($2)"; }

install() {
  need java "a JDK 11+ is required"
  mkdir -p "$target"
  # Test binaries of several packages may install at once: one builds, the
  # others wait and then find the build up to date. The lock lives in a
  # subshell so its descriptor is not inherited by a cluster started after.
  (
    if command -v flock >/dev/null 2>&1; then
      exec 9>"$target/.lock"
      flock 9
    fi
    build
  )
}

build() {
  # Rebuild only when the sources changed since the last good build.
  if [[ -f "$stamp" && -f "$jar" && -d "$target/lib" ]] &&
     [[ -z "$(find "$here/pom.xml" "$here/src" -newer "$stamp" -print -quit)" ]]; then
    return 0
  fi
  need mvn "Maven builds the launcher from Maven Central artifacts"
  echo "minihdfs: building launcher (first run downloads Hadoop from Maven Central)" >&2
  rm -rf "$target/lib"
  if ! (cd "$here" && mvn -q -B -Dstyle.color=never package) >"$target/mvn.log" 2>&1; then
    tail -n 40 "$target/mvn.log" >&2
    die "mvn package failed in $here (log: $target/mvn.log)"
  fi
  touch "$stamp"
}

classpath() { echo "$jar:$target/lib/*"; }

run() {
  local state="${1:?usage: minihdfs.sh run STATEFILE [ARGS]}"; shift
  [[ -f "$jar" ]] || die "not installed: run '$0 install' first"
  exec java "${java_opts[@]}" ${MINIHDFS_JAVA_OPTS:-} -cp "$(classpath)" flexps.MiniHDFS --state "$state" "$@"
}

start() {
  local dir="${1:?usage: minihdfs.sh start STATEDIR [ARGS]}"; shift
  install
  mkdir -p "$dir"
  dir="$(cd "$dir" && pwd)"
  local state="$dir/state.json" log="$dir/minihdfs.log" pidf="$dir/minihdfs.pid"
  if [[ -f "$pidf" ]] && kill -0 "$(cat "$pidf")" 2>/dev/null; then
    die "already running in $dir (pid $(cat "$pidf")); stop it first"
  fi
  rm -f "$state"
  nohup "$0" run "$state" --dir "$dir/data" "$@" </dev/null >"$log" 2>&1 9>&- &
  local pid=$!
  echo "$pid" >"$pidf"
  local timeout="${MINIHDFS_START_TIMEOUT:-120}" t0=$SECONDS
  while [[ ! -f "$state" ]]; do
    if ! kill -0 "$pid" 2>/dev/null; then
      rm -f "$pidf"
      tail -n 30 "$log" >&2 || true
      die "MiniHDFS exited before it was ready; log: $log"
    fi
    if (( SECONDS - t0 >= timeout )); then
      kill "$pid" 2>/dev/null || true
      rm -f "$pidf"
      tail -n 30 "$log" >&2 || true
      die "MiniHDFS not ready after ${timeout}s; log: $log"
    fi
    sleep 0.2
  done
  echo "minihdfs: ready in $((SECONDS - t0))s; state $state" >&2
  cat "$state"
}

stop() {
  local dir="${1:?usage: minihdfs.sh stop STATEDIR}"
  local pidf="$dir/minihdfs.pid"
  [[ -f "$pidf" ]] || { echo "minihdfs: nothing running in $dir" >&2; return 0; }
  local pid; pid="$(cat "$pidf")"
  if kill -0 "$pid" 2>/dev/null; then
    kill "$pid"
    for _ in $(seq 1 100); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
    if kill -0 "$pid" 2>/dev/null; then kill -9 "$pid" 2>/dev/null || true; fi
  fi
  rm -f "$pidf" "$dir/state.json"
}

cmd="${1:-}"; shift || true
case "$cmd" in
  install) install ;;
  start) start "$@" ;;
  stop) stop "$@" ;;
  run) run "$@" ;;
  *) echo "usage: $0 install | start STATEDIR [ARGS] | stop STATEDIR | run STATEFILE [ARGS]" >&2; exit 2 ;;
esac
