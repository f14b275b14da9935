#!/usr/bin/env bash
# Installs what qlinear's build and tests need on a fresh Debian 12 machine; quick when all is there.
# Debian packages: the compiler toolchain, GoogleTest, nlohmann-json, ccache, OpenMP.
# Python packages: ml_dtypes and numpy, the independent oracles the format and quantizer tests are
# generated from (tools/gen_*.py), so `make test` can re-derive the committed tables.
set -euo pipefail

debs=(cmake g++ make ninja-build libgtest-dev nlohmann-json3-dev ccache libomp-dev python3 clang libclang-rt-14-dev)
missing=()
for p in "${debs[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [ ${#missing[@]} -gt 0 ]; then
  echo "setup: installing Debian packages: ${missing[*]}"
  sudo_cmd=""
  [ "$(id -u)" -eq 0 ] || sudo_cmd="sudo"
  $sudo_cmd apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $sudo_cmd apt-get install -y -qq "${missing[@]}" >/dev/null
fi

PYTHON=${PYTHON:-python3}
if ! "$PYTHON" -c "import ml_dtypes, numpy" 2>/dev/null; then
  echo "setup: installing Python packages: ml_dtypes numpy"
  "$PYTHON" -m pip install --quiet ml_dtypes numpy 2>/dev/null \
    || "$PYTHON" -m pip install --quiet --break-system-packages ml_dtypes numpy
fi
