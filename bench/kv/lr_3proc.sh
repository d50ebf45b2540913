#!/bin/bash
# LR (`ps` kind) on a master and two slave processes, KV traffic through NATS
# against the direct TCP data plane, interleaved round by round: the setup
# of the issue's headline figure (200k rows x 1M features, 20 non-zeros,
# Zipf 1.1, batch 100, SSP(2), one worker per slave). Both clusters run side
# by side (each its own master, NATS port, credentials and slaves); a round
# submits the same job to each in turn and records samples/s of epochs 2+
# (epoch 1 parses the input) and test accuracy.
#
#   bash bench/kv/lr_3proc.sh [rounds] [epochs]
set -euo pipefail
R=${1:-3}; EPOCHS=${2:-4}
cd "$(dirname "$0")/../.."
. bench/lrjob.sh
lr_prepare
port=$((24000 + RANDOM % 20000))
for tr in nats tcp; do
  port=$((port + 1))
  cat > "$W/$tr.toml" <<TOML
cluster = "lr3$tr$port"
[nats]
listen = "127.0.0.1:$port"
url = "nats://127.0.0.1:$port"
state_dir = "$W/state-$tr"
[master]
dead_after = "30s"
[slave]
slots = 1
[kv]
transport = "$tr"
[log]
level = "warn"
TOML
  lr_job "lr3-$tr" ps "$EPOCHS"
  sed '/^url =/d' "$W/$tr.toml" > "$W/$tr.master.toml"
  "$F" master --config "$W/$tr.master.toml" > "$W/$tr.master.log" 2>&1 &
  sleep 1
  for s in 1 2; do "$F" slave --config "$W/$tr.toml" --id "s$s" > "$W/$tr.s$s.log" 2>&1 & done
done
sleep 3
printf "%-6s %12s %12s %9s %9s %9s\n" round nats tcp tcp/nats acc_nats acc_tcp
for r in $(seq "$R"); do
  declare -A got acc
  for tr in nats tcp; do
    rm -f "$W/$tr.jsonl"
    "$F" submit --config "$W/$tr.toml" --metrics-out "$W/$tr.jsonl" "$W/lr3-$tr.toml" > "$W/$tr.submit.log" 2>&1 || { cat "$W/$tr.submit.log"; exit 1; }
    got[$tr]=$(epoch_rate "$W/$tr.jsonl")
    acc[$tr]=$("$F" eval --model "$W/lr3-$tr.model" --data "$DATA/test.libsvm" 2>/dev/null | sed -n 's/.*accuracy=\([0-9.]*\).*/\1/p')
  done
  awk -v r="$r" -v n="${got[nats]}" -v t="${got[tcp]}" -v an="${acc[nats]}" -v at="${acc[tcp]}" \
    'BEGIN { printf "%-6s %12d %12d %9.2f %9s %9s\n", r, n, t, (n > 0 ? t / n : 0), an, at }'
done
grep -h "cannot reach this peer" "$W"/tcp.s*.log || true
