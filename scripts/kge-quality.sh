#!/usr/bin/env bash
# ComplEx on flexps (configs/kge.toml, UMLS) next to two references on the
# same split, scored by the same filtered protocol (rank against all
# entities, other true train/valid/test triples skipped, ties count half):
#   reference = a NumPy ComplEx trained as the kbc reference code trains it
#   (bench/kge/complex_ref.py: reciprocal relations, 1-N softmax, N3,
#   Adagrad; PyKEEN and kbc themselves need torch), and the
#   relation-frequency baseline (bench/kge/baseline.py).
# Prints filtered MRR, Hits@10 and wall time, and flexps/reference ratios.
set -euo pipefail
cd "$(dirname "$0")/.."
./scripts/kge-setup.sh >/dev/null
d=data/kge/umls
bin=$(mktemp -d)/flexps
trap 'rm -rf "$(dirname "$bin")"' EXIT
go build -o "$bin" ./cmd/flexps
go build -o "$(dirname "$bin")/filtered" ./bench/kge/filtered
n=$(wc -l <"$d/entities.tsv")

t0=$(date +%s.%N)
"$bin" run configs/kge.toml >"$(dirname "$bin")/run.log" 2>&1 || { cat "$(dirname "$bin")/run.log"; exit 1; }
t1=$(date +%s.%N)
flex=$("$(dirname "$bin")/filtered" -model out/kge.model -data "$d/test.tsv" -filter "$d/train.tsv,$d/valid.tsv")
ref=$(python3 bench/kge/complex_ref.py "$d/train.tsv" "$d/valid.tsv" "$d/test.tsv" "$n" "$(wc -l <"$d/relations.tsv")" 64 50 1)
base=$(python3 bench/kge/baseline.py "$d/train.tsv" "$d/valid.tsv" "$d/test.tsv" "$n")
t2=$(date +%s.%N)

field() { sed -n "s/.*$1=\([0-9.]*\).*/\1/p" <<<"$2"; }
awk -v fm="$(field mrr "$flex")" -v fh="$(field hits10 "$flex")" -v ft="$(echo "$t1 - $t0" | bc)" \
    -v rm="$(field mrr "$ref")" -v rh="$(field hits10 "$ref")" -v rt="$(field seconds "$ref")" \
    -v bm="$(field mrr "$base")" -v bh="$(field hits10 "$base")" -v bt="$(field seconds "$base")" 'BEGIN {
  printf "UMLS test split (661 triples, heads and tails ranked: 1322), filtered\n"
  printf "%-40s %8s %8s %9s\n", "", "MRR", "Hits@10", "seconds"
  printf "%-40s %8.4f %8.4f %9.2f\n", "flexps kge.complex (2 workers)", fm, fh, ft
  printf "%-40s %8.4f %8.4f %9.2f\n", "reference ComplEx (NumPy, kbc training)", rm, rh, rt
  printf "%-40s %8.4f %8.4f %9.2f\n", "relation-frequency baseline (py)", bm, bh, bt
  printf "%-40s %8.2f %8.2f %9.1f\n", "ratio flexps/reference", fm/rm, fh/rh, ft/rt
}'
