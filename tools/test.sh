#!/usr/bin/env bash
# Installs what is missing, builds, and runs the whole test suite twice: a Release build, then a
# build under AddressSanitizer + UndefinedBehaviorSanitizer.
#
#   ./tools/test.sh                      # everything (what CI runs)
#   EMBEDRT_SANITIZE=0 ./tools/test.sh   # Release build only, for a quick local loop
#   EMBEDRT_SANITIZE=thread ./tools/test.sh   # Release, then ThreadSanitizer instead of ASan+UBSan
#   EMBEDRT_TSAN=0 ./tools/test.sh       # skip the ThreadSanitizer pass over the unit tests
#   EMBEDRT_FUZZ=0 ./tools/test.sh       # skip the bounded libFuzzer run (FUZZ_SECONDS per target, default 15)
#   EMBEDRT_PYTHON=0 ./tools/test.sh     # skip the Python package (built with pip, tested with pytest)
set -euo pipefail
cd "$(dirname "$0")/.."
./tools/install-deps.sh

jobs=$(nproc)
started=$SECONDS
stage() { printf '==> [%dm%02ds] %s\n' $(((SECONDS - started) / 60)) $(((SECONDS - started) % 60)) "$*"; }
run_suite() {  # run_suite BUILD_DIR [cmake args...]
  local dir=$1
  shift
  stage "configure $dir $*"
  cmake -S . -B "$dir" -G Ninja "$@" >/dev/null
  stage "build $dir"
  cmake --build "$dir" --parallel "$jobs"
  stage "test $dir"
  ctest --test-dir "$dir" --output-on-failure --parallel "$jobs"
}

# Warnings are errors in the main build (cmake/Warnings.cmake); the sanitizer and fuzz builds
# keep them as warnings, since their instrumentation makes GCC and clang warn differently.
run_suite build/release -DCMAKE_BUILD_TYPE=Release -DEMBEDRT_WERROR=ON

# The Python package (pyproject.toml), built once into a wheel (warnings as errors) and tested
# twice: in build/python-venv without torch, and in the torch + transformers venv of
# tools/setup-hf-venv.sh (DLPack with torch tensors, embedrt.torch, the transformers example).
# A skipped test fails the run (tests/python_package/conftest.py).
if [ "${EMBEDRT_PYTHON:-1}" != 0 ]; then
  hf_venv=${EMBEDRT_HF_VENV:-$PWD/build/hf-venv}
  ./tools/setup-hf-venv.sh
  ./tools/setup-python-venv.sh --also "$hf_venv"
  export EMBEDRT_CLI=$PWD/build/release/tools/embedrt
  stage "pytest tests/python_package (without torch)"
  "${EMBEDRT_PYTHON_VENV:-build/python-venv}/bin/python" -m pytest -q -p no:cacheprovider tests/python_package -m "not torch"
  stage "pytest tests/python_package (torch, transformers)"
  ./tools/setup-hf-venv.sh --run -m pytest -q -p no:cacheprovider tests/python_package -m torch
fi

sanitizers=${EMBEDRT_SANITIZE:-address,undefined}
export TSAN_OPTIONS="suppressions=$PWD/tests/tsan.supp halt_on_error=1 ${TSAN_OPTIONS:-}"
export UBSAN_OPTIONS="print_stacktrace=1 ${UBSAN_OPTIONS:-}"
# The sanitizer and fuzz builds only ever run here, so they compile only the kernel units this
# machine can run (EMBEDRT_ISAS=host, cmake/KernelIsas.cmake): tests skip the units a CPU cannot run
# anyway, and GCC took over 20 minutes per instrumented AVX-512 unit on a 2-core AMD EPYC. The
# sanitizer suite is built by clang: GCC 12 took 956 s to compile the AVX2 kernel unit with ASan +
# UBSan, clang 14 188 s (and it is a second compiler's view of the code); a ThreadSanitizer-only
# suite stays with GCC, as the TSan pass below (83 s for that unit). Benchmarks are not tests; they
# are skipped under sanitizers.
# The fuzz targets need exactly the ASan + UBSan suite's clang build plus coverage instrumentation
# (-fsanitize=fuzzer-no-link, which the suite runs unharmed: the sanitizer runtime answers the
# coverage callbacks), so that suite builds them too and tools/fuzz.sh runs them from its directory
# rather than compiling every kernel unit once more (about 14 minutes on a 2-core AMD EPYC).
fuzz_build=
if [ "$sanitizers" != 0 ]; then
  if [ "$sanitizers" = thread ]; then cc=gcc cxx=g++; else cc=clang cxx=clang++; fi
  suite_dir="build/sanitize-${sanitizers//,/-}"
  fuzz_flags=()
  if [ "${EMBEDRT_FUZZ:-1}" != 0 ] && [ "$sanitizers" = address,undefined ]; then
    fuzz_flags=(-DEMBEDRT_BUILD_FUZZERS=ON)
    fuzz_build=$suite_dir
  fi
  # Neither sanitizer build compiles the L2-prefetch kernel sets (EMBEDRT_PREFETCH_L2_KERNELS): the
  # same code as the L1 sets but for one instruction and two plan choices (kPrefetchesIntoL2: block
  # passes the L1 sets run too, and AVX-512's stage of wide int8 rows, which its L1 sets run for
  # int4 rows), they would double the kernel units' compile time; the Release build tests them.
  # CMakeLists.txt's EMBEDRT_SANITIZE block outlines ASan's checks and keeps only line tables, which
  # halves the kernel units' compile here and in tools/fuzz.sh's own build.
  CC=$cc CXX=$cxx run_suite "$suite_dir" -DCMAKE_BUILD_TYPE=RelWithDebInfo \
    -DEMBEDRT_SANITIZE="$sanitizers" -DEMBEDRT_ISAS=host -DEMBEDRT_PREFETCH_L2_KERNELS=OFF \
    -DEMBEDRT_BUILD_BENCHMARKS=OFF "${fuzz_flags[@]}"
fi
# ThreadSanitizer over the unit tests (concurrency, kernels, everything in embedrt_tests); see
# tests/tsan.supp for why libtbb needs suppressions and how the gap is covered.
if [ "${EMBEDRT_TSAN:-1}" != 0 ] && [ "$sanitizers" != thread ]; then
  stage "build build/sanitize-thread"
  cmake -S . -B build/sanitize-thread -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo -DEMBEDRT_SANITIZE=thread \
    -DEMBEDRT_ISAS=host -DEMBEDRT_PREFETCH_L2_KERNELS=OFF -DEMBEDRT_BUILD_BENCHMARKS=OFF -DEMBEDRT_BUILD_TOOLS=OFF >/dev/null
  cmake --build build/sanitize-thread --parallel "$jobs" --target embedrt_tests
  stage "test build/sanitize-thread (embedrt_tests under ThreadSanitizer)"
  ./build/sanitize-thread/tests/embedrt_tests
fi

if [ "${EMBEDRT_FUZZ:-1}" != 0 ]; then
  stage "fuzz (tools/fuzz.sh, ${FUZZ_SECONDS:-15}s per target)"
  EMBEDRT_FUZZ_BUILD=$fuzz_build FUZZ_SECONDS=${FUZZ_SECONDS:-15} ./tools/fuzz.sh
fi
stage "all tests passed"
