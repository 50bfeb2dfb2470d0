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
	protoc --plugin=protoc-gen-go="$bin/protoc-gen-go" \
		--plugin=protoc-gen-connect-go="$bin/protoc-gen-connect-go" \
		--go_out=. --go_opt=paths=source_relative \
		--connect-go_out=. --connect-go_opt=paths=source_relative "$f"
done
