# SPDX-License-Identifier: Apache-2.0
# Entry points. Each target installs missing Debian packages first, so a fresh
# Debian 12 machine needs nothing but `make test` (or `make demo`).
#   make test   build and run the whole suite (ctest)
#   make asan   the same under AddressSanitizer + UndefinedBehaviorSanitizer
#   make demo   the CPR comparison: a DLRM trained under one injected failure
#               schedule with full, partial, MFU, SSU and TOPK_NORM recovery
#               against ckptd (scripts/demo.sh; DATA=/path/to/train.txt optional)
#   make demo-store  the store against the raw disk (scripts/demo-store.sh)
#   make bench  full-size store benchmark, JSON on stdout
BUILD      ?= build
ASAN_BUILD ?= build-asan
CPR_CUDA   ?= AUTO
JOBS       ?= $(shell nproc 2>/dev/null || echo 2)
CMAKE_ARGS ?=

.PHONY: all deps build test asan demo demo-store bench clean

all: build

deps:
	@deploy/install-deps.sh

build: deps
	cmake -S . -B $(BUILD) -DCMAKE_BUILD_TYPE=RelWithDebInfo -DCPR_CUDA=$(CPR_CUDA) $(CMAKE_ARGS)
	cmake --build $(BUILD) -j $(JOBS)

test: build
	ctest --test-dir $(BUILD) --output-on-failure -j $(JOBS)

asan: deps
	cmake -S . -B $(ASAN_BUILD) -DCMAKE_BUILD_TYPE=Debug -DCPR_SANITIZE=ON -DCPR_CUDA=$(CPR_CUDA) $(CMAKE_ARGS)
	cmake --build $(ASAN_BUILD) -j $(JOBS)
	ASAN_OPTIONS=detect_leaks=1:abort_on_error=1 UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1 \
	  LSAN_OPTIONS=suppressions=$(CURDIR)/tests/lsan.supp \
	  ctest --test-dir $(ASAN_BUILD) --output-on-failure -j $(JOBS)

demo: build
	@scripts/demo.sh $(BUILD) $(DATA)

demo-store: build
	@scripts/demo-store.sh $(BUILD)

bench: build
	$(BUILD)/tools/cpr-bench store --json

clean:
	rm -rf $(BUILD) $(ASAN_BUILD)
