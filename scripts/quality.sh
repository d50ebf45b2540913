#!/usr/bin/env bash
# Model quality of every built-in algorithm next to a reference solver run
# here on the same split (bench/quality/quality.py): lr.sgd and SVRG vs
# liblinear-train -s 0, k-means vs scikit-learn KMeans(n_init=10), MF vs a
# regularized bias-only model and a numpy ALS; kge.complex has its own,
# scripts/kge-quality.sh. Real data: heart_scale (Debian liblinear-tools),
# breast_cancer, wine and digits (bundled in the scikit-learn wheel),
# InstEval (R's lme4, scripts/insteval.sh); plus generated sets (flexps gen).
# Every worker kind: ps, local, hogwild at 1, 2 and 4 workers, and single.
# Prints a markdown table (README "Model quality"); takes several minutes.
# Not part of the test command.
#
#   scripts/quality.sh                       # everything
#   scripts/quality.sh --only mf,kmeans      # some algorithms
#   scripts/quality.sh --kinds ps:4,single:1 # some worker layouts
set -euo pipefail
cd "$(dirname "$0")/.."
command -v liblinear-train >/dev/null 2>&1 && python3 -c "import sklearn, numpy" 2>/dev/null || ./scripts/setup.sh >&2
[ -s data/insteval/test.tsv ] || ./scripts/insteval.sh >&2 || echo "quality: InstEval export failed: MF on InstEval skipped" >&2
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
go build -o "$work/flexps" ./cmd/flexps
python3 bench/quality/quality.py --flexps "$work/flexps" --work "$work/run" "$@"
