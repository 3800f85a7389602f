#!/bin/sh
# tests/cli/spec-errors.sh - golden-file test of spec error messages: every tests/specs/bad-*.yaml
# must make `dtrain check` exit 2 (not crash) with stderr equal to tests/golden/bad-*.err, and
# every tests/specs/good-*.yaml must pass with exit 0. The same for cluster files (dtrain-cluster(5)):
# tests/specs/cluster-bad-*.yaml against tests/golden/cluster-bad-*.err and cluster-good.yaml, each
# checked with a valid model (`dtrain check good-minimal.yaml --cluster FILE`, one rank, so
# 'ranks' other than 1 is an error); np2-bad-*.yaml checked on 2 ranks (mpirun); and flags' numbers
# against tests/golden/flag-*.err. UPDATE_GOLDEN=1 rewrites the goldens.

top_srcdir=${top_srcdir:-$(cd "$(dirname "$0")/../.." && pwd)}
top_builddir=${top_builddir:-$top_srcdir}
DTRAIN=${DTRAIN:-$top_builddir/src/dtrain}
case $DTRAIN in
/*) ;;
*) DTRAIN=$(pwd)/$DTRAIN ;;
esac

if [ ! -x "$DTRAIN" ]; then
        echo "spec-errors: $DTRAIN is not built" >&2
        exit 99
fi

# messages name files relative to the source tree, as a user running from there sees them
cd "$top_srcdir" || exit 99
tmp=$(mktemp -d "${TMPDIR:-/tmp}/dtrain-spec-errors.XXXXXX") || exit 99
trap 'rm -rf "$tmp"' EXIT INT TERM

fail=0
n=0

# check_error SPEC GOLDEN [CLUSTER]: exit 2 exactly, stderr matches the golden
check_error() {
        spec=$1
        golden=$2
        n=$((n + 1))
        if [ -n "${3:-}" ]; then
                spec=$3         # named in the messages below
                "$DTRAIN" check "$1" --cluster "$3" >"$tmp/out" 2>"$tmp/err"
        else
                "$DTRAIN" check "$spec" >"$tmp/out" 2>"$tmp/err"
        fi
        rc=$?
        if [ "$rc" -ne 2 ]; then
                echo "FAIL: $spec: exit status $rc, expected 2" >&2
                sed 's/^/  | /' "$tmp/err" >&2
                fail=$((fail + 1))
                return
        fi
        if [ -n "$UPDATE_GOLDEN" ]; then
                cp "$tmp/err" "$golden"
                echo "updated $golden"
                return
        fi
        if [ ! -f "$golden" ]; then
                echo "FAIL: $spec: no golden file $golden (run with UPDATE_GOLDEN=1)" >&2
                fail=$((fail + 1))
                return
        fi
        if ! diff -u "$golden" "$tmp/err" >"$tmp/diff"; then
                echo "FAIL: $spec: stderr differs from $golden" >&2
                cat "$tmp/diff" >&2
                fail=$((fail + 1))
        fi
}

for spec in tests/specs/bad-*.yaml; do
        [ -f "$spec" ] || continue
        base=$(basename "$spec" .yaml)
        check_error "$spec" "tests/golden/$base.err"
done

# a spec that does not exist is reported like any other spec mistake, and so is a directory
check_error tests/specs/no-such-spec.yaml tests/golden/no-such-spec.err
check_error tests/specs tests/golden/spec-directory.err

# cluster files, with a model that is valid on its own
model=tests/specs/good-minimal.yaml
for spec in tests/specs/cluster-bad-*.yaml; do
        [ -f "$spec" ] || continue
        base=$(basename "$spec" .yaml)
        check_error "$model" "tests/golden/$base.err" "$spec"
done
check_error "$model" tests/golden/cluster-no-such-file.err tests/specs/no-such-cluster.yaml
check_error "$model" tests/golden/cluster-directory.err tests/specs

# flags: a number is a decimal integer and nothing else, the same for every flag (no blanks on
# either side, no empty element in a list); check_flag NAME ARGS...: exit 2, stderr as
# tests/golden/flag-NAME.err
check_flag() {
        name=$1
        shift
        n=$((n + 1))
        "$DTRAIN" "$@" >"$tmp/out" 2>"$tmp/err"
        rc=$?
        golden=tests/golden/flag-$name.err
        if [ "$rc" -ne 2 ]; then
                echo "FAIL: flag-$name ($*): exit status $rc, expected 2" >&2
                sed 's/^/  | /' "$tmp/err" >&2
                fail=$((fail + 1))
                return
        fi
        if [ -n "$UPDATE_GOLDEN" ]; then
                cp "$tmp/err" "$golden"
                echo "updated $golden"
                return
        fi
        if ! diff -u "$golden" "$tmp/err" >"$tmp/diff" 2>&1; then
                echo "FAIL: flag-$name ($*): stderr differs from $golden" >&2
                cat "$tmp/diff" >&2
                fail=$((fail + 1))
        fi
}
check_flag batch-leading-space check "$model" --batch ' 16'
check_flag batch-trailing-space check "$model" --batch '16 '
check_flag epochs-hex run "$model" --epochs 0x10
check_flag ranks-trailing-comma plan "$model" --ranks '1,2,'
check_flag ranks-empty-element plan "$model" --ranks '1,,2'
check_flag ranks-space plan "$model" --ranks '1, 2'
check_flag temperature-space sample "$model" --temperature ' 1'

# specs whose mistake shows only on several ranks (a split model): `mpirun -np 2 dtrain check`,
# rank 0's messages against the golden (Open MPI's own abort notice left out)
if command -v mpirun >/dev/null 2>&1; then
        for spec in tests/specs/np2-bad-*.yaml; do
                [ -f "$spec" ] || continue
                base=$(basename "$spec" .yaml)
                golden=tests/golden/$base.err
                n=$((n + 1))
                timeout 120 mpirun -np 2 "$DTRAIN" check "$spec" >"$tmp/out" 2>"$tmp/raw"
                rc=$?
                grep -E "^($spec|dtrain)" "$tmp/raw" >"$tmp/err"
                if [ "$rc" -ne 2 ]; then
                        echo "FAIL: $spec on 2 ranks: exit status $rc, expected 2" >&2
                        sed 's/^/  | /' "$tmp/raw" >&2
                        fail=$((fail + 1))
                elif [ -n "$UPDATE_GOLDEN" ]; then
                        cp "$tmp/err" "$golden"
                        echo "updated $golden"
                elif ! diff -u "$golden" "$tmp/err" >"$tmp/diff" 2>&1; then
                        echo "FAIL: $spec on 2 ranks: stderr differs from $golden" >&2
                        cat "$tmp/diff" >&2
                        fail=$((fail + 1))
                fi
        done
else
        echo "note: no mpirun; the np2-bad-*.yaml specs are not checked"
fi

for spec in tests/specs/good-*.yaml; do
        [ -f "$spec" ] || continue
        n=$((n + 1))
        "$DTRAIN" check "$spec" >"$tmp/out" 2>"$tmp/err"
        rc=$?
        if [ "$rc" -ne 0 ]; then
                echo "FAIL: $spec: exit status $rc, expected 0" >&2
                sed 's/^/  | /' "$tmp/err" >&2
                fail=$((fail + 1))
        fi
done

n=$((n + 1))
"$DTRAIN" check "$model" --cluster tests/specs/cluster-good.yaml >"$tmp/out" 2>"$tmp/err"
rc=$?
if [ "$rc" -ne 0 ]; then
        echo "FAIL: tests/specs/cluster-good.yaml: exit status $rc, expected 0" >&2
        sed 's/^/  | /' "$tmp/err" >&2
        fail=$((fail + 1))
fi

echo "spec-errors: $n specs, $fail failed"
[ "$fail" -eq 0 ]
