# C++ for tools/serve/kserve_grpc.proto, generated at build time by Debian's protoc (messages) and,
# with WITH_GRPC, grpc_cpp_plugin (the service): the library embedrt_kserve_proto (messages only,
# for the fuzz target) or embedrt_kserve_grpc (messages and service, for the server).
function(embedrt_kserve_proto_library target)
  cmake_parse_arguments(ARG "WITH_GRPC" "" "" ${ARGN})
  set(proto ${PROJECT_SOURCE_DIR}/tools/serve/kserve_grpc.proto)
  set(out ${CMAKE_CURRENT_BINARY_DIR}/generated)
  set(sources ${out}/kserve_grpc.pb.cc)
  set(headers ${out}/kserve_grpc.pb.h)
  set(command protobuf::protoc --proto_path=${PROJECT_SOURCE_DIR}/tools/serve --cpp_out=${out})
  if(ARG_WITH_GRPC)
    find_program(EMBEDRT_GRPC_CPP_PLUGIN grpc_cpp_plugin REQUIRED)
    list(APPEND sources ${out}/kserve_grpc.grpc.pb.cc)
    list(APPEND headers ${out}/kserve_grpc.grpc.pb.h)
    list(APPEND command --grpc_out=${out} --plugin=protoc-gen-grpc=${EMBEDRT_GRPC_CPP_PLUGIN})
  endif()
  add_custom_command(
    OUTPUT ${sources} ${headers}
    COMMAND ${CMAKE_COMMAND} -E make_directory ${out}
    COMMAND ${command} ${proto}
    DEPENDS ${proto}
    COMMENT "protoc: C++ for kserve_grpc.proto"
    VERBATIM)
  # Generated code is not ours to warn about: its own library, without embedrt_warnings.
  add_library(${target} STATIC ${sources})
  target_include_directories(${target} SYSTEM PUBLIC ${out})
  target_link_libraries(${target} PUBLIC protobuf::libprotobuf)
  if(ARG_WITH_GRPC)
    target_link_libraries(${target} PUBLIC gRPC::grpc++)
  endif()
endfunction()
