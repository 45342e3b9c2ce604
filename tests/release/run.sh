#!/bin/sh
# Builds the whole tree as a Release build (-O3, where GCC finds warnings
# that -O2 does not) with warnings as errors, in a tree of its own, and runs
# the C unit tests there: a Release build that fails fails CI.
#   tests/release/run.sh SOURCE_DIR BUILD_DIR
set -eu
src=$1
build=$2
cmake -S "$src" -B "$build" -DCMAKE_BUILD_TYPE=Release -DCTXD_WERROR=ON \
    -DCTXD_ASAN_TESTS=OFF -DCTXD_FUZZ_SMOKE=OFF >/dev/null
cmake --build "$build" -j2 >/dev/null # the compiler's messages stay (stderr)
cd "$build"
exec ctest -R '^unit_' --output-on-failure
