#!/bin/bash
# The process cache on the LR `ps` job across processes: a master and two
# slave processes (1 slot each, direct TCP data plane), the data and job of
# vs_flexps.sh (200k rows x 1M features, Zipf 1.1, batch 100, SSP(2), 5
# epochs), each of two configurations without and with `cache = "lru"`
# (`cache_size`, default 4096 keys): the same model as FlexPS C++ (no
# intercept, no scaling, replicas = 1) and the shipped defaults. Jobs
# interleave within a round; prints samples/s of epochs 2+, the per-round
# ratios with/without, their medians, and the last cached job's cache line.
# Odd rounds run each job before its cached twin, even rounds after it
# (a cluster's later jobs are not slower, but no order is favoured).
# READ_AHEAD=1 trains all four with read_ahead = true (through the cache,
# the governor picks the table's own read ahead or cached reads).
#
#   [READ_AHEAD=1] bash bench/lr/cache_ab.sh [rounds]
set -euo pipefail
R=${1:-3}; SIZE=${SIZE:-4096}
cd "$(dirname "$0")/../.."
. bench/lrjob.sh
lr_prepare
cache="cache = \"lru\"\ncache_size = $SIZE\n"
ra=""; [ -n "${READ_AHEAD:-}" ] && ra='read_ahead = true\n'
lr_job same ps 5 'replicas = 1\n' "intercept = false\nstandardize = false\n$ra"
lr_job defaults ps 5 '' "$ra"
for j in same defaults; do
  # The stage's own keys go before its params table.
  sed "s/^\[stage.params\]/$cache[stage.params]/; s/$j.model/${j}_lru.model/; s/^name = \"$j\"/name = \"${j}_lru\"/" "$W/$j.toml" > "$W/${j}_lru.toml"
done
lr_cluster_config
printf "%-6s %9s %9s %9s %9s %9s %9s\n" round same same_lru ratio defaults def_lru ratio
rows=()
for r in $(seq "$R"); do
  lr_cluster_start
  declare -A got
  order="same same_lru defaults defaults_lru"
  [ $((r % 2)) = 0 ] && order="same_lru same defaults_lru defaults"
  for j in $order; do
    got[$j]=$(lr_submit $j)
    [ $j = defaults_lru ] && line=$(grep -o "process cache:.*" "$W/submit.log" || true)
  done
  lr_cluster_stop
  row=$(awk -v r="$r" -v s="${got[same]}" -v sc="${got[same_lru]}" -v d="${got[defaults]}" -v dc="${got[defaults_lru]}" \
    'BEGIN { printf "%-6s %9d %9d %9.2f %9d %9d %9.2f", r, s, sc, sc / s, d, dc, dc / d }')
  echo "$row"; rows+=("$row")
done
echo "defaults_lru, last round: ${line:-no cache line}"
printf "%s\n" "${rows[@]}" | python3 -c '
import sys, statistics as st
r=[l.split() for l in sys.stdin if l.strip()]
for i, n in ((3, "same_lru/same"), (6, "defaults_lru/defaults")):
    print("median %s %.2f (rounds %.2f-%.2f)" % (n, st.median(float(x[i]) for x in r), min(float(x[i]) for x in r), max(float(x[i]) for x in r)))'
