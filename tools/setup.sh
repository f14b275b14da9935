#!/usr/bin/env bash
# Installs what qlinear's build and tests need on a fresh Debian 12 machine; quick when all is there.
# Debian packages: the compiler toolchain, GoogleTest, nlohmann-json, RE2 (name patterns), time (test-scale),
# ccache, OpenMP, Python's headers and venv; oneDNN (the CPU anchors of `qlinear bench --compare`) and Chromium
# (the test that renders its HTML report).
# Python packages: ml_dtypes and numpy, the independent oracles the format and quantizer tests are
# generated from (tools/gen_*.py), so `make test` can re-derive the committed tables; nanobind (the Python
# extension's bindings, python/), scikit-build-core (`pip install .`) and pytest (tests/python); PyTorch for
# the PyTorch tests (tests/python/test_torch*.py: QuantLinear, calibration, checkpoints loaded into a model).
# PyPI's Linux torch wheel brings its CUDA libraries: about 5.4 GB installed, 5.5 minutes measured on the project's
# Debian machines (2 cores), once per machine (then skipped). QLINEAR_SKIP_TORCH=1 leaves it out (those tests
# then skip with their reason).
set -euo pipefail

debs=(cmake g++ make ninja-build libgtest-dev nlohmann-json3-dev libre2-dev time ccache libomp-dev clang libclang-rt-14-dev
      python3 python3-dev python3-pip python3-venv libdnnl-dev chromium)
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
# module name to import -> PyPI name
py_missing=()
py_wanted="ml_dtypes:ml_dtypes numpy:numpy nanobind:nanobind scikit_build_core:scikit-build-core pytest:pytest"
[ "${QLINEAR_SKIP_TORCH:-0}" = "1" ] || py_wanted+=" torch:torch"
for pair in $py_wanted; do
  "$PYTHON" -c "import ${pair%%:*}" 2>/dev/null || py_missing+=("${pair##*:}")
done
if [ ${#py_missing[@]} -gt 0 ]; then
  echo "setup: installing Python packages: ${py_missing[*]}"
  # Debian's own python3 refuses plain pip installs (PEP 668); a pyenv or venv python takes them.
  "$PYTHON" -m pip install --quiet "${py_missing[@]}" 2>/dev/null \
    || "$PYTHON" -m pip install --quiet --break-system-packages "${py_missing[@]}"
fi
