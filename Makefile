# Front door: `make run` and `make test` are all the set-up a fresh Debian machine needs.
BUILD ?= build
JOBS ?= $(shell nproc)
CMAKE_FLAGS ?= -DCMAKE_BUILD_TYPE=Release

.PHONY: all deps bench-deps fuzz-deps test-deps build run test test-asan test-tsan fuzz bench bench-cuda bench-remote bench-dist \
        install format clean

all: build

deps:
	@bash scripts/install_deps.sh

$(BUILD)/CMakeCache.txt: | deps
	cmake -S . -B $(BUILD) $(CMAKE_FLAGS)

build: deps $(BUILD)/CMakeCache.txt
	cmake --build $(BUILD) -j $(JOBS)

run: build
	./$(BUILD)/samples/pipeline_tour

# The Python packages the safetensors interop test compares with (best effort; it skips without).
test-deps:
	@bash scripts/install_test_deps.sh

test: build test-deps
	cd $(BUILD) && ctest --output-on-failure -j $(JOBS) --timeout 900

# `make test-asan`: the library, tests and the kernels they compile built with AddressSanitizer
# and UndefinedBehaviorSanitizer (a report fails the test); runs the unit suites (the cache,
# differential and fuzz-replay suites among them). `make test-tsan`: ThreadSanitizer on the
# suites that run threads (jit and eval from many threads, per-key cache locks). Each has a
# build tree and a kernel cache of its own. README "Sanitizers".
# -g1 (line tables, function names): all a sanitizer's stack trace prints, and a third less build
# time than -g (test_autograd.cc with ASan: 89 s against 57 s).
# The ASan build keeps -O1 for the library: its suites plan and generate hundreds of kernels, and
# they run the library's code. The TSan build runs 8 s of tests and the fuzz build a fixed time,
# so both compile at -O0 (a third less build time: api/jit_function.cc with ASan, 37 s at -O1
# against 25 s at -O0, 2026-11-29).
SAN_CMAKE_FLAGS = -DCMAKE_BUILD_TYPE=RelWithDebInfo -DCMAKE_CXX_FLAGS_RELWITHDEBINFO="$(SAN_OPT) -g1" \
                  -DMETAJIT_SAMPLES=OFF $(SAN_EXTRA_CMAKE_FLAGS)
SAN_OPT = -O1
# Not under ASan (make test runs them): test_autograd_random checks gradient values by finite
# differences (its three batches took 11 of the 23 CPU-minutes of the ASan tests, for kernels
# that test_autograd's backward cases, the differential batches and the fuzzers also run under
# ASan); test_remote_fleet coordinates fleets of processes through a redis-server (194 s under
# ASan; the remote tier's parsing of what it reads runs under ASan in test_remote_envelope,
# test_remote_faults, test_remote_poisoning and the envelope fuzzer); layering only compiles
# headers with -fsyntax-only; test_model_ops checks the composites' values and finite
# differences (39 CPU-s under ASan, 2026-11-29), while their host code runs under ASan and UBSan
# in the API fuzzer (its composite_op row), and its corpus's composites_* inputs run with
# ASan-compiled kernels in fuzz-replay:api_sequence here. test_precision's contractions on
# every vector width (24 s in make test) compile the float32 schedules' kernels three times
# over; its other cases run the half and 8-bit buffers under ASan.
ASAN_TESTS ?= -L '^(unit|slow|process|remote)$$' -E '^(test_autograd_random:|test_remote_fleet:|test_model_ops:|test_precision:half contractions|layering$$)'
# The differential batches under ASan: 12 random graphs each (make test runs 50), each of whose
# kernels is compiled with the sanitizers; kernel compiles are most of the ASan run's time (20
# until 2026-11-29, when the whole CI run reached 3650 s against its 60-minute goal).
ASAN_DIFF_GRAPHS ?= 12
# The distributed suite's mpirun cases under ASan and UBSan, their ranks built with them too, but
# without LeakSanitizer: OpenMPI 4.1 leaks what MPI_Init allocates (8 reports for a two-line
# MPI_Init/MPI_Finalize program), from plugins it has unloaded by then, so no suppression can
# name them. The in-process cases of the suite run with leak checks in the run above.
ASAN_MPI_TESTS ?= -L '^mpi$$'
TSAN_TESTS ?= -R '^test_(jit|runtime|cache_store):'
# Only the suites TSAN_TESTS runs are built (with the CLI and helper programs they start).
TSAN_TARGETS ?= test_jit test_runtime test_cache_store
test-asan: deps
	cmake -S . -B $(BUILD)-asan $(SAN_CMAKE_FLAGS) -DMETAJIT_SANITIZE=address,undefined
	cmake --build $(BUILD)-asan -j $(JOBS)
	cd $(BUILD)-asan && ASAN_OPTIONS=detect_leaks=1:detect_stack_use_after_return=1 \
	  UBSAN_OPTIONS=print_stacktrace=1 METAJIT_DIFF_GRAPHS=$(ASAN_DIFF_GRAPHS) \
	  ctest --output-on-failure -j $(JOBS) --timeout 1800 $(ASAN_TESTS)
	cd $(BUILD)-asan && ASAN_OPTIONS=detect_leaks=0:detect_stack_use_after_return=1 \
	  UBSAN_OPTIONS=print_stacktrace=1 ctest --output-on-failure -j $(JOBS) --timeout 1800 $(ASAN_MPI_TESTS)

test-tsan: SAN_OPT = -O0
test-tsan: deps
	cmake -S . -B $(BUILD)-tsan $(SAN_CMAKE_FLAGS) -DMETAJIT_SANITIZE=thread
	cmake --build $(BUILD)-tsan -j $(JOBS) --target $(TSAN_TARGETS)
	cd $(BUILD)-tsan && TSAN_OPTIONS=halt_on_error=1:second_deadlock_stack=1 \
	  ctest --output-on-failure -j $(JOBS) --timeout 1800 $(TSAN_TESTS)

# `make fuzz`: the libFuzzer targets (tests/fuzz/), built with clang, ASan and UBSan, each run
# for FUZZ_SECONDS from its seed corpus. README "Fuzzing".
FUZZ_SECONDS ?= 60
FUZZ_TARGETS ?=
fuzz-deps:
	@bash -c 'source scripts/apt_packages.sh && apt_install_missing "metajit fuzz" required clang-14 libclang-rt-14-dev'

fuzz: deps fuzz-deps
	cmake -S . -B $(BUILD)-fuzz -DCMAKE_CXX_COMPILER=clang++-14 -DCMAKE_BUILD_TYPE=RelWithDebInfo \
	  -DCMAKE_CXX_FLAGS_RELWITHDEBINFO="-O0 -g1" -DMETAJIT_FUZZ=ON -DMETAJIT_SAMPLES=OFF \
	  -DMETAJIT_SANITIZE=address,undefined
	cmake --build $(BUILD)-fuzz -j $(JOBS) --target metajit_fuzzers
	bash scripts/run_fuzzers.sh $(BUILD)-fuzz $(FUZZ_SECONDS) $(FUZZ_TARGETS)

# `make bench`: metajit against Halide, Eigen, OpenBLAS, hand loops (C++), then numpy, PyTorch,
# JAX, Jittor (bench/peers.py, whichever are installed), one JSON file. The bench's packages are
# installed here only: `make build` and `make test` never need them.
BENCH_JSON ?= bench/results.json
BENCH_ARGS ?=
# native, or avx2 / avx512 / portable: metajit's kernels and the peers that can be held to an
# ISA are measured on that path (make bench BENCH_TARGET=avx2 on an AVX-512 machine).
BENCH_TARGET ?= native
# Jittor 1.3 needs numpy<2 (JAX 0.10 needs numpy>=2): name an interpreter that has it to add
# Jittor's rows, e.g. make bench BENCH_JITTOR_PYTHON=~/jittor-venv/bin/python
BENCH_JITTOR_PYTHON ?=
bench-deps:
	@bash scripts/install_bench_deps.sh

# `make bench-remote`: the remote kernel cache on loopback (its own redis-server): a kernel from
# the remote vs from the local disk vs compiled, and warming an empty machine through the remote
# vs compiling (bench/remote_cache.sh; README "Sharing kernels across machines").
bench-remote: build
	cmake --build $(BUILD) -j $(JOBS) --target many_kernels_program
	bash bench/remote_cache.sh $(BUILD) 20 5

bench: deps bench-deps
	cmake -S . -B $(BUILD) $(CMAKE_FLAGS) -DMETAJIT_BENCH=ON
	cmake --build $(BUILD) -j $(JOBS) --target metajit_bench
	./$(BUILD)/bench/metajit_bench --json $(BENCH_JSON) --target $(BENCH_TARGET) $(BENCH_ARGS)
	@if command -v python3 >/dev/null 2>&1; then \
	  python3 bench/peers.py --json $(BENCH_JSON) --target $(BENCH_TARGET); \
	else echo "bench: python3 not found: Python peers skipped"; fi
	@if [ -n "$(BENCH_JITTOR_PYTHON)" ]; then \
	  $(BENCH_JITTOR_PYTHON) bench/peers.py --json $(BENCH_JSON) --frameworks jittor; fi

# `make bench-cuda`: the GPU benchmark (copy floor, SELU 256M, row/column sums 16384^2, matmul
# 4096^3 against cuBLAS, SELU and matmul in bfloat16) in one run; says it is skipped where no
# GPU can be used.
bench-cuda: build
	./$(BUILD)/metajit_cuda_bench --json bench/cuda_results.json

# `make bench-dist`: the distributed rows (metajit's all-reduce against MPI_Allreduce at 1, 16
# and 64 MB, the digits MLP and GPT steps on 1 and 2 ranks, PyTorch DDP's) in one run under
# mpirun (bench/dist_bench.sh).
bench-dist: build
	cmake -S . -B $(BUILD) $(CMAKE_FLAGS) -DMETAJIT_BENCH=ON
	cmake --build $(BUILD) -j $(JOBS) --target metajit_dist_bench train_digits train_gpt
	bash bench/dist_bench.sh $(BUILD)

install: build
	cmake --install $(BUILD) $(if $(PREFIX),--prefix $(PREFIX),)

format:
	clang-format -i $$(git ls-files '*.h' '*.cc')

clean:
	rm -rf $(BUILD) $(BUILD)-asan $(BUILD)-tsan $(BUILD)-fuzz
