# The two commands of the README: `make demo` and `make test`. Both run the same quick setup step first.
BUILD ?= build
CMAKE_FLAGS ?=
JOBS ?= $(shell nproc)
PYTHON ?= python3

.PHONY: all setup configure build test demo test-sanitize test-asan test-tsan fuzz-smoke fuzz clean test-python test-pip test-scale test-scale-ci

all: build

setup:
	@tools/setup.sh

configure: setup
	@cmake -S . -B $(BUILD) -G Ninja -DCMAKE_BUILD_TYPE=Release \
	  -DPython_EXECUTABLE="$$($(PYTHON) -c 'import sys; print(sys.executable)')" $(CMAKE_FLAGS) >/dev/null

build: configure
	@cmake --build $(BUILD) -j $(JOBS)

test: build
	@ctest --test-dir $(BUILD) --output-on-failure -j $(JOBS)

demo: build
	@$(BUILD)/qlinear demo

# The scale test (tools/test_scale.sh): a Llama-3.1-8B-shaped BF16 model (32 layers, 16 GB, in build/scale),
# quantized to w8a16-fp8 and w4a16-mxfp4, inspected and run; time, GB/s and peak RSS per step. CI runs 2 layers.
SCALE_LAYERS ?= 32
test-scale: configure
	@cmake --build $(BUILD) --target qlinear_cli -j $(JOBS)
	@QLINEAR=$(BUILD)/qlinear tools/test_scale.sh $(SCALE_LAYERS) $(BUILD)/scale
	@rm -rf $(BUILD)/scale

test-scale-ci:
	@SCALE_VOCAB=32000 $(MAKE) --no-print-directory test-scale SCALE_LAYERS=2

# The Python package alone (part of `make test`): the extension built next to the library, then pytest.
test-python: configure
	@cmake --build $(BUILD) --target qlinear_python qlinear_cli -j $(JOBS)
	@PYTHONPATH=$(BUILD)/python QLINEAR_CLI=$(BUILD)/qlinear $(PYTHON) -m pytest -q -p no:cacheprovider tests/python

# `pip install .` as a user runs it (a fresh virtual environment, CPU only), then the Python tests against it.
test-pip: setup
	@rm -rf build-pip && $(PYTHON) -m venv build-pip/venv
	@build-pip/venv/bin/pip install --quiet . -Ccmake.define.QLINEAR_CUDA=OFF -Cbuild-dir=build-pip/cmake
	@build-pip/venv/bin/pip install --quiet pytest ml_dtypes
	@cd build-pip && venv/bin/python -m pytest -q -p no:cacheprovider ../tests/python

# Sanitizers (docs/RELIABILITY.md): the whole suite under ASan+UBSan, then the concurrency tests under TSan.
test-sanitize: test-asan test-tsan

test-asan:
	@$(MAKE) test BUILD=build-sanitize CMAKE_FLAGS="-DQLINEAR_SANITIZE=ON -DQLINEAR_CUDA=OFF"

# OMP_NUM_THREADS=1: the races TSan reports are then between the tests' threads, not inside the
# uninstrumented OpenMP runtime (whose barriers it cannot see).
test-tsan: setup
	@cmake -S . -B build-tsan -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo -DQLINEAR_TSAN=ON -DQLINEAR_CUDA=OFF >/dev/null
	@cmake --build build-tsan --target test_reliability -j $(JOBS)
	@OMP_NUM_THREADS=1 TSAN_OPTIONS="halt_on_error=1 second_deadlock_stack=1" \
	  build-tsan/tests/test_reliability --gtest_filter='Concurrency.*'

# libFuzzer targets (fuzz/): a bounded run of each, and the long campaign (FUZZ_SECONDS per target).
FUZZ_SMOKE_SECONDS ?= 20
FUZZ_SECONDS ?= 600
fuzz-smoke: setup
	@FUZZ_JOBS=$(JOBS) fuzz/run.sh smoke $(FUZZ_SMOKE_SECONDS)

fuzz: setup
	@FUZZ_JOBS=$(JOBS) FUZZ_NICE=10 fuzz/run.sh campaign $(FUZZ_SECONDS)

clean:
	rm -rf build build-sanitize build-tsan build-fuzz build-pip build-gpu-python

# On a machine with an sm_90 GPU: the CUDA and tensor-parallel tests, then the GPU benchmarks (tests/cuda/,
# tests/tp/; they skip without a GPU, the TP ones without 2).
.PHONY: test-gpu
test-gpu:
	@cmake -S . -B build-gpu -G Ninja -DCMAKE_BUILD_TYPE=Release -DQLINEAR_CUDA=ON $(CMAKE_FLAGS) >/dev/null
	@cmake --build build-gpu --target test_cuda test_tp qlinear_cli -j $(JOBS)
	@build-gpu/tests/test_cuda
	@build-gpu/tests/test_tp
	@build-gpu/tests/test_cuda --gtest_also_run_disabled_tests --gtest_filter='CudaBench.*'
	@build-gpu/tests/test_tp --gtest_also_run_disabled_tests --gtest_filter='TensorParallelBench.*'

# On a machine with an sm_90 GPU and PyTorch: the Python tests with the CUDA backend (tests/python/test_torch.py
# runs its CUDA tests there). Builds only the library and the extension (no GoogleTest needed).
.PHONY: test-gpu-python
test-gpu-python:
	@cmake -S . -B build-gpu-python -G Ninja -DCMAKE_BUILD_TYPE=Release -DQLINEAR_CUDA=ON -DQLINEAR_PYTHON=ON \
	  -DQLINEAR_BUILD_TESTS=OFF -DQLINEAR_BUILD_CLI=OFF \
	  -DPython_EXECUTABLE="$$($(PYTHON) -c 'import sys; print(sys.executable)')" $(CMAKE_FLAGS) >/dev/null
	@cmake --build build-gpu-python --target qlinear_python -j $(JOBS)
	@PYTHONPATH=build-gpu-python/python $(PYTHON) -m pytest -q -rs -p no:cacheprovider tests/python
