#!/bin/sh
# Installs the Debian packages reins needs, if any is missing. Run as root
# (apt-get); without root it says what to install.
set -eu

need=""
want() { # command package
	command -v "$1" >/dev/null 2>&1 || need="$need $2"
}
want runsc runsc
want runc runc
want mkfs.ext4 e2fsprogs
want ip iproute2
want curl curl
want debootstrap debootstrap
[ -x /usr/lib/postgresql/15/bin/initdb ] || need="$need postgresql-15"
dpkg -s busybox-static >/dev/null 2>&1 || need="$need busybox-static"
command -v go >/dev/null 2>&1 || { echo "install Go 1.26 or newer (https://go.dev/dl) and put it on PATH" >&2; exit 1; }

[ -z "$need" ] && exit 0
if [ "$(id -u)" != 0 ]; then
	echo "missing Debian packages:$need — run: sudo apt-get update && sudo apt-get install -y$need" >&2
	exit 1
fi
echo "installing:$need"
export DEBIAN_FRONTEND=noninteractive
apt-get update -q
apt-get install -y -q $need
