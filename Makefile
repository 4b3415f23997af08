# Thin wrapper: CMake does the real work.  Each target first installs the
# Debian packages that are missing, so a fresh Debian 12 machine needs
# nothing else.
BUILD_DIR ?= build
CMAKE_FLAGS ?=
JOBS ?= 2
RUN_FLAGS ?=
# ctest runs 4 suites at a time on 2 cores: most of a suite is waiting
# (services starting, training to a target), and the suites that share
# something hold a lock (CMakeLists.txt).  CTEST_FLAGS=-j1 runs them one by one.
CTEST_FLAGS ?= -j 4

.PHONY: all deps test-deps build run test sanitize clean

all: build

deps:
	@bash deploy/install-deps.sh

test-deps:
	@bash deploy/install-deps.sh test

build: deps
	cmake -S . -B $(BUILD_DIR) $(CMAKE_FLAGS)
	cmake --build $(BUILD_DIR) -j $(JOBS)

run: build
	$(BUILD_DIR)/kudus local --summary $(BUILD_DIR)/summary.json $(RUN_FLAGS)

test: test-deps build
	cd $(BUILD_DIR) && ctest --output-on-failure $(CTEST_FLAGS)

sanitize:
	$(MAKE) test BUILD_DIR=build-asan CMAKE_FLAGS=-DKUDUS_SANITIZE=ON

clean:
	rm -rf $(BUILD_DIR) build-asan
