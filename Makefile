# Front door: `make run` and `make test` are all the set-up a fresh Debian machine needs.
BUILD ?= build
JOBS ?= $(shell nproc)
CMAKE_FLAGS ?= -DCMAKE_BUILD_TYPE=Release

.PHONY: all deps build run test bench install format clean

all: build

deps:
	@bash scripts/install_deps.sh

$(BUILD)/CMakeCache.txt: | deps
	cmake -S . -B $(BUILD) $(CMAKE_FLAGS)

build: deps $(BUILD)/CMakeCache.txt
	cmake --build $(BUILD) -j $(JOBS)

run: build
	./$(BUILD)/samples/pipeline_tour

test: build
	cd $(BUILD) && ctest --output-on-failure -j $(JOBS) --timeout 900

bench: deps
	cmake -S . -B $(BUILD) $(CMAKE_FLAGS) -DMETAJIT_BENCH=ON
	cmake --build $(BUILD) -j $(JOBS) --target metajit_bench
	./$(BUILD)/bench/metajit_bench

install: build
	cmake --install $(BUILD) $(if $(PREFIX),--prefix $(PREFIX),)

format:
	clang-format -i $$(git ls-files '*.h' '*.cc')

clean:
	rm -rf $(BUILD)
