#!/usr/bin/env bash
# Exports the InstEval data set (73,421 ratings of 1,128 lecturers by 2,972
# students, y in 1..5) from Debian's r-cran-lme4 package into
# data/insteval/, idempotently:
#   ratings.tsv  all ratings as "user<TAB>item<TAB>rating", 0-based dense ids
#                (user = student s, item = lecturer d)
#   train.tsv    a deterministic (seeded) 90% of ratings.tsv, in shuffled
#                order (ratings.tsv is sorted by student, and SGD over a
#                sorted file drifts with each student's ratings)
#   test.tsv     the other 10%, in file order
# Installs r-base-core and r-cran-lme4 with apt-get if Rscript or lme4 is
# missing. Pass --force to export again.
set -euo pipefail
cd "$(dirname "$0")/.."

out=data/insteval
force=0
[ "${1:-}" = "--force" ] && force=1
if [ "$force" -eq 0 ] && [ -s "$out/train.tsv" ] && [ -s "$out/test.tsv" ] && [ -s "$out/ratings.tsv" ]; then
	echo "insteval: $out already exported" >&2
	exit 0
fi

have_lme4() {
	command -v Rscript >/dev/null 2>&1 && Rscript -e 'quit(status = if (requireNamespace("lme4", quietly = TRUE)) 0 else 1)' >/dev/null 2>&1
}
if ! have_lme4; then
	echo "insteval: installing r-base-core r-cran-lme4 from Debian" >&2
	SUDO=""
	[ "$(id -u)" -ne 0 ] && SUDO="sudo"
	$SUDO apt-get update -qq
	DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends r-base-core r-cran-lme4 >/dev/null
fi

mkdir -p "$out"
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
# Ids are the 0-based factor level codes, which are dense by construction
# (levels are the distinct values of s and d). The split draws a seeded
# permutation (R >= 3.6 sampling), so the same lme4 release always yields
# the same files.
Rscript --vanilla - "$tmp" <<'RS'
args <- commandArgs(trailingOnly = TRUE)
dir <- args[1]
suppressPackageStartupMessages(library(lme4))
data(InstEval, package = "lme4")
s <- factor(InstEval$s)
d <- factor(InstEval$d)
r <- data.frame(user = as.integer(s) - 1L, item = as.integer(d) - 1L,
                rating = as.integer(as.character(InstEval$y)))
opt <- list(sep = "\t", row.names = FALSE, col.names = FALSE, quote = FALSE)
w <- function(df, name) do.call(write.table, c(list(df, file.path(dir, name)), opt))
w(r, "ratings.tsv")
set.seed(20240601L, kind = "Mersenne-Twister", normal.kind = "Inversion", sample.kind = "Rejection")
perm <- sample.int(nrow(r))
ntest <- round(nrow(r) / 10)
test <- sort(perm[seq_len(ntest)])
train <- perm[-seq_len(ntest)]
w(r[train, ], "train.tsv")
w(r[test, ], "test.tsv")
cat(sprintf("insteval: %d ratings, %d users, %d items, train %d, test %d\n",
            nrow(r), nlevels(s), nlevels(d), nrow(r) - ntest, ntest), file = stderr())
RS
mv "$tmp/ratings.tsv" "$tmp/train.tsv" "$tmp/test.tsv" "$out/"
