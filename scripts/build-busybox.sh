#!/bin/sh
# Builds the busybox the built-in `busybox` image is made of: Debian's
# busybox source package, its patches and its static configuration, with
# one change, CONFIG_FEATURE_WGET_TIMEOUT=y. Debian turns that feature off
# in every flavour (deb, static, udeb) while wget still parses -T into the
# slot the feature would fill, a NULL pointer, so `wget -T N` segfaults in
# getopt32 before it sends anything (docs/decisions/0024-busybox-wget.md).
# Built once into a cache outside the clone, one directory per version
# (cache.sh). Called by install-deps.sh.
set -eu

# BUSYBOX_VERSION names the build: Debian's version and our recipe's. It
# must match image.BusyboxVersion, which a test checks.
BUSYBOX_VERSION=1.35.0-4+deb12u1-reins1
DEB_VERSION=1.35.0-4+deb12u1
ORIG=busybox_1.35.0.orig.tar.bz2
ORIG_SHA256=faeeb244c35a348a334f4a59e44626ee870fb07b6884d68c10ae8bc19f83a694
DEBIAN=busybox_1.35.0-4+deb12u1.debian.tar.xz
DEBIAN_SHA256=1cacbe095ef4880ea7879933c8e3c5075d1527cd6fbcb626a9b41e5daefd1a46
# REINS_BUSYBOX_CACHE moves the cache; reins then needs
# REINS_BUSYBOX=$REINS_BUSYBOX_CACHE/VERSION/busybox to find it.
CACHE=${REINS_BUSYBOX_CACHE:-/var/cache/reins/busybox}
MIRROR=${REINS_DEBIAN_MIRROR:-$(awk '/^URIs:/ { print $2; exit } /^deb / { print ($2 ~ /^\[/ ? $3 : $2); exit }' \
	/etc/apt/sources.list.d/debian.sources /etc/apt/sources.list 2>/dev/null || true)}
MIRROR=${MIRROR:-http://deb.debian.org/debian}

dest="$CACHE/$BUSYBOX_VERSION"
[ -x "$dest/busybox" ] && exit 0
echo "building busybox $BUSYBOX_VERSION into $dest from $MIRROR (about two minutes)"
. "$(dirname "$0")/cache.sh"
cache_tmp "$CACHE" busybox
cd "$tmp"
for f in "$ORIG:$ORIG_SHA256" "$DEBIAN:$DEBIAN_SHA256"; do
	name=${f%%:*}
	if ! curl -fsS -o "$name" "$MIRROR/pool/main/b/busybox/$name"; then
		echo "cannot fetch $MIRROR/pool/main/b/busybox/$name: if Debian has a newer busybox, update BUSYBOX_VERSION and the checksums here and in image.BusyboxVersion" >&2
		exit 1
	fi
	echo "${f#*:}  $name" | sha256sum -c --quiet
done
tar xjf "$ORIG"
tar xJf "$DEBIAN"
cd busybox-1.35.0
grep -v '^#' ../debian/patches/series | grep . | while read -r p; do patch -p1 -s <"../debian/patches/$p" || exit 1; done
sed 's/^# CONFIG_FEATURE_WGET_TIMEOUT is not set$/CONFIG_FEATURE_WGET_TIMEOUT=y/' ../debian/config/pkg/static >.config
grep -qx CONFIG_FEATURE_WGET_TIMEOUT=y .config
export KCONFIG_NOTIMESTAMP=1 SOURCE_DATE_EPOCH=0
if ! { yes "" | make silentoldconfig && make -j"$(nproc)" BB_EXTRA_VERSION="Debian $DEB_VERSION, reins" busybox; } >../build.log 2>&1; then
	tail -30 ../build.log >&2
	echo "building busybox failed (the lines above are the end of its log)" >&2
	exit 1
fi
./busybox wget --help 2>&1 | grep -q -- '-T SEC'
mkdir -p "$dest"
mv -f busybox "$dest/busybox"
