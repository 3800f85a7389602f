#!/usr/bin/env bash
# tests/cli/man-coverage.sh - the man pages (dtrain-bench(1) too) render without warnings and
# document everything the binary accepts: every --flag of the help texts in dtrain(1), every spec
# key of `dtrain keys` in dtrain-model(5). Env: DTRAIN (the binary), top_srcdir (the source tree). Exit 0, or 1 naming
# each missing item.
set -u
: "${top_srcdir:=$(cd "$(dirname "$0")/../.." && pwd)}"
: "${DTRAIN:=$top_srcdir/src/dtrain}"
MAN1=$top_srcdir/man/dtrain.1
MAN5=$top_srcdir/man/dtrain-model.5
MANC=$top_srcdir/man/dtrain-cluster.5
MANB=$top_srcdir/man/dtrain-bench.1
FAILS=0
fail() { echo "FAIL: $*"; FAILS=$((FAILS + 1)); }

for f in "$MAN1" "$MAN5" "$MANC" "$MANB"; do
  [ -r "$f" ] || { echo "FAIL: $f is missing"; exit 1; }
done
# (a) both pages format without a single warning
if command -v groff >/dev/null 2>&1; then
  for f in "$MAN1" "$MAN5" "$MANC" "$MANB"; do
    out=$(groff -man -ww -z "$f" 2>&1)
    if [ -n "$out" ]; then
      fail "groff -man -ww -z $(basename "$f") is not silent:"
      printf '%s\n' "$out" | sed 's/^/  | /'
    else
      echo "ok: $(basename "$f") formats without warnings"
    fi
  done
else
  echo "note: groff not found (apt-get install groff-base); skipping the formatting check"
fi

if [ ! -x "$DTRAIN" ]; then
  echo "FAIL: no dtrain binary at '$DTRAIN'"
  exit 1
fi

# (b) every long flag of the help texts appears in dtrain(1) as \-\-flag. The commands are those
# `dtrain --help` lists (main.c's table) and each one's help is printed from its option table
# (cli.h), so a new command or flag is checked without a change here.
cmds=$("$DTRAIN" --help 2>&1 | sed -n '/^Commands:/,/^$/p' | sed -nE 's/^  ([a-z][a-z-]*) .*/\1/p')
if [ "$(printf '%s\n' "$cmds" | grep -c .)" -lt 9 ]; then
  fail "dtrain --help lists too few commands: $(echo $cmds)"
fi
help=$( { "$DTRAIN" --help; for c in $cmds; do "$DTRAIN" "$c" --help; done; } 2>&1 )
for c in $cmds; do
  grep -qE "^\.(SS|TP|B|SH).*\b$c\b" "$MAN1" || fail "dtrain.1 does not describe the command $c"
done
flags=$(printf '%s\n' "$help" | grep -oE -- '--[A-Za-z0-9][A-Za-z0-9-]*' | sort -u)
if [ -z "$flags" ]; then
  fail "no --flags found in the help texts"
  printf '%s\n' "$help" | sed 's/^/  | /' | head -20
fi
nflags=0
for flag in $flags; do
  nflags=$((nflags + 1))
  esc=$(printf '%s' "$flag" | sed 's/-/\\-/g')     # --max-steps -> \-\-max\-steps
  grep -qF -- "$esc" "$MAN1" || fail "dtrain.1 does not document $flag (no '$esc')"
done
echo "checked $nflags flags against dtrain.1"

# (b2) every DTRAIN_* variable the help texts name has an entry in dtrain.1 ENVIRONMENT
nvars=0
for var in $(printf '%s\n' "$help" | grep -oE 'DTRAIN_[A-Z0-9_]+' | sort -u); do
  nvars=$((nvars + 1))
  sed -n '/^\.SH ENVIRONMENT/,/^\.SH /p' "$MAN1" | grep -qE "^\.BR? $var\b" \
    || fail "dtrain.1 ENVIRONMENT does not document $var (no '.B $var')"
done
echo "checked $nvars environment variables against dtrain.1"

# (c) every key of `dtrain keys` is documented in dtrain-model(5) as `.B key` or \fBkey\fR
keys=$("$DTRAIN" keys 2>&1); rc=$?
keys=$(printf "%s\n" "$keys" | awk "{ print \$1 }")   # the key; type and default follow
if [ "$rc" != 0 ] || [ -z "$keys" ]; then
  fail "'dtrain keys' failed (exit $rc) or printed nothing"
  printf '%s\n' "$keys" | sed 's/^/  | /' | head -20
fi
nkeys=0
while IFS= read -r line; do
  [ -n "$line" ] || continue
  case $line in
    *.*) ;;
    *) fail "'dtrain keys' line '$line' is not section.key"; continue ;;
  esac
  key=${line##*.}
  if ! printf '%s' "$key" | grep -qE '^[A-Za-z0-9_]+$'; then
    fail "'dtrain keys' line '$line' has an odd key"
    continue
  fi
  nkeys=$((nkeys + 1))
  if ! grep -qE "^\.B[[:space:]]+\"?$key\"?([[:space:]]|$)" "$MAN5" &&
     ! grep -qF "\\fB$key\\fR" "$MAN5" && ! grep -qF "\\fB$key\\fP" "$MAN5"; then
    fail "dtrain-model.5 does not document $line (no '.B $key' or '\\fB$key\\fR')"
  fi
done <<EOF
$keys
EOF
echo "checked $nkeys keys against dtrain-model.5"

if [ "$FAILS" = 0 ]; then
  echo "all passed"
  exit 0
fi
echo "$FAILS failed"
exit 1
