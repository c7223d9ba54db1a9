# SPDX-License-Identifier: Apache-2.0
# What `cmake --install` puts under the prefix (docs/getting-started.md):
#   include/cpr/*.h                        the public API
#   lib/libcpr.so.0, lib/libcpr.a          client (gRPC), types, embedding,
#                                          recovery, data, failure schedule
#   lib/libcpr-store.so.0, libcpr-store.a  the store (RocksDB, liburing); the
#                                          client loads the shared one for local://
#   lib/pkgconfig/cpr.pc, cpr-store.pc     pkg-config
#   lib/cmake/cpr/                         find_package(cpr)
#   bin/ckptd, cprctl, cpr-bench, cpr-analyze, cpr-data, cpr-dlrm
# The libraries are built from the objects of the module libraries, so they
# hold exactly what the in-tree targets link. Everything is compiled with
# hidden visibility: the shared libraries export what include/cpr declares
# CPR_API (libcpr also the few CPR_INTERNAL_API helpers libcpr-store uses).
include(GNUInstallDirs)
include(CMakePackageConfigHelpers)

set(CPR_LIB_PARTS cpr_common cpr_wire cpr_rpc_flat cpr_rpc_client cpr_client cpr_recovery
    cpr_recovery_exec cpr_embedding cpr_data cpr_cuda)
set(CPR_LIB_OBJECTS "")
foreach(part IN LISTS CPR_LIB_PARTS)
  list(APPEND CPR_LIB_OBJECTS $<TARGET_OBJECTS:${part}>)
endforeach()
set(CPR_LIB_SYSTEM PkgConfig::GRPC PkgConfig::PROTOBUF_C ${ISAL_LIBRARY} ${CJSON_LIBRARY}
    Threads::Threads ${CMAKE_DL_LIBS} m)
if(CPR_HAVE_CUDA)
  list(APPEND CPR_LIB_SYSTEM CUDA::cudart_static)
endif()
set(CPR_EMPTY_C ${CMAKE_CURRENT_BINARY_DIR}/cpr_parts.c)
# CONFIGURE writes only when the text changes: a re-run of cmake (every
# make target runs it) must not touch it, or every library is linked again.
file(CONFIGURE OUTPUT ${CPR_EMPTY_C}
     CONTENT "/* The CPR libraries are made of their modules' objects. */\ntypedef int cpr_parts_;\n")

add_library(cpr SHARED ${CPR_EMPTY_C} ${CPR_LIB_OBJECTS})
target_link_libraries(cpr PRIVATE ${CPR_LIB_SYSTEM})
add_library(cpr_static STATIC ${CPR_EMPTY_C} ${CPR_LIB_OBJECTS})

add_library(cpr_store_shared SHARED ${CPR_EMPTY_C} $<TARGET_OBJECTS:cpr_store>)
target_link_libraries(cpr_store_shared PRIVATE cpr ${ROCKSDB_LIBRARY} ${RADOS_LIBRARY} PkgConfig::URING
                      Threads::Threads)
add_library(cpr_store_static STATIC ${CPR_EMPTY_C} $<TARGET_OBJECTS:cpr_store>)

# $ORIGIN: libcpr finds libcpr-store.so.0 beside it, in the build tree too.
set_target_properties(cpr PROPERTIES OUTPUT_NAME cpr VERSION ${PROJECT_VERSION}
  SOVERSION ${PROJECT_VERSION_MAJOR} LINKER_LANGUAGE C INSTALL_RPATH "$ORIGIN" BUILD_RPATH "$ORIGIN"
  LIBRARY_OUTPUT_DIRECTORY ${PROJECT_BINARY_DIR}/lib)
set_target_properties(cpr_store_shared PROPERTIES OUTPUT_NAME cpr-store VERSION ${PROJECT_VERSION}
  SOVERSION ${PROJECT_VERSION_MAJOR} LINKER_LANGUAGE C INSTALL_RPATH "$ORIGIN" BUILD_RPATH "$ORIGIN"
  LIBRARY_OUTPUT_DIRECTORY ${PROJECT_BINARY_DIR}/lib)
set_target_properties(cpr_static PROPERTIES OUTPUT_NAME cpr LINKER_LANGUAGE C
  ARCHIVE_OUTPUT_DIRECTORY ${PROJECT_BINARY_DIR}/lib)
set_target_properties(cpr_store_static PROPERTIES OUTPUT_NAME cpr-store LINKER_LANGUAGE C
  ARCHIVE_OUTPUT_DIRECTORY ${PROJECT_BINARY_DIR}/lib)
# Each shared library binds its own calls to itself.
target_link_options(cpr PRIVATE "LINKER:-Bsymbolic" "LINKER:--no-undefined")
target_link_options(cpr_store_shared PRIVATE "LINKER:-Bsymbolic" "LINKER:--no-undefined")

# What a static link needs besides the archives (pkg-config and CMake package).
set(CPR_PC_LIBS_PRIVATE "-lisal -lcjson -lm -ldl -lpthread")
set(CPR_STATIC_LIBS "${GRPC_LINK_LIBRARIES};${PROTOBUF_C_LINK_LIBRARIES};${ISAL_LIBRARY};${CJSON_LIBRARY};m;dl;pthread")
if(CPR_HAVE_CUDA)
  get_target_property(_cudart CUDA::cudart_static IMPORTED_LOCATION)
  string(APPEND CPR_PC_LIBS_PRIVATE " ${_cudart} -lrt")
  string(APPEND CPR_STATIC_LIBS ";${_cudart};rt")
endif()
set(CPR_PC_STORE_LIBS_PRIVATE "-lrocksdb -lrados -lpthread")
set(CPR_STORE_STATIC_LIBS "${ROCKSDB_LIBRARY};${RADOS_LIBRARY};${URING_LINK_LIBRARIES};pthread")

configure_file(${PROJECT_SOURCE_DIR}/cmake/cpr.pc.in ${PROJECT_BINARY_DIR}/cpr.pc @ONLY)
configure_file(${PROJECT_SOURCE_DIR}/cmake/cpr-store.pc.in ${PROJECT_BINARY_DIR}/cpr-store.pc @ONLY)
configure_package_config_file(${PROJECT_SOURCE_DIR}/cmake/cprConfig.cmake.in
  ${PROJECT_BINARY_DIR}/cprConfig.cmake INSTALL_DESTINATION ${CMAKE_INSTALL_LIBDIR}/cmake/cpr)
write_basic_package_version_file(${PROJECT_BINARY_DIR}/cprConfigVersion.cmake
  VERSION ${PROJECT_VERSION} COMPATIBILITY SameMajorVersion)

install(TARGETS cpr cpr_static cpr_store_shared cpr_store_static
  LIBRARY DESTINATION ${CMAKE_INSTALL_LIBDIR} ARCHIVE DESTINATION ${CMAKE_INSTALL_LIBDIR})
install(DIRECTORY ${PROJECT_SOURCE_DIR}/include/cpr DESTINATION ${CMAKE_INSTALL_INCLUDEDIR}
  FILES_MATCHING PATTERN "*.h")
install(FILES ${PROJECT_BINARY_DIR}/cpr.pc ${PROJECT_BINARY_DIR}/cpr-store.pc
  DESTINATION ${CMAKE_INSTALL_LIBDIR}/pkgconfig)
install(FILES ${PROJECT_BINARY_DIR}/cprConfig.cmake ${PROJECT_BINARY_DIR}/cprConfigVersion.cmake
  DESTINATION ${CMAKE_INSTALL_LIBDIR}/cmake/cpr)
install(TARGETS ckptd cprctl cpr-bench cpr-analyze cpr-data cpr-dlrm
  RUNTIME DESTINATION ${CMAKE_INSTALL_BINDIR})
