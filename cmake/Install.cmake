include(GNUInstallDirs)
include(CMakePackageConfigHelpers)

set(EMBEDRT_INSTALLED_TARGETS embedrt)
if(TARGET embedrt_import)
  list(APPEND EMBEDRT_INSTALLED_TARGETS embedrt_import)
endif()
install(TARGETS ${EMBEDRT_INSTALLED_TARGETS} EXPORT embedrtTargets
  ARCHIVE DESTINATION ${CMAKE_INSTALL_LIBDIR}
  LIBRARY DESTINATION ${CMAKE_INSTALL_LIBDIR}
  RUNTIME DESTINATION ${CMAKE_INSTALL_BINDIR}
  INCLUDES DESTINATION ${CMAKE_INSTALL_INCLUDEDIR})
install(DIRECTORY ${PROJECT_SOURCE_DIR}/include/embedrt DESTINATION ${CMAKE_INSTALL_INCLUDEDIR}
  FILES_MATCHING PATTERN "*.hpp" PATTERN "*.h")
install(FILES ${PROJECT_BINARY_DIR}/include/embedrt/version.hpp
  DESTINATION ${CMAKE_INSTALL_INCLUDEDIR}/embedrt)
if(TARGET embedrt_cli)
  install(TARGETS embedrt_cli RUNTIME DESTINATION ${CMAKE_INSTALL_BINDIR})
endif()

set(EMBEDRT_CMAKE_DIR ${CMAKE_INSTALL_LIBDIR}/cmake/embedrt)
install(EXPORT embedrtTargets NAMESPACE embedrt:: DESTINATION ${EMBEDRT_CMAKE_DIR})
configure_package_config_file(${PROJECT_SOURCE_DIR}/cmake/embedrtConfig.cmake.in
  ${PROJECT_BINARY_DIR}/embedrtConfig.cmake INSTALL_DESTINATION ${EMBEDRT_CMAKE_DIR})
write_basic_package_version_file(${PROJECT_BINARY_DIR}/embedrtConfigVersion.cmake
  COMPATIBILITY SameMinorVersion)
install(FILES ${PROJECT_BINARY_DIR}/embedrtConfig.cmake ${PROJECT_BINARY_DIR}/embedrtConfigVersion.cmake
  DESTINATION ${EMBEDRT_CMAKE_DIR})

# Relocatable: the prefix is found relative to the .pc file, so `cmake --install --prefix` works.
file(RELATIVE_PATH EMBEDRT_PC_TO_PREFIX /root/${CMAKE_INSTALL_LIBDIR}/pkgconfig /root)
configure_file(${PROJECT_SOURCE_DIR}/cmake/embedrt.pc.in ${PROJECT_BINARY_DIR}/embedrt.pc @ONLY)
install(FILES ${PROJECT_BINARY_DIR}/embedrt.pc DESTINATION ${CMAKE_INSTALL_LIBDIR}/pkgconfig)
