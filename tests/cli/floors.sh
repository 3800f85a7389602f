#!/usr/bin/env bash
# tests/cli/floors.sh - includes point only down: every #include "x/y.h" in src/ names a header of
# the including file's own directory or of a lower floor (the table below, the one place it lives;
# src/README explains it). Two directories on one floor may not include each other either, and no
# .c file declares a dt_ function by hand (a prototype that hides an include, and its arrow). Env:
# top_srcdir (the source tree). Exit 0, or 1 naming each include that points up or sideways.
set -u
: "${top_srcdir:=$(cd "$(dirname "$0")/../.." && pwd)}"
SRC=$top_srcdir/src

# floor of a path relative to src/ (a file or a header); prints nothing for a path no floor holds
floor_of() {
  case $1 in
    util/*|plotting/*)            echo 0 ;;   # plain helpers: no dtrain module below them
    backend/cuda/*|backend/cuda_load.c)
                                  echo 6.5 ;; # the CUDA module and its loader: they implement
                                              # backend.h and parallel/devcomm.h, so sit above both
    backend/*)                    echo 1 ;;
    layers/*)                     echo 2 ;;
    data/*|optim/*)               echo 3 ;;
    spec/*)                       echo 4 ;;
    graph/*)                      echo 5 ;;
    parallel/*)                   echo 6 ;;
    plan/*)                       echo 7 ;;
    train/*)                      echo 8 ;;
    bench/*)                      echo 9 ;;
    */*)                          ;;          # a directory with no floor: reported below
    *)                            echo 10 ;;  # src/*.c: the commands, main.c, cli.c
  esac
}

# the unit two files must share to include each other on one floor: the directory, except that
# the CUDA module and its loader are one unit
unit_of() {
  case $1 in
    backend/cuda/*|backend/cuda_load.c) echo cuda ;;
    */*) echo "${1%%/*}" ;;
    *) echo . ;;
  esac
}

fails=0 n=0
cd "$SRC" || { echo "FAIL: no $SRC"; exit 1; }
while IFS= read -r file; do
  f=$(floor_of "$file")
  if [ -z "$f" ]; then
    echo "FAIL: $file: its directory has no floor (add it to tests/cli/floors.sh and src/README)"
    fails=$((fails + 1)); continue
  fi
  dir=$(dirname "$file")
  while IFS=: read -r line inc; do
    [ -n "$inc" ] || continue
    # as the compiler looks: the file's own directory first, then src/ (-I); config.h is configure's
    [ "$inc" = config.h ] && continue
    if [ "$dir" != . ] && [ -e "$dir/$inc" ]; then target=$dir/$inc; else target=$inc; fi
    [ -e "$target" ] || continue        # a system header quoted, or one this build lacks
    n=$((n + 1))
    [ "$(unit_of "$target")" = "$(unit_of "$file")" ] && continue
    t=$(floor_of "$target")
    if awk -v a="$t" -v b="$f" 'BEGIN { exit !(a >= b) }'; then
      what=up; awk -v a="$t" -v b="$f" 'BEGIN { exit !(a == b) }' && what=sideways
      echo "FAIL: src/$file:$line includes \"$inc\" ($what: floor $t from floor $f)"
      fails=$((fails + 1))
    fi
  done < <(grep -n '^[[:space:]]*#[[:space:]]*include[[:space:]]*"' "$file" |
           sed -E 's/^([0-9]+):[[:space:]]*#[[:space:]]*include[[:space:]]*"([^"]+)".*/\1:\2/')
done < <(find . \( -name '*.c' -o -name '*.h' -o -name '*.cu' \) | sed 's|^\./||' | sort)

# a dt_ function declared at file scope in a .c file: the declaration stands for an include
hand=$(find . -name '*.c' | sed 's|^\./||' | sort | xargs awk '
  FNR == 1 { inproto = 0 }
  !inproto && /^[A-Za-z_][A-Za-z0-9_ *]*[ *]dt_[a-z0-9_]+\(/ && !/^(static|typedef|return)[ \t]/ {
    match($0, /dt_[a-z0-9_]+\(/); name = substr($0, RSTART, RLENGTH - 1); start = FNR; inproto = 1; buf = ""
  }
  inproto {
    buf = buf $0
    if (buf ~ /\{/) inproto = 0
    else if (buf ~ /;[ \t]*$/) { print FILENAME ":" start ": declares " name " by hand"; inproto = 0 }
  }')
if [ -n "$hand" ]; then
  printf '%s\n' "$hand" | sed 's|^|FAIL: src/|; s|$| (include the header that declares it)|'
  fails=$((fails + $(printf '%s\n' "$hand" | wc -l)))
fi

echo "checked $n includes"
if [ "$fails" = 0 ]; then
  echo "all point down"
  exit 0
fi
echo "$fails point up or sideways"
exit 1
