# Shared by the LR benchmark scripts (source it after building $F, the
# flexps binary, into $W, the run's scratch folder): the data set of the
# issue's LR figures and the job that trains on it.
#
#   lr_data                  generates $DATA/{train,test}.libsvm once (200k rows x 1M
#                            features, 20 non-zeros, Zipf 1.1, seed 1; 20k test rows)
#   lr_job NAME KIND EPOCHS [TABLE_LINES [PARAM_LINES]]
#                            writes $W/NAME.toml: table w (1M float32), 2 workers of
#                            KIND under SSP(2), batch 100, lr 0.5, model $W/NAME.model;
#                            the extra lines go into [[table]] and [stage.params]
#   epoch_rate FILE          samples/s over epochs 2+ of a --metrics-out file
DATA=${DATA:-${TMPDIR:-/tmp}/flexps-lr3}

lr_data() {
  mkdir -p "$DATA"
  [ -f "$DATA/train.libsvm" ] || "$F" gen libsvm --out "$DATA/train.libsvm" --rows 200000 --dim 1000000 --nnz 20 --zipf 1.1 --seed 1 \
    --test-out "$DATA/test.libsvm" --test-rows 20000 >/dev/null
}

lr_job() {
  printf 'name = "%s"\nkind = "lr"\noutput = "%s/%s.model"\n[[table]]\nname = "w"\nsize = 1000000\ndtype = "float32"\n%b[input.train]\npath = "%s/train.libsvm"\n[input.test]\npath = "%s/test.libsvm"\n[[stage]]\nname = "sgd"\nfunc = "lr.sgd"\nworkers = 2\nconsistency = "ssp"\nstaleness = 2\nworker_kind = "%s"\n[stage.params]\nepochs = %s\nbatch = 100\nlr = 0.5\n%b' \
    "$1" "$W" "$1" "${4:-}" "$DATA" "$DATA" "$2" "$3" "${5:-}" > "$W/$1.toml"
}

epoch_rate() {
  python3 -c '
import json,sys
ep=[json.loads(l) for l in open(sys.argv[1]) if l.strip()]
ep=[e for e in ep if e.get("type")=="epoch" and e.get("epoch",0)>=2]
s=sum(e["samples"] for e in ep); t=sum(e["seconds"] for e in ep)
print(round(s/t) if t else 0)' "$1"
}
