#!/bin/bash
# The `local` and `hogwild` worker kinds (2 workers, one process: `flexps
# run`) against the plain single-thread C++ SGD loop
# (../shared/peers/plain_sgd.cpp) on the same LIBSVM data (200k rows x 1M
# features, 20 non-zeros, Zipf 1.1, batch 100, lr 0.5, 5 epochs; samples/s
# of epochs 2+), interleaved round by round; prints the ratios per round,
# their medians, each flexps run's peak RSS, and the test accuracy of each
# model (the loop's, and `flexps eval` of flexps' saved models).
#
# The flexps jobs have no test input: the loop trains without evaluating
# between epochs, so flexps does the same work (a job's test input is
# evaluated after every epoch, within the epoch's time; WITH_TEST=1 keeps
# it, for that figure).
#
#   PLAIN_SGD=/path/to/plain_sgd bash bench/lr/vs_plain_cpp.sh [rounds]
#
# plain_sgd is built by ../shared/peers/build.sh (g++ -O2 plain_sgd.cpp).
set -euo pipefail
R=${1:-3}
: "${PLAIN_SGD:?set PLAIN_SGD to the plain C++ loop (../shared/peers/build.sh builds it)}"
cd "$(dirname "$0")/../.."
. bench/lrjob.sh
lr_prepare
for kind in local hogwild; do
  lr_job "$kind" "$kind" 5 '' 'intercept = false\nstandardize = false\n'
  lr_no_test "$kind"
done
printf "%-6s %10s %10s %10s %8s %8s %8s %8s %8s %8s %8s\n" round plain_c++ local hogwild loc/c++ hog/c++ rss_loc rss_hog acc_c++ acc_loc acc_hog
rows=()
for r in $(seq "$R"); do
  out=$("$PLAIN_SGD" "$DATA/train.libsvm" "$DATA/test.libsvm" 1000000 5 100 0.5)
  p=$(sed -n 's/.*epoch2plus_per_s=\([0-9]*\).*/\1/p' <<< "$out"); pacc=$(sed -n 's/.*test_acc=\([0-9.]*\).*/\1/p' <<< "$out")
  declare -A got rss acc
  for kind in local hogwild; do
    rm -f "$W/m.jsonl"
    /usr/bin/time -f "%M" -o "$W/rss" "$F" run --metrics-out "$W/m.jsonl" "$W/$kind.toml" > "$W/run.log" 2>&1 || { cat "$W/run.log"; exit 1; }
    got[$kind]=$(epoch_rate "$W/m.jsonl"); rss[$kind]=$(( $(tail -1 "$W/rss") / 1024 ))
    acc[$kind]=$("$F" eval --model "$W/$kind.model" --data "$DATA/test.libsvm" | sed -n 's/.*accuracy=\([0-9.]*\).*/\1/p')
  done
  row=$(awk -v r="$r" -v p="$p" -v l="${got[local]}" -v h="${got[hogwild]}" -v rl="${rss[local]}" -v rh="${rss[hogwild]}" \
    -v pa="$pacc" -v al="${acc[local]}" -v ah="${acc[hogwild]}" \
    'BEGIN { printf "%-6s %10d %10d %10d %8.2f %8.2f %8d %8d %8s %8s %8s", r, p, l, h, l / p, h / p, rl, rh, pa, al, ah }')
  echo "$row"; rows+=("$row")
done
printf "%s\n" "${rows[@]}" | python3 -c '
import sys, statistics as st
r=[l.split() for l in sys.stdin if l.strip()]
print("median local/c++ %.2f  hogwild/c++ %.2f" % (st.median(float(x[4]) for x in r), st.median(float(x[5]) for x in r)))'
