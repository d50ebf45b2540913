#!/bin/bash
# KV push/pull MB/s, flexps over NATS and over the direct TCP data plane
# against ps-lite, on ps-lite's own workload: one server process, one
# worker, W float32 values per key, K keys per call drawn from a table of
# max(K, 4M/W) keys (65,536 for W=64), Adds/pushes with 64 in flight, pulls
# one at a time. flexps runs bench/kv -procs -shards 1 (the shard server in
# a process of its own, the worker's client in another, NATS embedded in the
# worker's process). push is Add (float64 deltas, converted), push32
# AddFloat32 (float32 deltas, as ps-lite pushes them); pull is Get (into
# float64), pull32 GetFloat32 (into float32, as ps-lite pulls). Rounds
# interleave the systems; every ratio is taken within a round, and the
# median over rounds is printed.
#
#   PSLITE_BENCH=/path/to/test_kv_bench bash bench/kv/vs_pslite.sh [rounds]
#
# test_kv_bench is ps-lite with ../shared/peers/pslite_kv_bench.cc, built
# by ../shared/peers/build.sh. Without PSLITE_BENCH only flexps runs.
set -euo pipefail
R=${1:-1}; W=${W:-64}; K=${K:-62500}; SECS=${SECS:-1}; PORT=${PORT:-18950}
cd "$(dirname "$0")/../.."
BIN=$(mktemp -d)/kvbench
trap 'rm -rf "$(dirname "$BIN")"' EXIT
go build -o "$BIN" ./bench/kv
field() { sed -n "s/.*\"op\":\"remote $1\",\"transport\":\"$2\".*\"mb_per_s\":\([0-9.]*\).*/\1/p"; }
echo "# W=$W K=$K, ${SECS}s per op, $R round(s); MB/s of values (keys x W x 4 / 1e6)"
printf "%-6s %-6s %10s %10s %10s %8s %10s\n" round op nats tcp ps-lite tcp/nats tcp/ps-lite
rows=()
for r in $(seq "$R"); do
  out=$("$BIN" -procs -shards 1 -widths "$W" -batches "$K" -only "remote (get|get32|add|add32) dense $W\$" -duration "${SECS}s" -rounds 1 -json 2>/dev/null)
  push=""; pull=""
  if [ -n "${PSLITE_BENCH:-}" ]; then
    PORT=$((PORT + 1))
    ps=$(export DMLC_NUM_SERVER=1 DMLC_NUM_WORKER=1 DMLC_PS_ROOT_URI=127.0.0.1 DMLC_PS_ROOT_PORT=$PORT DMLC_INTERFACE=lo W K SECS ROUNDS=1
      # ps-lite's scheduler or server sometimes never exits: bounded too.
      DMLC_ROLE=scheduler timeout 150 "$PSLITE_BENCH" >/dev/null 2>&1 & a=$!
      DMLC_ROLE=server timeout 150 "$PSLITE_BENCH" >/dev/null 2>&1 & b=$!
      DMLC_ROLE=worker timeout 120 "$PSLITE_BENCH" 2>/dev/null | grep RESULT || true
      wait $a $b || true)
    push=$(echo "$ps" | sed -n 's/.*op=push .*MB_per_s=\([0-9.]*\).*/\1/p')
    pull=$(echo "$ps" | sed -n 's/.*op=pull .*MB_per_s=\([0-9.]*\).*/\1/p')
  fi
  for op in add add32 get get32; do
    n=$(echo "$out" | field $op nats); t=$(echo "$out" | field $op tcp)
    p=$pull; name=pull; [ $op = add ] && p=$push && name=push; [ $op = add32 ] && p=$push && name=push32; [ $op = get32 ] && name=pull32
    line=$(awk -v r="$r" -v op=$name -v n="$n" -v t="$t" -v p="${p:-0}" 'BEGIN {
      printf "%-6s %-6s %10.1f %10.1f %10s %8.2f %10s", r, op, n, t, (p > 0 ? sprintf("%.1f", p) : "-"), t / n, (p > 0 ? sprintf("%.2f", t / p) : "-") }')
    echo "$line"; rows+=("$line")
  done
done
if [ "$R" -gt 1 ]; then
  printf '%s\n' "${rows[@]}" | awk '{ k = $2; tn[k] = tn[k] " " $6; tp[k] = tp[k] " " $7 }
    function med(s,   a, n, i, j, x) { n = split(s, a, " "); for (i = 2; i <= n; i++) { x = a[i]; for (j = i - 1; j >= 1 && a[j] + 0 > x + 0; j--) a[j + 1] = a[j]; a[j + 1] = x }; return n % 2 ? a[(n + 1) / 2] : (a[n / 2] + a[n / 2 + 1]) / 2 }
    END { for (k in tn) printf "median %-6s tcp/nats %.2f  tcp/ps-lite %s\n", k, med(tn[k]), (tp[k] ~ /-/ ? "-" : sprintf("%.2f", med(tp[k]))) }'
fi
