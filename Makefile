# The two commands of the README: `make demo` and `make test`. Both run the same quick setup step first.
BUILD ?= build
CMAKE_FLAGS ?=
JOBS ?= $(shell nproc)

.PHONY: all setup configure build test demo test-sanitize clean

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

test-sanitize:
	@$(MAKE) test BUILD=build-sanitize CMAKE_FLAGS="-DQLINEAR_SANITIZE=ON -DQLINEAR_CUDA=OFF"

clean:
	rm -rf build build-sanitize

# On a machine with an sm_90 GPU: the CUDA tests, then the GPU benchmark (tests/cuda/; they skip without one).
.PHONY: test-gpu
test-gpu:
	@cmake -S . -B build-gpu -G Ninja -DCMAKE_BUILD_TYPE=Release -DQLINEAR_CUDA=ON $(CMAKE_FLAGS) >/dev/null
	@cmake --build build-gpu --target test_cuda -j $(JOBS)
	@build-gpu/tests/test_cuda
	@build-gpu/tests/test_cuda --gtest_also_run_disabled_tests --gtest_filter='CudaBench.*'
