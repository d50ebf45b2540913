#!/bin/bash
# LR `ps` kind on a master and two slave processes (1 slot each, direct TCP
# data plane) against FlexPS C++ LRLocal on 2 nodes x 1 worker, on the same
# LIBSVM data (200k rows x 1M features, 20 non-zeros, Zipf 1.1, batch 100,
# lr 0.5, SSP(2), 5 epochs; samples/s of epochs 2+), interleaved round by
# round. Three flexps configurations per round: the same model as FlexPS
# C++ (no intercept, no scaling, replicas = 1), the shipped defaults
# (intercept, scaling, the cluster's default_replicas = 2) and the defaults
# with replicas = 1. Also prints each process's peak RSS (VmHWM) after the
# "same" job and FlexPS C++'s, and the median of per-round ratios.
#
# The flexps jobs have no test input: FlexPS C++ scores the test rows once
# after training, outside its timing, so flexps does the same work (a
# job's test input is scored after every epoch, within the epoch's time;
# until stop 39 this script kept it, and WITH_TEST=1 still does). The
# last round scores the same-model job's model with flexps eval, untimed,
# and prints its test accuracy beside FlexPS C++'s.
#
#   [WITH_TEST=1] FLEXPS_CPP=/path/to/LRLocal bash bench/lr/vs_flexps.sh [rounds]
#
# LRLocal is FlexPS C++ with ../shared/peers/lr_local.cpp, built by
# ../shared/peers/build.sh. Without FLEXPS_CPP only flexps runs.
set -euo pipefail
R=${1:-3}
cd "$(dirname "$0")/../.."
. bench/lrjob.sh
lr_prepare
lr_job same ps 5 'replicas = 1\n' 'intercept = false\nstandardize = false\n'
lr_job defaults ps 5
lr_job r1 ps 5 'replicas = 1\n'
lr_no_test same defaults r1
lr_cluster_config
hwm() { echo $(( $(awk '/VmHWM/{print $2}' "/proc/$1/status") / 1024 )); }
fcpp() { # samples/s of epochs 2+, then the two processes' peak RSS in MB
  local p=$((14000 + RANDOM % 1000))
  printf "0:localhost:$p\n1:localhost:$((p + 1))\n" > "$W/nodes"
  mkdir -p "$W/fclog"
  local A="--config_file=$W/nodes --train=$DATA/train.libsvm --test=$DATA/test.libsvm --num_dims=1000000 --epochs=5 --batch_size=100 --lr=0.5 --model=SSP --staleness=2 --workers=1,1 --logtostderr=0 --log_dir=$W/fclog"
  /usr/bin/time -f "%M" -o "$W/fc1.rss" "$FLEXPS_CPP" --my_id=1 $A > "$W/fc1.out" 2>&1 & local q=$!
  /usr/bin/time -f "%M" -o "$W/fc0.rss" "$FLEXPS_CPP" --my_id=0 $A > "$W/fc0.out" 2>&1; wait $q
  cat "$W/fc0.out" "$W/fc1.out" | python3 -c '
import sys
r=[dict(kv.split("=") for kv in l.split()[1:]) for l in sys.stdin if l.startswith("RESULT")]
n=sum(int(x["samples"]) for x in r); t=max(float(x["seconds"]) for x in r); e1=max(float(x["epoch1"]) for x in r)
print(round(n*0.8/(t-e1)))'
  echo "$(( $(tail -1 "$W/fc0.rss") / 1024 + $(tail -1 "$W/fc1.rss") / 1024 ))"; }
printf "%-6s %9s %9s %9s %9s %8s %8s %8s %9s %9s\n" round same defaults r1 fcpp same/fc def/fc r1/fc rss_same rss_fcpp
rows=()
for r in $(seq "$R"); do
  # A fresh cluster per round: each round's peak RSS is its own.
  lr_cluster_start
  declare -A got
  for j in same defaults r1; do
    got[$j]=$(lr_submit $j)
    [ $j = same ] && got[rss]=$(( $(hwm $MP) + $(hwm $S1) + $(hwm $S2) ))
  done
  lr_cluster_stop
  fc=0; fcrss=0
  if [ -n "${FLEXPS_CPP:-}" ]; then set -- $(fcpp); fc=$1; fcrss=$2; fi
  row=$(awk -v r="$r" -v s="${got[same]}" -v d="${got[defaults]}" -v o="${got[r1]}" -v f="$fc" -v rs="${got[rss]}" -v rf="$fcrss" \
    'BEGIN { printf "%-6s %9d %9d %9d %9d %8.2f %8.2f %8.2f %9d %9d", r, s, d, o, f, (f > 0 ? s / f : 0), (f > 0 ? d / f : 0), (f > 0 ? o / f : 0), rs, rf }')
  echo "$row"; rows+=("$row")
done
printf "%s\n" "${rows[@]}" | python3 -c '
import sys, statistics as st
r=[l.split() for l in sys.stdin if l.strip()]
for i, n in ((5, "same/fcpp"), (6, "defaults/fcpp"), (7, "r1/fcpp")):
    print("median %s %.2f" % (n, st.median(float(x[i]) for x in r)))
rs=[float(x[8]) / float(x[9]) for x in r if float(x[9]) > 0]
if rs: print("median peak RSS same/fcpp %.2f" % st.median(rs))'
# Test accuracy of the last round's models, scored outside the timing.
acc=$("$F" eval --model "$W/same.model" --data "$DATA/test.libsvm" 2>/dev/null | sed -n 's/.*accuracy=\([0-9.]*\).*/\1/p')
fca=$(sed -n 's/^ACC test=\([0-9.]*\).*/\1/p' "$W/fc0.out" 2>/dev/null || true)
echo "test accuracy (last round): flexps same ${acc:-?}, FlexPS C++ ${fca:--}"
