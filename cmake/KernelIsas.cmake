# Which kernel builds to compile, read from runtime/kernels/isa_table.def (the table runtime/isa.cpp
# detects from). Sets, for runtime/, tools/ and tests/:
#   EMBEDRT_KERNEL_UNITS         the units compiled besides scalar, e.g. "sse42;avx2"
#   EMBEDRT_KERNEL_FLAGS_<unit>  a unit's -m flags
#   EMBEDRT_BUILT_DEFINITIONS    EMBEDRT_BUILT_<unit>=0|1 for every row, so code can leave out an absent unit,
#                                and EMBEDRT_PREFETCH_L2_KERNELS=0|1 (below)
#
# EMBEDRT_ISAS=all (the default) compiles every unit: a library that runs at its best on any
# x86-64. EMBEDRT_ISAS=host compiles only the units this machine can run, for builds that only ever
# run here: tools/test.sh's sanitizer and fuzz builds, whose instrumented AVX-512 units take over
# 20 minutes each to compile on a CPU that could never execute them. A library built that way
# reports the missing ISAs as not built (isa_built) and never chooses them.
set(EMBEDRT_ISAS "all" CACHE STRING "Kernel builds to compile: all, or host (only those this machine can run)")
set_property(CACHE EMBEDRT_ISAS PROPERTY STRINGS all host)

if(EMBEDRT_ISAS STREQUAL "host")
  # The kernel's flags as Linux spells them in /proc/cpuinfo, which lists only what the CPU has and
  # the OS enabled (no AVX-512 flags without the OS saving ZMM state).
  file(STRINGS /proc/cpuinfo _embedrt_cpu_flags REGEX "^flags[ \t]*:" LIMIT_COUNT 1)
  if(NOT _embedrt_cpu_flags)
    message(FATAL_ERROR "EMBEDRT_ISAS=host: no 'flags' line in /proc/cpuinfo to tell what this CPU runs; use EMBEDRT_ISAS=all")
  endif()
  string(REGEX REPLACE "^flags[ \t]*:" "" _embedrt_cpu_flags "${_embedrt_cpu_flags}")
  separate_arguments(_embedrt_cpu_flags UNIX_COMMAND "${_embedrt_cpu_flags}")
elseif(NOT EMBEDRT_ISAS STREQUAL "all")
  message(FATAL_ERROR "EMBEDRT_ISAS='${EMBEDRT_ISAS}': expected all or host")
endif()

set(EMBEDRT_KERNEL_UNITS)
set(EMBEDRT_BUILT_DEFINITIONS)
file(STRINGS ${PROJECT_SOURCE_DIR}/runtime/kernels/isa_table.def _embedrt_isa_rows REGEX "^EMBEDRT_ISA_ROW\\(")
foreach(_row IN LISTS _embedrt_isa_rows)
  if(NOT _row MATCHES "^EMBEDRT_ISA_ROW\\([A-Za-z0-9]+, *([a-z0-9]+), *\"([^\"]*)\"\\)")
    message(FATAL_ERROR "runtime/kernels/isa_table.def: cannot read row '${_row}'")
  endif()
  set(_unit ${CMAKE_MATCH_1})
  string(REPLACE " " ";" _features "${CMAKE_MATCH_2}")
  set(_built 1)
  if(EMBEDRT_ISAS STREQUAL "host")
    foreach(_feature IN LISTS _features)
      string(REPLACE "." "_" _cpuinfo_name "${_feature}")                   # sse4.2 -> sse4_2
      string(REPLACE "avx512bf16" "avx512_bf16" _cpuinfo_name "${_cpuinfo_name}")
      if(NOT _cpuinfo_name IN_LIST _embedrt_cpu_flags)
        set(_built 0)
      endif()
    endforeach()
  endif()
  list(TRANSFORM _features PREPEND "-m")
  set(EMBEDRT_KERNEL_FLAGS_${_unit} "${_features}")
  list(APPEND EMBEDRT_BUILT_DEFINITIONS "EMBEDRT_BUILT_${_unit}=${_built}")
  if(_built)
    list(APPEND EMBEDRT_KERNEL_UNITS ${_unit})
  endif()
endforeach()

# The AVX2 and AVX-512 units also compile their kernels with every prefetch into L2 only, for
# PrefetchLevel::kL2 (runtime/kernels/prefetch_l2_kernels.inl), which doubles their compile time.
# OFF: that level prefetches into L1 like the default (tools/test.sh's sanitizer builds).
option(EMBEDRT_PREFETCH_L2_KERNELS "Compile the kernels that prefetch into L2 (PrefetchLevel::kL2)" ON)
if(EMBEDRT_PREFETCH_L2_KERNELS)
  list(APPEND EMBEDRT_BUILT_DEFINITIONS EMBEDRT_PREFETCH_L2_KERNELS=1)
else()
  list(APPEND EMBEDRT_BUILT_DEFINITIONS EMBEDRT_PREFETCH_L2_KERNELS=0)
endif()

list(JOIN EMBEDRT_KERNEL_UNITS " " _units)
message(STATUS "embedrt kernels (EMBEDRT_ISAS=${EMBEDRT_ISAS}): scalar ${_units}; L2-prefetch sets: ${EMBEDRT_PREFETCH_L2_KERNELS}")
