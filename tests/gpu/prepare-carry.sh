#!/usr/bin/env bash
# tests/gpu/prepare-carry.sh - run HERE (a machine with apt and the build dependencies): makes the
# folder the lead carries to a GPU machine that has CUDA/cuDNN, gcc and make but maybe no libyaml,
# OpenBLAS, Open MPI or Check and no package registry:
#   DIR/dtrain-*.tar.gz   `make dist` of this tree (configured without CUDA is fine)
#   DIR/debs/*.deb        apt-get download of the libraries and their -dev packages
#   DIR/prefix/           the same, dpkg -x'ed, only with --unpack (run-all.sh unpacks the .debs
#                         itself with ar + tar when it is absent: the carry stays ~55 MB)
#   DIR/datasets/         fashion-mnist (from /usr/share/datasets) for models/cnn.yaml, lstm.yaml
#   DIR/run-all.sh        tests/gpu/run-all.sh
# Usage: tests/gpu/prepare-carry.sh [--unpack] [DIR]   (default shared/gpu-carry)
set -eu
UNPACK=0
if [ "${1:-}" = --unpack ]; then UNPACK=1; shift; fi
SRC=$(cd "$(dirname "$0")/../.." && pwd)
DIR=${1:-$SRC/shared/gpu-carry}
mkdir -p "$DIR/debs"
DIR=$(cd "$DIR" && pwd)

# packages: what configure needs (yaml, jansson, zlib, openblas, open mpi, check) and what they load
PKGS="libyaml-0-2 libyaml-dev libjansson4 libjansson-dev zlib1g-dev
libopenblas0-pthread libopenblas-dev libopenblas-pthread-dev libgfortran5
libopenmpi3 libopenmpi-dev openmpi-bin openmpi-common libhwloc15 libhwloc-plugins libevent-core-2.1-7
libevent-pthreads-2.1-7 libevent-2.1-7 libpmix2 libfabric1 libucx0 libpsm2-2 libpsm-infinipath1 libibverbs1
librdmacm1 libnl-3-200 libnl-route-3-200 libnuma1 libxnvctrl0 libltdl7 libmunge2 libefa1 libprrte3
check libsubunit0 libsubunit-dev pkgconf pkg-config groff-base"
cd "$DIR/debs"
for p in $PKGS; do
  # one name at a time: a package this release does not have is reported and skipped
  if ! apt-get download "$p" >/dev/null 2>&1; then
    echo "note: apt-get download $p failed (not in this release?); skipped" >&2
  fi
done
if [ "$UNPACK" = 1 ]; then for d in "$DIR"/debs/*.deb; do dpkg -x "$d" "$DIR/prefix"; done; fi

# the source tarball
cd "$SRC"
if [ ! -f Makefile ]; then ./bootstrap && ./configure --without-cuda; fi
make dist >/dev/null
cp dtrain-*.tar.gz "$DIR/"
cp tests/gpu/run-all.sh "$DIR/"
if [ -d /usr/share/datasets/fashion-mnist ]; then
  mkdir -p "$DIR/datasets" && cp -r /usr/share/datasets/fashion-mnist "$DIR/datasets/"
else
  echo "note: /usr/share/datasets/fashion-mnist not found; the GPU machine needs it (DTRAIN_DATA_PATH)" >&2
fi
chmod +x "$DIR/run-all.sh"
du -sh "$DIR"
echo "carry $DIR; on the GPU machine: bash run-all.sh --smoke, then bash run-all.sh"
