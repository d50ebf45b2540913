#!/usr/bin/env bash
# Builds examples/twostage (the documented Go-API example) and cmd/flexps as
# programs of a separate module that requires github.com/flexps/flexps
# through a replace directive. A user's own module can only import exported packages, so this
# fails if the example, or anything it needs to name, reaches into internal/.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
cp "$root"/examples/twostage/*.go "$tmp"/
rm -f "$tmp"/*_test.go
cd "$tmp"
go mod init example.com/usermodule >/dev/null 2>&1
go mod edit -require=github.com/flexps/flexps@v0.0.0 -replace=github.com/flexps/flexps="$root"
# The user module resolves the same dependency versions as ours.
cp "$root/go.sum" go.sum
if ! GOFLAGS=-mod=mod go mod tidy >"$tmp/tidy.log" 2>&1; then
	cat "$tmp/tidy.log" >&2
	echo "check-public-api: go mod tidy failed in the separate module" >&2
	exit 1
fi
go build -o /dev/null . || { echo "check-public-api: examples/twostage does not build from a separate module" >&2; exit 1; }
echo "check-public-api: examples/twostage builds from a separate module"
# Every type the README's Go API section has a user write (callbacks,
# results) must be nameable from outside the module too.
mkdir "$tmp/publicapi"
cp "$root"/scripts/testdata/publicapi/*.go "$tmp/publicapi/"
go build -o /dev/null ./publicapi || { echo "check-public-api: scripts/testdata/publicapi does not build from a separate module" >&2; exit 1; }
echo "check-public-api: the Go API's documented types are nameable from a separate module"
# What `go install github.com/flexps/flexps/cmd/flexps@version` compiles:
# the CLI as a dependency of another module, without cgo.
CGO_ENABLED=0 GOFLAGS=-mod=mod go build -o "$tmp/flexps" github.com/flexps/flexps/cmd/flexps ||
	{ echo "check-public-api: cmd/flexps does not build as a dependency of another module" >&2; exit 1; }
"$tmp/flexps" --version >/dev/null || { echo "check-public-api: the installed flexps does not run" >&2; exit 1; }
echo "check-public-api: cmd/flexps builds and runs from a separate module (CGO_ENABLED=0)"
