# reins: two commands on a fresh machine — `make demo` and `make test`.
GO      ?= go
VERSION ?= $(shell git describe --always --dirty 2>/dev/null || echo dev)
LDFLAGS  = -X main.version=$(VERSION)
# The executor idles in every sandbox, where gVisor counts memory in large
# units (docs/benchmarks.md, idle RSS): no heap profile (its 1.4 MiB hash
# table, made at the first sampled allocation, before main can turn it
# off) and the heap at Go's fixed base, whose index pages gVisor then
# counts once (a random base costs 4-8 MiB of index).
EXECUTOR_ENV     = CGO_ENABLED=0 GOEXPERIMENT=norandomizedheapbase64
EXECUTOR_LDFLAGS = -s -w -X runtime.godebugDefault=memprofilerate=0 -X github.com/reinsdev/reins/executor.Version=$(VERSION)

.PHONY: all build deps demo test bench proto fmt vet clean

all: build

build:
	$(GO) build -ldflags "$(LDFLAGS)" -o bin/reins ./cmd/reins
	$(EXECUTOR_ENV) $(GO) build -trimpath -ldflags "$(EXECUTOR_LDFLAGS)" -o bin/reins-executor ./cmd/reins-executor
	CGO_ENABLED=0 $(GO) build -trimpath -ldflags "-s -w" -o bin/reins-shim ./cmd/reins-shim

# deps installs what reins needs from Debian's packages when it is missing.
deps:
	@sh scripts/install-deps.sh

demo: deps build
	@sh scripts/demo.sh

# test runs every test; the ones that need root or runsc run here as root
# (CI is root). Every test binary runs under the race detector (the binaries
# the e2e tests start, and the executor in every sandbox, are plain builds).
# -p 1 keeps sandbox-heavy packages from starving each other on two cores.
# agent-programs.sh names the real Claude Code and Codex binaries (npm
# tarballs cached by version) for the gateway's tests of the programs;
# node-clients.sh the npm clients (e2b, MCP, deepagents) by their lock.
test: deps build
	$(GO) vet ./...
	@test -z "$$(gofmt -l $$(git ls-files '*.go'))" || { echo "gofmt needed:"; gofmt -l $$(git ls-files '*.go'); exit 1; }
	eval "$$(sh scripts/agent-programs.sh)" && eval "$$(sh scripts/node-clients.sh)" && $(GO) test -race -p 1 -timeout 25m -count=1 ./...

bench: build
	@sh scripts/install-deps.sh bench
	$(GO) run ./bench -out docs/benchmarks.md

proto:
	sh scripts/protogen.sh

fmt:
	gofmt -w $$(git ls-files '*.go')

clean:
	rm -rf bin
