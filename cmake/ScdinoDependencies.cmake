# How scdino finds what it builds with, besides LibTorch: each dependency
# with the Debian 12 package that provides it, so that one that is missing
# is named with its package.
#
#   SCDINO_DEPS_PACK=DIR   build from a dependency pack (scripts/pack-gpu-deps.sh)
#                          alone: these dependencies are looked for in DIR
#                          only, never in the system's prefixes, and the
#                          programs find the pack's libraries at run time
#                          (an RPATH, which the libraries' own dependencies
#                          follow too). What a lent GPU machine builds with.
#
# scdino_find_package(NAME [find_package arguments] DEBIAN PACKAGE...):
#   find_package(NAME ...), or stop naming NAME and the Debian packages.
# scdino_find_headers(VAR HEADER DEBIAN PACKAGE...): the include directory
#   of a header-only dependency in VAR, or stop naming the packages.

set(SCDINO_DEPS_PACK "" CACHE PATH "A dependency pack (scripts/pack-gpu-deps.sh) to build from, alone")
if(SCDINO_DEPS_PACK)
  get_filename_component(SCDINO_DEPS_PACK "${SCDINO_DEPS_PACK}" ABSOLUTE)
  if(NOT EXISTS "${SCDINO_DEPS_PACK}/MANIFEST.txt" OR NOT EXISTS "${SCDINO_DEPS_PACK}/bin/scdino-pack-view")
    message(FATAL_ERROR "scdino: SCDINO_DEPS_PACK=${SCDINO_DEPS_PACK} is not a dependency pack (no MANIFEST.txt "
      "or bin/scdino-pack-view): make one with scripts/pack-gpu-deps.sh DIR on Debian 12")
  endif()
  # The build reads the pack through a view made for this machine
  # (scripts/pack-view.sh): where this machine's loader already has a
  # library of the same soname (a newer OpenSSL or zlib, a real BLAS where
  # the pack has a stand-in), the view links to that one, which this
  # machine's LibTorch may need.
  set(_scdino_pack_prefix "${CMAKE_BINARY_DIR}/scdino-pack-view")
  execute_process(COMMAND "${SCDINO_DEPS_PACK}/bin/scdino-pack-view" "${_scdino_pack_prefix}"
                  RESULT_VARIABLE _scdino_view_rc OUTPUT_VARIABLE _scdino_view_system ERROR_VARIABLE _scdino_view_err)
  if(NOT _scdino_view_rc EQUAL 0)
    message(FATAL_ERROR "scdino: could not make the view of the pack ${SCDINO_DEPS_PACK}: ${_scdino_view_err}")
  endif()
  string(REGEX REPLACE " [^\n]*\n" " " _scdino_view_system "${_scdino_view_system}")
  set(_scdino_pack_lib "${_scdino_pack_prefix}/usr/lib/${CMAKE_LIBRARY_ARCHITECTURE}")
  set(PKG_CONFIG_EXECUTABLE "${_scdino_pack_prefix}/bin/pkg-config" CACHE FILEPATH "the pack's pkg-config" FORCE)
  # DT_RPATH rather than DT_RUNPATH: the pack's libraries then find theirs
  # (and the stand-ins) in the view as well, with no LD_LIBRARY_PATH.
  add_link_options("LINKER:--disable-new-dtags" "LINKER:-rpath,${_scdino_pack_lib}"
                   "LINKER:-rpath-link,${_scdino_pack_lib}")
  # The compiler looks in /usr/include/<arch> for /usr's multiarch headers
  # (OpenSSL's opensslconf.h, OpenCV's cvconfig.h); the pack's are in the
  # same place under its own prefix.
  include_directories(SYSTEM "${_scdino_pack_prefix}/usr/include/${CMAKE_LIBRARY_ARCHITECTURE}")
  file(STRINGS "${SCDINO_DEPS_PACK}/MANIFEST.txt" _scdino_pack_size REGEX "^# size:")
  message(STATUS "scdino: building from the dependency pack ${SCDINO_DEPS_PACK} (${_scdino_pack_size}); "
    "this machine's own: ${_scdino_view_system}")
endif()

function(_scdino_missing what packages)
  string(REPLACE ";" " " packages "${packages}")
  if(SCDINO_DEPS_PACK)
    message(FATAL_ERROR "scdino: the dependency pack ${SCDINO_DEPS_PACK} has no ${what} (Debian 12: ${packages}, "
      "which scripts/pack-gpu-deps.sh packs): make the pack again, and see its MANIFEST.txt")
  endif()
  message(FATAL_ERROR "scdino: ${what} not found (Debian 12: ${packages}): "
    "bash scripts/install-deps.sh build installs everything scdino builds with")
endfunction()

macro(scdino_find_package name)
  cmake_parse_arguments(_sfp "" "" "DEBIAN" ${ARGN})
  if(SCDINO_DEPS_PACK)
    # The pack's prefix and nothing else: not the system's prefixes, not
    # those PATH implies (/usr/bin gives /usr), not the package registries.
    set(_sfp_saved_prefix "${CMAKE_PREFIX_PATH}")
    set(CMAKE_PREFIX_PATH "${_scdino_pack_prefix}/usr")
    foreach(_sfp_where CMAKE_SYSTEM_PATH CMAKE_ENVIRONMENT_PATH SYSTEM_ENVIRONMENT_PATH PACKAGE_REGISTRY
                       SYSTEM_PACKAGE_REGISTRY)
      set(_sfp_saved_${_sfp_where} "${CMAKE_FIND_USE_${_sfp_where}}")
      set(CMAKE_FIND_USE_${_sfp_where} OFF)
    endforeach()
    find_package(${name} ${_sfp_UNPARSED_ARGUMENTS})
    foreach(_sfp_where CMAKE_SYSTEM_PATH CMAKE_ENVIRONMENT_PATH SYSTEM_ENVIRONMENT_PATH PACKAGE_REGISTRY
                       SYSTEM_PACKAGE_REGISTRY)
      set(CMAKE_FIND_USE_${_sfp_where} "${_sfp_saved_${_sfp_where}}")
    endforeach()
    set(CMAKE_PREFIX_PATH "${_sfp_saved_prefix}")
  else()
    find_package(${name} ${_sfp_UNPARSED_ARGUMENTS})
  endif()
  if(NOT ${name}_FOUND)
    _scdino_missing("${name}" "${_sfp_DEBIAN}")
  endif()
endmacro()

function(scdino_find_headers var header)
  cmake_parse_arguments(ARG "" "" "DEBIAN" ${ARGN})
  if(SCDINO_DEPS_PACK)
    find_path(${var} ${header} PATHS "${_scdino_pack_prefix}/usr/include" NO_DEFAULT_PATH)
  else()
    find_path(${var} ${header})
  endif()
  if(NOT ${var})
    _scdino_missing("${header}" "${ARG_DEBIAN}")
  endif()
endfunction()

# HDF5 through pkg-config (Debian names the module hdf5-serial); FindHDF5
# would need a C compiler, and the project is C++ only.
macro(scdino_find_hdf5)
  find_package(PkgConfig)
  if(NOT PKG_CONFIG_FOUND)
    _scdino_missing("pkg-config (for HDF5)" "pkgconf")
  endif()
  pkg_search_module(HDF5 IMPORTED_TARGET hdf5-serial hdf5)
  if(NOT HDF5_FOUND)
    _scdino_missing("HDF5's pkg-config module (hdf5-serial or hdf5)" "libhdf5-dev")
  endif()
endmacro()
