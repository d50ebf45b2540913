#!/usr/bin/env bash
# Runs every fuzz target (parsers and wire decoders) for a few seconds each
# (FUZZTIME, default 3s). The test command runs it after the unit tests; a
# finding fails it and leaves the failing input under testdata/fuzz/.
set -euo pipefail
cd "$(dirname "$0")/.."
fuzztime=${FUZZTIME:-3s}
status=0
while read -r file name; do
	pkg="./$(dirname "$file")"
	if ! out=$(go test -run '^$' -fuzz "^${name}\$" -fuzztime "$fuzztime" "$pkg" 2>&1); then
		echo "$out" >&2
		echo "fuzz: $name in $pkg failed" >&2
		status=1
	fi
done < <(grep -rl --include='*_test.go' '^func Fuzz' . | sort | while read -r f; do
	grep -o '^func Fuzz[A-Za-z0-9_]*' "$f" | sed "s|^func |${f#./} |"
done)
exit $status
