# Sourced by install-deps.sh and build-busybox.sh: builds go into a cache
# outside the clone through a temporary directory renamed into place, so a
# killed build leaves no half binary.

# cache_tmp CACHE WHAT makes CACHE, removes what builds killed with SIGKILL
# left an hour ago (a younger one may be another build's, under way), and
# sets tmp to a new build directory in CACHE, removed when the script ends.
cache_tmp() {
	if ! mkdir -p "$1" 2>/dev/null || [ ! -w "$1" ]; then
		echo "cannot write $1: run make deps as root (it builds $2 there)" >&2
		exit 1
	fi
	find "$1" -maxdepth 1 -name '.build.*' -mmin +60 -exec rm -rf {} + 2>/dev/null || true
	tmp=$(mktemp -d "$1/.build.XXXXXX")
	trap 'rm -rf "$tmp"' EXIT
	trap 'exit 1' INT TERM
}
