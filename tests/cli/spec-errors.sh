#!/bin/sh
# tests/cli/spec-errors.sh - golden-file test of spec error messages: every tests/specs/bad-*.yaml
# must make `dtrain check` exit 2 (not crash) with stderr equal to tests/golden/bad-*.err, and
# every tests/specs/good-*.yaml must pass with exit 0. UPDATE_GOLDEN=1 rewrites the goldens.

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

# check_error SPEC GOLDEN: exit 2 exactly, stderr matches the golden
check_error() {
        spec=$1
        golden=$2
        n=$((n + 1))
        "$DTRAIN" check "$spec" >"$tmp/out" 2>"$tmp/err"
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

# a spec that does not exist is reported like any other spec mistake
check_error tests/specs/no-such-spec.yaml tests/golden/no-such-spec.err

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

echo "spec-errors: $n specs, $fail failed"
[ "$fail" -eq 0 ]
