# The two commands of the README: `make demo` and `make test`. Both run the same quick setup step first.
BUILD ?= build
CMAKE_FLAGS ?=
JOBS ?= $(shell nproc)

.PHONY: all setup configure build test demo test-sanitize test-asan test-tsan fuzz-smoke fuzz clean

all: build

setup:
	@tools/setup.sh

configure: setup
	@cmake -S . -B $(BUILD) -G Ninja -DCMAKE_BUILD_TYPE=Release $(CMAKE_FLAGS) >/dev/null

build: configure
	@cmake --build $(BUILD) -j $(JOBS)

test: build
	@ctest --test-dir $(BUILD) --output-on-failure -j $(JOBS)

demo: build
	@$(BUILD)/qlinear demo

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
	rm -rf build build-sanitize build-tsan build-fuzz

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
