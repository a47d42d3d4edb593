# Every dependency comes from a Debian package (tools/install-deps.sh installs them).

# xxHash is used header-only (XXH_INLINE_ALL), so the library has nothing to link for it.
find_path(EMBEDRT_XXHASH_INCLUDE_DIR xxhash.h REQUIRED)

if(EMBEDRT_BUILD_TOOLS OR EMBEDRT_BUILD_FUZZERS)
  find_package(CLI11 REQUIRED)
  find_package(nlohmann_json 3.10 REQUIRED)
endif()
if(EMBEDRT_BUILD_TESTS)
  find_package(doctest REQUIRED)
endif()
if(EMBEDRT_BUILD_BENCHMARKS)
  find_package(benchmark REQUIRED)
endif()
