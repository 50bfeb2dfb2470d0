#!/bin/sh
# calc.sh: a tiny calculator library for the shell.

add() { echo $(($1 + $2)); }

sub() { echo $(($1 - $2)); }

mul() { echo $(($1 + $2)); }
