#!/bin/sh
# node-clients.sh installs the real npm clients reins' tests drive (the e2b
# SDK, the MCP SDK, deepagents with LangChain), pinned by
# test/node/package.json and its lock, into the build cache keyed by the
# two files' sha256, and links them as node_modules at the clone's root,
# where every .mjs of the repository (sdk/ts, test/e2e/testdata) finds
# them. It prints the environment that names them: `eval "$(sh
# scripts/node-clients.sh)"`. Node and npm are Debian's (install-deps.sh).
set -eu
cd "$(dirname "$0")/.."
. scripts/cache.sh
CACHE=${REINS_BUILD_CACHE:-/var/cache/reins/builds}
key=$(cat test/node/package.json test/node/package-lock.json | sha256sum | cut -c1-16)
dir="$CACHE/node/clients-$key"
if [ ! -d "$dir/node_modules" ]; then
	echo "node-clients.sh: installing the npm clients of test/node/package.json into $dir" >&2
	cache_tmp "$CACHE/node" "the npm clients"
	cp test/node/package.json test/node/package-lock.json "$tmp/"
	(cd "$tmp" && npm ci --ignore-scripts --no-audit --no-fund --loglevel=error >&2)
	mv "$tmp" "$dir"
	trap - EXIT
fi
ln -sfn "$dir/node_modules" node_modules
echo "export REINS_TEST_NODE_MODULES='$dir/node_modules'"
