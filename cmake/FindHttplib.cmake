# cpp-httplib as Debian packages it (libcpp-httplib-dev): httplib.h and the shared library
# libcpp-httplib.so, built with OpenSSL, zlib and brotli support. Its header declares classes
# whose layout depends on those three options, so every user compiles with the same
# definitions (the package's pkg-config Cflags) and needs their headers.
#
# A staged copy in ${PROJECT_SOURCE_DIR}/.deps (tools/stage_device_deps.sh) is searched first,
# then CMAKE_PREFIX_PATH and the system. Where the library comes from .deps, the binaries carry
# an RPATH (DT_RPATH, which also serves the library's own dependencies, such as brotli) to it.
#
# Defines the imported target es::httplib, or stops configuring with what to install.
set(_es_deps ${PROJECT_SOURCE_DIR}/.deps)
find_path(ES_HTTPLIB_INCLUDE_DIR httplib.h HINTS ${_es_deps}/include)
find_library(ES_HTTPLIB_LIBRARY NAMES cpp-httplib
             HINTS ${_es_deps}/lib/x86_64-linux-gnu ${_es_deps}/lib)
find_path(ES_OPENSSL_INCLUDE_DIR openssl/ssl.h HINTS ${_es_deps}/include)
find_path(ES_ZLIB_INCLUDE_DIR zlib.h HINTS ${_es_deps}/include)
find_path(ES_BROTLI_INCLUDE_DIR brotli/decode.h HINTS ${_es_deps}/include)
foreach(var ES_HTTPLIB_INCLUDE_DIR ES_HTTPLIB_LIBRARY ES_OPENSSL_INCLUDE_DIR ES_ZLIB_INCLUDE_DIR
            ES_BROTLI_INCLUDE_DIR)
  if(NOT ${var})
    message(FATAL_ERROR
            "edgespec: cpp-httplib not found (${var}): `edgespec serve` needs the Debian/Ubuntu "
            "package libcpp-httplib-dev (with libssl-dev, zlib1g-dev, libbrotli-dev): run "
            "`bash tools/install_deps.sh`, or stage it with tools/stage_device_deps.sh")
  endif()
endforeach()
message(STATUS "edgespec: cpp-httplib ${ES_HTTPLIB_LIBRARY}")

add_library(es::httplib SHARED IMPORTED)
set_target_properties(es::httplib PROPERTIES
  IMPORTED_LOCATION ${ES_HTTPLIB_LIBRARY}
  INTERFACE_INCLUDE_DIRECTORIES
    "${ES_HTTPLIB_INCLUDE_DIR};${ES_OPENSSL_INCLUDE_DIR};${ES_ZLIB_INCLUDE_DIR};${ES_BROTLI_INCLUDE_DIR}"
  INTERFACE_COMPILE_DEFINITIONS
    "CPPHTTPLIB_OPENSSL_SUPPORT;CPPHTTPLIB_ZLIB_SUPPORT;CPPHTTPLIB_BROTLI_SUPPORT")
get_filename_component(_es_httplib_dir ${ES_HTTPLIB_LIBRARY} DIRECTORY)
if(_es_httplib_dir MATCHES "^${_es_deps}/")
  # DT_RPATH, not DT_RUNPATH: only DT_RPATH is searched for a library's own dependencies.
  set_property(TARGET es::httplib PROPERTY INTERFACE_LINK_OPTIONS
               "LINKER:-rpath,${_es_httplib_dir}" "LINKER:--disable-new-dtags")
endif()
