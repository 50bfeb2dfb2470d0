#!/bin/sh
# Regenerates the Go code for api/. The generated code is committed, so this
# runs only when a .proto changes: protoc from Debian's protobuf-compiler, the
# plugins at the versions go.mod pins.
set -eu
cd "$(dirname "$0")/.."
bin=$(mktemp -d)
trap 'rm -rf "$bin"' EXIT
go build -o "$bin/protoc-gen-go" google.golang.org/protobuf/cmd/protoc-gen-go
go build -o "$bin/protoc-gen-connect-go" connectrpc.com/connect/cmd/protoc-gen-connect-go
cd api
for f in $(find . -name '*.proto' | sort); do
	f=${f#./}
	# E2B's protos are copied unchanged and name no go_package: the Go
	# package is given here (its directory, named after it).
	m=
	case $f in
	e2b/*) d=$(dirname "$f"); m="M$f=github.com/reinsdev/reins/api/$d;$(basename "$d")" ;;
	esac
	protoc --plugin=protoc-gen-go="$bin/protoc-gen-go" \
		--plugin=protoc-gen-connect-go="$bin/protoc-gen-connect-go" \
		--go_out=. --go_opt=paths=source_relative ${m:+--go_opt=$m} \
		--connect-go_out=. --connect-go_opt=paths=source_relative ${m:+--connect-go_opt=$m} "$f"
done
