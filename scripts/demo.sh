#!/bin/sh
# make demo: start reins serve on a scratch data dir, then drive a sandbox
# from the CLI the way a user would, with visible output.
set -eu
cd "$(dirname "$0")/.."
REINS=$PWD/bin/reins
DATA=${REINS_DEMO_DIR:-$PWD/.demo}
ADDR=${REINS_DEMO_ADDR:-127.0.0.1:7071}
mkdir -p "$DATA"
export REINS_URL=http://$ADDR

step() { printf '\n\033[1m$ %s\033[0m\n' "$*"; }

"$REINS" serve --data-dir "$DATA" --addr "$ADDR" >"$DATA/serve.log" 2>&1 &
SERVE=$!
cleanup() {
	# Remove what the demo made, even when a step failed.
	for id in $("$REINS" sandbox ls --label demo=yes 2>/dev/null | awk 'NR>1 {print $1}'); do
		"$REINS" sandbox rm "$id" >/dev/null 2>&1 || true
	done
	kill $SERVE 2>/dev/null
	wait $SERVE 2>/dev/null || true
}
trap cleanup EXIT
for i in $(seq 1 100); do
	[ -s "$DATA/admin.token" ] && curl -sf "$REINS_URL/healthz" >/dev/null 2>&1 && break
	kill -0 $SERVE 2>/dev/null || { cat "$DATA/serve.log"; exit 1; }
	sleep 0.1
done
export REINS_TOKEN=$(cat "$DATA/admin.token")
echo "reins serve is up at $REINS_URL (log: $DATA/serve.log)"

step reins sandbox create --memory 256M --label demo=yes
ID=$("$REINS" sandbox create --memory 256M --label demo=yes)
echo "$ID"

step reins sandbox exec "$ID" -- uname -a
"$REINS" sandbox exec "$ID" -- uname -a

step reins sandbox exec "$ID" -- sh -c 'echo hello from $(hostname); id; pwd'
"$REINS" sandbox exec "$ID" -- sh -c 'echo hello from $(hostname); id; pwd'

printf 'print me from inside\n' >"$DATA/note.txt"
step reins sandbox cp note.txt "$ID":/workspace/
"$REINS" sandbox cp "$DATA/note.txt" "$ID":/workspace/
"$REINS" sandbox exec "$ID" -- cat /workspace/note.txt

step reins sandbox exec "$ID" -- sh -c 'exit 3'
set +e
"$REINS" sandbox exec "$ID" -- sh -c 'exit 3'
echo "exit code: $?"
set -e

step reins sandbox exec --detach "$ID" -- sh -c 'for i in 1 2 3; do echo tick $i; sleep 0.2; done'
PID=$("$REINS" sandbox exec --detach "$ID" -- sh -c 'for i in 1 2 3; do echo tick $i; sleep 0.2; done')
echo "$PID"
step reins sandbox logs --follow "$ID" "$PID"
"$REINS" sandbox logs --follow "$ID" "$PID"

step reins sandbox exec "$ID" -- sh -c "'mkdir -p out && date > out/stamp && ls -l /workspace'"
"$REINS" sandbox exec "$ID" -- sh -c 'mkdir -p out && date > out/stamp && ls -l /workspace'
step reins sandbox cp "$ID":/workspace/out ./out
rm -rf "$DATA/out"
"$REINS" sandbox cp "$ID":/workspace/out "$DATA/out"
ls -l "$DATA/out"

step reins sandbox ls
"$REINS" sandbox ls

step reins sandbox rm "$ID"
"$REINS" sandbox rm "$ID"
echo
echo "done: the sandbox ran under gVisor, isolated from this machine; see README.md for more."
