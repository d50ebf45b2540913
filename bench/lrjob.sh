# Shared by the LR benchmark scripts (source it from the repository's
# root): the data set of the issue's LR figures and the job that trains on it.
#
#   lr_prepare               makes $W (a scratch folder, removed at exit with
#                            any process still running), builds $F (flexps)
#                            into it and generates the data (lr_data)
#   lr_data                  generates $DATA/{train,test}.libsvm once (200k rows x 1M
#                            features, 20 non-zeros, Zipf 1.1, seed 1; 20k test rows;
#                            $DIM features instead of 1M, in a DATA dir of its own)
#   lr_job NAME KIND EPOCHS [TABLE_LINES [PARAM_LINES]]
#                            writes $W/NAME.toml: table w ($DIM float32), 2 workers of
#                            KIND under SSP(2), batch 100, lr 0.5, model $W/NAME.model;
#                            the extra lines go into [[table]] and [stage.params]
#   lr_no_test NAME...       drops the test input from $W/NAME.toml (unless $WITH_TEST is set):
#                            the C++ baselines score their test rows after training, untimed
#   epoch_rate FILE          samples/s over epochs 2+ of a --metrics-out file
#   lr_cluster_config        writes $W/c.toml (slaves, submit) and $W/m.toml (master): embedded
#                            NATS on a random loopback port, 1 slot per slave, direct TCP data plane
#                            ($TRANSPORT=nats: KV traffic over the bus instead)
#   lr_cluster_start         starts a master and slaves s1, s2 from those (pids MP, S1, S2)
#   lr_cluster_stop          stops them
#   lr_submit NAME           submits $W/NAME.toml and prints its epoch_rate
DIM=${DIM:-1000000}
if [ "$DIM" = 1000000 ]; then DATA=${DATA:-${TMPDIR:-/tmp}/flexps-lr3}; else DATA=${DATA:-${TMPDIR:-/tmp}/flexps-lr3-d$DIM}; fi

lr_prepare() {
  W=$(mktemp -d)
  trap 'kill $(jobs -p) 2>/dev/null || true; wait 2>/dev/null || true; rm -rf "$W"' EXIT
  go build -o "$W/flexps" ./cmd/flexps
  F="$W/flexps"
  lr_data
}

lr_data() {
  mkdir -p "$DATA"
  [ -f "$DATA/train.libsvm" ] || "$F" gen libsvm --out "$DATA/train.libsvm" --rows 200000 --dim "$DIM" --nnz 20 --zipf 1.1 --seed 1 \
    --test-out "$DATA/test.libsvm" --test-rows 20000 >/dev/null
}

lr_job() {
  printf 'name = "%s"\nkind = "lr"\noutput = "%s/%s.model"\n[[table]]\nname = "w"\nsize = %s\ndtype = "float32"\n%b[input.train]\npath = "%s/train.libsvm"\n[input.test]\npath = "%s/test.libsvm"\n[[stage]]\nname = "sgd"\nfunc = "lr.sgd"\nworkers = 2\nconsistency = "ssp"\nstaleness = 2\nworker_kind = "%s"\n[stage.params]\nepochs = %s\nbatch = 100\nlr = 0.5\n%b' \
    "$1" "$W" "$1" "$DIM" "${4:-}" "$DATA" "$DATA" "$2" "$3" "${5:-}" > "$W/$1.toml"
}

lr_no_test() {
  [ -n "${WITH_TEST:-}" ] && return 0
  local j
  for j in "$@"; do sed -i '/^\[input.test\]/,+1d' "$W/$j.toml"; done
}

epoch_rate() {
  python3 -c '
import json,sys
ep=[json.loads(l) for l in open(sys.argv[1]) if l.strip()]
ep=[e for e in ep if e.get("type")=="epoch" and e.get("epoch",0)>=2]
s=sum(e["samples"] for e in ep); t=sum(e["seconds"] for e in ep)
print(round(s/t) if t else 0)' "$1"
}

lr_cluster_config() {
  local port=$((24000 + RANDOM % 20000))
  cat > "$W/c.toml" <<TOML
cluster = "lrvs$port"
[nats]
listen = "127.0.0.1:$port"
url = "nats://127.0.0.1:$port"
state_dir = "$W/state"
[master]
dead_after = "30s"
[slave]
slots = 1
[kv]
transport = "${TRANSPORT:-tcp}"
[log]
level = "warn"
TOML
  sed '/^url =/d' "$W/c.toml" > "$W/m.toml"
}

lr_cluster_start() {
  "$F" master --config "$W/m.toml" > "$W/master.log" 2>&1 & MP=$!
  sleep 1
  "$F" slave --config "$W/c.toml" --id s1 > "$W/s1.log" 2>&1 & S1=$!
  "$F" slave --config "$W/c.toml" --id s2 > "$W/s2.log" 2>&1 & S2=$!
  sleep 2
}

lr_cluster_stop() {
  kill -INT $S1 $S2; wait $S1 $S2 2>/dev/null || true; kill $MP; wait $MP 2>/dev/null || true
}

lr_submit() {
  rm -f "$W/m.jsonl"
  "$F" submit --config "$W/c.toml" --metrics-out "$W/m.jsonl" "$W/$1.toml" > "$W/submit.log" 2>&1 || { cat "$W/submit.log" >&2; return 1; }
  epoch_rate "$W/m.jsonl"
}
