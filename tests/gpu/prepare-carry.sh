#!/usr/bin/env bash
# tests/gpu/prepare-carry.sh - makes an offline bundle for building and testing dtrain's GPU
# backend on a machine that has an NVIDIA GPU with CUDA/cuDNN, gcc and make, but perhaps neither
# dtrain's other build dependencies (libyaml, jansson, OpenBLAS, Open MPI, Check) nor access to a
# package registry. Run it on a Debian machine with apt and the build dependencies; copy the
# folder it makes to the GPU machine and run run-all.sh there (see the README, "GPU").
# The folder holds:
#   dtrain-*.tar.gz   `make dist` of this tree (configured without CUDA is fine)
#   debs/*.deb        apt-get download of the libraries and their -dev packages
#   prefix/           the same, dpkg -x'ed, only with --unpack (run-all.sh unpacks the .debs
#                     itself with ar + tar when it is absent, so the bundle stays ~55 MB)
#   datasets/         fashion-mnist (from /usr/share/datasets) for models/cnn.yaml, lstm.yaml
#   run-all.sh        tests/gpu/run-all.sh
# Usage: tests/gpu/prepare-carry.sh [--unpack] [DIR]
# DIR defaults to gpu-carry/ in the build tree: the current directory when it is a configured
# dtrain build tree, else the source tree (configured there first when it is not yet).
set -eu
UNPACK=0
if [ "${1:-}" = --unpack ]; then UNPACK=1; shift; fi
SRC=$(cd "$(dirname "$0")/../.." && pwd)
BUILD=$SRC
if [ -f Makefile ] && grep -q '^PACKAGE = dtrain$' Makefile; then BUILD=$(pwd); fi
DIR=${1:-$BUILD/gpu-carry}
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
cd "$BUILD"
if [ ! -f Makefile ]; then ./bootstrap && ./configure --without-cuda; fi
make dist >/dev/null
cp dtrain-*.tar.gz "$DIR/"
cp "$SRC/tests/gpu/run-all.sh" "$DIR/"
if [ -d /usr/share/datasets/fashion-mnist ]; then
  mkdir -p "$DIR/datasets" && cp -r /usr/share/datasets/fashion-mnist "$DIR/datasets/"
else
  echo "note: /usr/share/datasets/fashion-mnist not found; the GPU machine needs it (DTRAIN_DATA_PATH)" >&2
fi
chmod +x "$DIR/run-all.sh"
du -sh "$DIR"
echo "bundle in $DIR; copy it to the GPU machine and run there: bash run-all.sh --smoke, then bash run-all.sh"
