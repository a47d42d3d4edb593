# One set of warnings for every target of the project (library, importer, tools, tests,
# benchmarks, fuzzers), linked as a build-only interface so installed targets carry none of it.
# EMBEDRT_WERROR turns them into errors; tools/test.sh (and so CI) sets it.
option(EMBEDRT_WERROR "Treat warnings as errors" OFF)
add_library(embedrt_warnings INTERFACE)
target_compile_options(embedrt_warnings INTERFACE
  -Wall -Wextra -Wpedantic -Wshadow -Wconversion -Wno-sign-conversion
  # Designated initializers name only the fields they set; the rest take their defaults.
  -Wno-missing-field-initializers
  # GCC 12's libstdc++ std::string trips its own -Wrestrict (GCC bug 105329), in code we do not own.
  $<$<AND:$<CXX_COMPILER_ID:GNU>,$<VERSION_GREATER_EQUAL:$<CXX_COMPILER_VERSION>,12>>:-Wno-restrict>
  $<$<BOOL:${EMBEDRT_WERROR}>:-Werror>)
