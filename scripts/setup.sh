#!/usr/bin/env bash
# Installs what the tests need, idempotently: Debian's liblinear-tools (the
# reference solver for the model-quality test), chromium (the headless
# browser the status-page test drives), scikit-learn (real data sets of the
# LR quality test), the Maven artifacts of the MiniDFSCluster used by the
# HDFS integration tests, and in CI the InstEval ratings of the MF quality
# test (scripts/insteval.sh installs R's lme4 from Debian when needed and
# exports them once). Tests never install anything: they skip with a
# message when a tool or data set is absent outside CI, and fail in CI.
set -euo pipefail
cd "$(dirname "$0")/.."

need_apt=()
command -v liblinear-train >/dev/null 2>&1 || need_apt+=(liblinear-tools)
command -v chromium >/dev/null 2>&1 || need_apt+=(chromium)
if ! command -v java >/dev/null 2>&1 || ! command -v mvn >/dev/null 2>&1; then
	need_apt+=(openjdk-17-jdk-headless maven)
fi
if ((${#need_apt[@]})); then
	echo "setup: installing ${need_apt[*]} from Debian" >&2
	SUDO=""
	[ "$(id -u)" -ne 0 ] && SUDO="sudo"
	$SUDO apt-get update -qq
	DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq "${need_apt[@]}" >/dev/null
fi

# scikit-learn ships the real data sets of the model-quality tests
# (breast_cancer.csv: 30 features from 0.001 to 4000 in magnitude).
if ! python3 -c "import sklearn" >/dev/null 2>&1; then
	echo "setup: installing scikit-learn from PyPI" >&2
	python3 -m pip install --quiet --disable-pip-version-check scikit-learn
fi

# scikit-surprise: a standard biased-MF (Funk/Koren SVD) next to mf.sgd in
# scripts/quality.sh; built from source by pip (needs a C compiler).
if ! python3 -c "import surprise" >/dev/null 2>&1; then
	echo "setup: installing scikit-surprise from PyPI" >&2
	python3 -m pip install --quiet --disable-pip-version-check scikit-surprise || echo "setup: scikit-surprise did not install: quality.sh leaves its MF reference out" >&2
fi

if [ -x scripts/hdfs/minihdfs.sh ]; then
	scripts/hdfs/minihdfs.sh install
fi
if [ -n "${CI:-}" ] && [ ! -s data/insteval/test.tsv ]; then
	scripts/insteval.sh
fi
go mod download
