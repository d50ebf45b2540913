#!/usr/bin/env bash
# The test command: installs what the tests need (scripts/setup.sh), then
# runs every test with the race detector. CI runs exactly this.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh
gofmt_out=$(gofmt -l .)
if [ -n "$gofmt_out" ]; then
	echo "gofmt needed on:" >&2
	echo "$gofmt_out" >&2
	exit 1
fi
go vet ./...
scripts/check-public-api.sh
go test -race -count=1 -timeout 25m "$@" ./...
# Hogwild's adds race by design: built without the race detector they are
# plain loads and stores (kvstore.addHogwild32), which -race builds make
# atomic. Run the LocalTable tests on that path too.
go test -count=1 -run 'LocalTable' ./kvstore
scripts/fuzz.sh
