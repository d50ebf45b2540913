#!/bin/bash
# Builds Lapse's matrix factorization app (apps/matrix_factorization.cc of
# github alexrenz/lapse-ps) for bench/lapse, from a lapse-ps checkout whose
# libps.a is already built (make DEPS_PATH=/usr ps, as
# /work/shared/peers/build.sh does).
#
#   bash bench/lapse/build_lapse.sh [LAPSE_DIR [OUT]]
#
# One line is changed, in a copy: the schedule's random engine becomes
# std::mt19937, because GCC 12's std::shuffle needs an engine whose min()
# and max() are constexpr, which Boost 1.74's mt19937 lacks (the unpatched
# file fails with "call to non-constexpr function ... mersenne_twister_engine
# ... min()" at apps/mf/data.h:203). The engine only permutes the DSGD block
# schedule (seeded with the epoch on every node); the training code is as
# published.
set -euo pipefail
L=${1:-/work/peers/build/lapse}
OUT=${2:-${TMPDIR:-/tmp}/flexps-bench-lapse/lapse-mf/matrix_factorization}
[ -f "$L/build/libps.a" ] || { echo "no $L/build/libps.a: build lapse-ps first (make -C $L DEPS_PATH=/usr ps)" >&2; exit 1; }
mkdir -p "$(dirname "$OUT")"
SRC="$(dirname "$OUT")/matrix_factorization.cc"
sed 's/boost::random::mt19937 rng(static_cast<unsigned int>(std::time(0)));/std::mt19937 rng(static_cast<unsigned int>(std::time(0))); \/\/ patched by flexps bench\/lapse: GCC 12/' \
  "$L/apps/matrix_factorization.cc" > "$SRC"
grep -q "patched by flexps" "$SRC" || { echo "$L/apps/matrix_factorization.cc: the line to patch was not found" >&2; exit 1; }
g++ -std=c++14 -msse2 -O3 -march=native -finline-functions -I"$L/src" -I"$L/include" -I"$L/apps" -I"$L/apps/eigen3" \
  -o "$OUT" "$SRC" "$L/build/libps.a" -lprotobuf-lite -lzmq -pthread -lboost_system -lboost_program_options -fopenmp
echo "$OUT"
