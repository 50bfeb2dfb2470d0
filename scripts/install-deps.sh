#!/bin/sh
# Installs what reins needs: Debian packages, if any is missing, and gVisor's
# runsc, built once from the Go module proxy at the pinned version into a
# cache outside the clone. Run as root (apt-get, /var/cache); without root it
# says what to install. `install-deps.sh bench` adds what make bench needs.
set -eu

# RUNSC_VERSION is gVisor's module version without the "v"; it must match
# gvisor.Version (sandbox/gvisor), which a test checks.
RUNSC_VERSION=0.0.0-20260905035102-160fafc42237
# REINS_RUNSC_CACHE moves the cache (for trying the script); reins then
# needs REINS_RUNSC=$REINS_RUNSC_CACHE/VERSION/runsc to find it.
RUNSC_CACHE=${REINS_RUNSC_CACHE:-/var/cache/reins/runsc}

need=""
want() { # command package
	command -v "$1" >/dev/null 2>&1 || need="$need $2"
}
want runc runc
want mkfs.ext4 e2fsprogs
want ip iproute2
want curl curl
want debootstrap debootstrap
want protoc protobuf-compiler # make proto (the generated code is committed)
# scripts/build-busybox.sh builds the busybox image's busybox from source.
want gcc gcc
want make make
want patch patch
want bzip2 bzip2
want xz xz-utils
# executor/computer's tests drive a host Xvfb, checked against xwd and
# xdotool (the desktop image has its own, from Debian's mirror).
want Xvfb xvfb
want xwd x11-apps
want xdotool xdotool
# ... and its window manager test starts the one the desktop image has.
want matchbox-window-manager matchbox-window-manager
# egress/netns's tests enter the namespaces they make.
want nsenter util-linux
# internal/mirrortest's git source runs `git http-backend`.
want git git
# scripts/agent-programs.sh fetches Claude Code and Codex for the tests
# with npm pack (the agents image fetches them itself).
want npm npm
# scripts/node-clients.sh installs the real npm clients the tests drive
# (e2b, @modelcontextprotocol/sdk, deepagents) and sdk/ts's tests run on
# Node.
want node nodejs
# The live view's tests open its page in a real headless Chromium
# (internal/cdp).
want chromium chromium
if [ "${1:-}" = bench ]; then
	# make bench: the workload suite counts each command's syscalls and
	# page faults on the host.
	want strace strace
	want perf linux-perf
fi
[ -x /usr/lib/postgresql/15/bin/initdb ] || need="$need postgresql-15"
dpkg -s busybox-static >/dev/null 2>&1 || need="$need busybox-static"
command -v go >/dev/null 2>&1 || { echo "install Go 1.26 or newer (https://go.dev/dl) and put it on PATH" >&2; exit 1; }

if [ -n "$need" ]; then
	if [ "$(id -u)" != 0 ]; then
		echo "missing Debian packages:$need — run: sudo apt-get update && sudo apt-get install -y$need" >&2
		exit 1
	fi
	echo "installing:$need"
	export DEBIAN_FRONTEND=noninteractive
	apt-get update -q
	apt-get install -y -q $need
fi

sh "$(dirname "$0")/build-busybox.sh"
. "$(dirname "$0")/cache.sh"

# runsc: Debian's is years old (ptrace only, statx breaks coreutils). Built
# with cgo off, or it dies at start ("error executing umounter"). The
# version is stamped in so `runsc --version` names it.
dest="$RUNSC_CACHE/$RUNSC_VERSION"
[ -x "$dest/runsc" ] && exit 0
echo "building runsc $RUNSC_VERSION into $dest (about a minute)"
cache_tmp "$RUNSC_CACHE" "gVisor's runsc"
CGO_ENABLED=0 GOBIN="$tmp" GOFLAGS= go install \
	-ldflags "-X gvisor.dev/gvisor/runsc/version.version=$RUNSC_VERSION" \
	"gvisor.dev/gvisor/runsc@v$RUNSC_VERSION"
"$tmp/runsc" --version >/dev/null
mkdir -p "$dest"
mv -f "$tmp/runsc" "$dest/runsc"
