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
	"$REINS" sandbox rm --label demo=yes >/dev/null 2>&1 || true
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

step reins sandbox create --memory 512Mi --label demo=yes
ID=$("$REINS" sandbox create --memory 512Mi --label demo=yes)
echo "$ID"

step reins sandbox exec "$ID" uname -a
"$REINS" sandbox exec "$ID" uname -a

step reins sandbox cp examples/fix-the-bug/project "$ID":/workspace/project
"$REINS" sandbox cp examples/fix-the-bug/project "$ID":/workspace/project

step reins sandbox exec "$ID" sh /workspace/project/test.sh
"$REINS" sandbox exec "$ID" sh /workspace/project/test.sh || echo "(exit code $?)"

TASK="Find the failing test in /workspace/project, fix the bug, and rerun the tests."
step reins run --model script:examples/fix-the-bug/agent.json --in "$ID" "\"$TASK\""
"$REINS" run --model script:examples/fix-the-bug/agent.json --in "$ID" "$TASK"

step reins sandbox exec "$ID" sh /workspace/project/test.sh
"$REINS" sandbox exec "$ID" sh /workspace/project/test.sh

step reins runs ls
"$REINS" runs ls

step reins sandbox rm "$ID"
"$REINS" sandbox rm "$ID"
echo
echo "done: the agent loop ran in reins serve; its tools ran in a gVisor sandbox."
echo "The same with a real model: reins run --model anthropic:claude-sonnet-4-5 --in ID \"...\" (see README.md)."
