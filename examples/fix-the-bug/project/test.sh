#!/bin/sh
# test.sh: the calculator's tests. Exits 1 if any fails.
cd "$(dirname "$0")" && . ./calc.sh
fail=0
check() {
	if [ "$2" = "$3" ]; then
		echo "ok   $1"
	else
		echo "FAIL $1: got $2, want $3"
		fail=1
	fi
}
check "add 2 3" "$(add 2 3)" 5
check "sub 7 4" "$(sub 7 4)" 3
check "mul 2 3" "$(mul 2 3)" 6
check "mul 4 5" "$(mul 4 5)" 20
exit $fail
