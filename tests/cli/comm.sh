#!/usr/bin/env bash
# tests/cli/comm.sh - communicators as values under real mpirun (tests/unit/test_comm_mpi.c): a
# 2 x 2 grid of sub-communicators, and the collective deadline naming the world rank that stalled.
. "$(dirname "$0")/lib.sh"
: "${top_builddir:=$top_srcdir}"
prog="$top_builddir/tests/unit/test_comm_mpi"
[ -x "$prog" ] || { echo "skip: $prog not built"; exit 77; }
MPIRUN=${MPIRUN:-mpirun}
expect_rc 0 "singleton" "$prog"
expect_rc 0 "4 ranks: grid axes, world ranks, bcast, agree" timeout -k 5 60 $MPIRUN -np 4 "$prog"
expect_rc 6 "a stalled rank ends the job with exit 6" timeout -k 5 60 $MPIRUN -np 4 "$prog" stall
grep -q "did not complete within 6 s (not answering: rank 3 " "$TMP/err" \
  && pass "world rank 3 is named: $(grep -o 'fatal: .*' "$TMP/err" | head -1)" || fail "message: $(grep -v '^\s*$' "$TMP/err" | head -5)"
finish
