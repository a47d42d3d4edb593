# Every dependency comes from a Debian package (tools/install-deps.sh installs them).

find_package(TBB REQUIRED)

# xsimd 8.1's exported target names an `xtl` library that is not installed (see
# shared/notes/xsimd-8.1.md); use its headers through a target of our own instead.
find_package(xsimd REQUIRED)
if(xsimd_VERSION VERSION_LESS 8.1)
  message(FATAL_ERROR "xsimd 8.1 or newer is required, found ${xsimd_VERSION}")
endif()
get_target_property(EMBEDRT_XSIMD_INCLUDE_DIRS xsimd INTERFACE_INCLUDE_DIRECTORIES)
if(NOT TARGET embedrt_xsimd)
  add_library(embedrt_xsimd INTERFACE)
  target_include_directories(embedrt_xsimd SYSTEM INTERFACE ${EMBEDRT_XSIMD_INCLUDE_DIRS})
  if(EMBEDRT_INSTALL)
    install(TARGETS embedrt_xsimd EXPORT embedrtTargets)
  endif()
endif()

# xxHash is used header-only (XXH_INLINE_ALL), so the library has nothing to link for it.
find_path(EMBEDRT_XXHASH_INCLUDE_DIR xxhash.h REQUIRED)

if(EMBEDRT_BUILD_IMPORT OR EMBEDRT_BUILD_TOOLS OR EMBEDRT_BUILD_FUZZERS OR EMBEDRT_BUILD_PYTHON)
  find_package(nlohmann_json 3.10 REQUIRED)
endif()
if(EMBEDRT_BUILD_TOOLS)
  find_package(CLI11 REQUIRED)
endif()
if(EMBEDRT_BUILD_TESTS)
  find_package(doctest REQUIRED)
endif()
if(EMBEDRT_BUILD_BENCHMARKS)
  find_package(benchmark REQUIRED)
endif()
