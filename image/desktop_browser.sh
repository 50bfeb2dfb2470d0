#!/bin/sh
# browser starts Chromium on the sandbox's X display (DISPLAY, default :0)
# with the flags a reins sandbox needs (docs/images.md): as root without
# Chromium's own sandbox, no GPU, no shared-memory files in /dev/shm, no
# traffic of its own (updates, sync, QUIC), a fresh profile under /tmp
# unless --user-data-dir is given, and one window at 0,0 the size of the
# screen (xdpyinfo's, else $REINS_SCREEN, else 1280x800). Other
# arguments pass through: a URL, --kiosk, --user-data-dir=DIR.
set -e
: "${DISPLAY:=:0}"
export DISPLAY
screen=$(xdpyinfo 2>/dev/null | awk '$1 == "dimensions:" { print $2; exit }') || true
case $screen in
[0-9]*x[0-9]*) ;;
*) screen=${REINS_SCREEN:-1280x800} ;;
esac
profile=
for arg in "$@"; do
	case $arg in
	--user-data-dir=*) profile=given ;;
	esac
done
if [ -z "$profile" ]; then
	set -- "--user-data-dir=$(mktemp -d /tmp/browser-profile.XXXXXX)" "$@"
fi
exec /usr/lib/chromium/chromium \
	--no-sandbox --test-type --disable-gpu --disable-dev-shm-usage \
	--disable-quic --no-first-run --no-default-browser-check \
	--disable-background-networking --disable-component-update \
	--disable-sync --password-store=basic \
	--disable-features=OptimizationHints,MediaRouter,Translate,InterestFeedContentSuggestions,AutofillServerCommunication,CertificateTransparencyComponentUpdater \
	--disable-client-side-phishing-detection --no-pings --disable-domain-reliability \
	--disable-breakpad --metrics-recording-only \
	--window-position=0,0 "--window-size=${screen%x*},${screen#*x}" "$@"
