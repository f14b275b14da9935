#!/usr/bin/env bash
# Builds qlinear on a GPU host that has CUDA, CMake, ninja and Python but no package registry: the Debian
# packages the build needs besides those (GoogleTest, nlohmann-json, RE2) are fetched on a Debian 12
# machine that has one, carried along, and unpacked into a prefix on the GPU host (not into /).
#
#   tools/gpu_host_deps.sh fetch DIR                  # on the Debian machine: the .deb files into DIR
#   tools/gpu_host_deps.sh build DIR BUILD_DIR [CMAKE_ARGS...]
#                                                     # on the GPU host: unpack DIR into /tmp/qlinear-deps,
#                                                     # configure BUILD_DIR with QLINEAR_CUDA=ON and build it
# Programs built that way find libre2 through LD_LIBRARY_PATH; the build step prints the line to export.
set -euo pipefail
debs=(libgtest-dev nlohmann-json3-dev libre2-dev libre2-9)
prefix=/tmp/qlinear-deps
case ${1:-} in
fetch)
  dir=${2:?usage: tools/gpu_host_deps.sh fetch DIR}
  mkdir -p "$dir"
  (cd "$dir" && apt-get download "${debs[@]}")
  ls -l "$dir"
  ;;
build)
  dir=${2:?usage: tools/gpu_host_deps.sh build DIR BUILD_DIR [CMAKE_ARGS...]}
  build=${3:?usage: tools/gpu_host_deps.sh build DIR BUILD_DIR [CMAKE_ARGS...]}
  shift 3
  if [ ! -f "$prefix/.unpacked" ]; then
    mkdir -p "$prefix"
    for f in "$dir"/*.deb; do dpkg -x "$f" "$prefix"; done
    touch "$prefix/.unpacked"
  fi
  lib=$prefix/usr/lib/x86_64-linux-gnu
  export LD_LIBRARY_PATH=$lib:${LD_LIBRARY_PATH:-}
  mkdir -p "$build"
  cmake -S . -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=Release -DQLINEAR_CUDA=ON -DCMAKE_PREFIX_PATH="$prefix/usr" \
    -DRE2_INCLUDE_DIR="$prefix/usr/include" -DRE2_LIBRARY="$lib/libre2.so" \
    -DPython_EXECUTABLE="$(command -v python3)" "$@" >"$build/configure.log" 2>&1 ||
    { tail -n 30 "$build/configure.log"; exit 1; }
  cmake --build "$build" -j "$(nproc)"
  echo "export LD_LIBRARY_PATH=$lib:\$LD_LIBRARY_PATH"
  ;;
*)
  sed -n '2,10p' "$0"
  exit 2
  ;;
esac
