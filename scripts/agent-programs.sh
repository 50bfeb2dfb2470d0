#!/bin/sh
# agent-programs.sh prints the environment that names the real Claude Code
# and Codex binaries on this host, for the gateway's tests of the real
# programs (REINS_TEST_CLAUDE, REINS_TEST_CODEX): `eval "$(sh
# scripts/agent-programs.sh)"`. Their npm tarballs are kept where the
# agents image keeps them (the build cache's npm/ folder, same names, so one
# download serves both; the image checks each tarball's sha512 when it
# reads it), and the binaries are unpacked beside them, keyed by version.
set -eu
cd "$(dirname "$0")/.."
CACHE=${REINS_BUILD_CACHE:-/var/cache/reins/builds}
version() { sed -n "s/^[[:space:]]*$1 *= *\"\(.*\)\"/\1/p" image/agents.go; }
CLAUDE_V=$(version ClaudeCodeVersion)
CODEX_V=$(version CodexVersion)
[ -n "$CLAUDE_V" ] && [ -n "$CODEX_V" ] || { echo "agent-programs.sh: no versions in image/agents.go" >&2; exit 1; }
mkdir -p "$CACHE/npm" "$CACHE/programs"

# fetch SPEC FILE: the registry's tarball of SPEC at FILE, unless there.
fetch() {
	[ -s "$2" ] && return 0
	echo "agent-programs.sh: downloading $1 from the npm registry" >&2
	tmp=$(mktemp -d)
	(cd "$tmp" && npm pack --silent "$1" >/dev/null)
	mv "$tmp"/*.tgz "$2.tmp" && mv "$2.tmp" "$2"
	rm -rf "$tmp"
}

# unpack FILE MEMBER DEST: MEMBER of the tarball at DEST, unless there.
unpack() {
	[ -x "$3" ] && return 0
	tmp=$(mktemp -d)
	tar -xzf "$1" -C "$tmp" "$2"
	chmod 0755 "$tmp/$2"
	mkdir -p "$(dirname "$3")"
	mv "$tmp/$2" "$3.tmp" && mv "$3.tmp" "$3"
	rm -rf "$tmp"
}

claude_tgz="$CACHE/npm/anthropic-ai+claude-code-linux-x64@$CLAUDE_V.tgz"
codex_tgz="$CACHE/npm/openai+codex@$CODEX_V-linux-x64.tgz"
fetch "@anthropic-ai/claude-code-linux-x64@$CLAUDE_V" "$claude_tgz"
fetch "@openai/codex@$CODEX_V-linux-x64" "$codex_tgz"
claude="$CACHE/programs/claude-code-$CLAUDE_V/claude"
codex="$CACHE/programs/codex-$CODEX_V/codex"
unpack "$claude_tgz" package/claude "$claude"
unpack "$codex_tgz" package/vendor/x86_64-unknown-linux-musl/bin/codex "$codex"
echo "export REINS_TEST_CLAUDE='$claude' REINS_TEST_CODEX='$codex'"
