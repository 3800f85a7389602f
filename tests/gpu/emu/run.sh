#!/usr/bin/env bash
# tests/gpu/emu/run.sh - the CUDA backend's transformer ops (backend/cuda/attn.c, kernels_attn.cu) run
# on the host against the CPU's (attn_emu.c), and the layers' device paths over them (layers_emu.c):
# for a machine without a GPU, to check index math, wiring and barriers before a GPU session. Not
# part of make check (5 minutes of 256-thread blocks on a loaded 2-vCPU machine).
# Usage: bash tests/gpu/emu/run.sh [BUILD_DIR]   (BUILD_DIR: where src/libdtrain.a is; default the
# checkout). Needs g++ and the build's libraries; exit 0 all within bounds, 1 not.
set -eu
HERE=$(cd "$(dirname "$0")" && pwd)
SRC=$(cd "$HERE/../../.." && pwd)
BLD=$(cd "${1:-$SRC}" && pwd)
W=$(mktemp -d "${TMPDIR:-/tmp}/dtrain-emu.XXXXXX")
trap 'rm -rf "$W"' EXIT
# launches name<<<grid, block>>>(args); become emu_launch(grid, block, [&]{ name(args); });
python3 - "$SRC/src/backend/cuda/kernels_attn.cu" "$W/kernels_attn_emu.cc" <<'PY'
import re, sys
s = open(sys.argv[1]).read().replace('#include "backend/cuda/kernels.h"', '#include "emu.h"\n#include "backend/cuda/kernels.h"', 1)
def top(t):
    d, parts, cur = 0, [], ''
    for ch in t:
        d += ch in '(['; d -= ch in ')]'
        if ch == ',' and d == 0: parts.append(cur.strip()); cur = ''
        else: cur += ch
    return parts + [cur.strip()]
s, n = re.subn(r'(\w+)<<<(.*?)>>>\((.*?)\);', lambda m: 'emu_launch(%s, %s, [&]{ %s(%s); });' % (*top(m.group(2)), m.group(1), m.group(3)), s, flags=re.S)
assert n > 0 and '<<<' not in s, 'no launch rewritten'
open(sys.argv[2], 'w').write(s)
PY
INC="-I$HERE -I$HERE/fake -I$SRC/src -I$BLD"
g++ -std=c++17 -O1 $INC -c "$HERE/emu.cc" -o "$W/emu.o"
g++ -std=c++17 -O1 $INC -c "$W/kernels_attn_emu.cc" -o "$W/kattn.o"
CC=${CC:-$(command -v mpicc || echo cc)}
$CC -std=c11 -D_GNU_SOURCE -O1 $INC -c "$SRC/src/backend/cuda/attn.c" -o "$W/attn.o"
$CC -std=c11 -D_GNU_SOURCE -O1 $INC -c "$HERE/attn_emu.c" -o "$W/attn_emu.o"
# the build's DT_LIBS: its $(X_LIBS) as ${X_LIBS}, expanded after every X_LIBS of the Makefile is set
LIBS=$(sed -n 's/^DT_LIBS = //p' "$BLD/Makefile" | sed "s/\$(\([A-Z_]*\))/\${\1}/g")
LIBS=$(eval "$(sed -n '/\$(/!s/^\([A-Z_]*_LIBS\) = \(.*\)$/\1="\2"/p' "$BLD/Makefile")"; eval echo "$LIBS")
$CC -std=c11 -D_GNU_SOURCE -O1 $INC -c "$HERE/layers_emu.c" -o "$W/layers_emu.o"
$CC -std=c11 -D_GNU_SOURCE -O1 $INC -c "$HERE/emu_fakes.c" -o "$W/emu_fakes.o"
for t in attn_emu layers_emu; do
  $CC -o "$W/$t" "$W/$t.o" "$W/emu_fakes.o" "$W/attn.o" "$W/kattn.o" "$W/emu.o" \
    -Wl,--whole-archive "$BLD/src/libdtrain.a" -Wl,--no-whole-archive $LIBS -lstdc++ -lpthread -lm
done
rc=0
timeout 600 "$W/attn_emu" || rc=1
timeout 600 "$W/layers_emu" || rc=1
exit $rc
