# The libraries that serve scdino's own float32 CPU matrix products
# (services/model/cpu_gemm.cc), declared and linked here rather than looked up
# at run time:
#
#   SCDINO_CPU_GEMM=auto      oneDNN and OpenBLAS, each where found (default)
#   SCDINO_CPU_GEMM=onednn    oneDNN (libdnnl-dev), or stop
#   SCDINO_CPU_GEMM=openblas  OpenBLAS (libopenblas-dev), or stop
#   SCDINO_CPU_GEMM=off       neither: every product is LibTorch's own op
#
# oneDNN's dnnl_sgemm serves every product when linked (docs/performance.md
# says why). OpenBLAS is the library Debian's LibTorch already sends its own
# products to (libblas.so.3 is OpenBLAS's, and needs libopenblas.so.0): linked
# here it serves the whole-pool products where oneDNN is absent, and its
# thread pool is sized once at start whichever library serves scdino's.
# Defines the target scdino_cpu_gemm (INTERFACE) and SCDINO_CPU_GEMM_SUMMARY.

set(SCDINO_CPU_GEMM auto CACHE STRING "CPU matrix products: auto, onednn, openblas or off")
set_property(CACHE SCDINO_CPU_GEMM PROPERTY STRINGS auto onednn openblas off)
if(NOT SCDINO_CPU_GEMM MATCHES "^(auto|onednn|openblas|off)$")
  message(FATAL_ERROR "scdino: SCDINO_CPU_GEMM is '${SCDINO_CPU_GEMM}'; expected auto, onednn, openblas or off")
endif()

add_library(scdino_cpu_gemm INTERFACE)
set(_gemm_libs "")

if(SCDINO_CPU_GEMM MATCHES "^(auto|onednn)$")
  find_path(SCDINO_DNNL_INCLUDE_DIR oneapi/dnnl/dnnl.h)
  find_library(SCDINO_DNNL_LIBRARY NAMES dnnl)
  if(SCDINO_DNNL_INCLUDE_DIR AND SCDINO_DNNL_LIBRARY)
    target_include_directories(scdino_cpu_gemm INTERFACE ${SCDINO_DNNL_INCLUDE_DIR})
    target_link_libraries(scdino_cpu_gemm INTERFACE ${SCDINO_DNNL_LIBRARY})
    target_compile_definitions(scdino_cpu_gemm INTERFACE SCDINO_GEMM_ONEDNN)
    list(APPEND _gemm_libs "oneDNN (${SCDINO_DNNL_LIBRARY})")
  elseif(SCDINO_CPU_GEMM STREQUAL "onednn")
    message(FATAL_ERROR "scdino: SCDINO_CPU_GEMM=onednn, but oneDNN's header (oneapi/dnnl/dnnl.h: "
      "'${SCDINO_DNNL_INCLUDE_DIR}') or library (libdnnl: '${SCDINO_DNNL_LIBRARY}') is missing: "
      "install libdnnl-dev, or configure with SCDINO_CPU_GEMM=auto, openblas or off.")
  endif()
endif()

if(SCDINO_CPU_GEMM MATCHES "^(auto|openblas)$")
  # Debian's libopenblas-dev: openblas.pc points at the variant chosen by
  # update-alternatives (pthreads, OpenMP or serial), cblas.h with it.
  pkg_check_modules(SCDINO_OPENBLAS QUIET IMPORTED_TARGET openblas)
  if(SCDINO_OPENBLAS_FOUND)
    target_link_libraries(scdino_cpu_gemm INTERFACE PkgConfig::SCDINO_OPENBLAS)
    target_compile_definitions(scdino_cpu_gemm INTERFACE SCDINO_GEMM_OPENBLAS)
    list(APPEND _gemm_libs "OpenBLAS ${SCDINO_OPENBLAS_VERSION} (${SCDINO_OPENBLAS_LIBDIR})")
  elseif(SCDINO_CPU_GEMM STREQUAL "openblas")
    message(FATAL_ERROR "scdino: SCDINO_CPU_GEMM=openblas, but pkg-config finds no 'openblas' module: "
      "install libopenblas-dev, or configure with SCDINO_CPU_GEMM=auto, onednn or off.")
  endif()
endif()

if(_gemm_libs)
  list(JOIN _gemm_libs ", " SCDINO_CPU_GEMM_SUMMARY)
else()
  set(SCDINO_CPU_GEMM_SUMMARY "LibTorch's own ops (no oneDNN or OpenBLAS linked)")
endif()
message(STATUS "scdino: CPU matrix products (SCDINO_CPU_GEMM=${SCDINO_CPU_GEMM}): ${SCDINO_CPU_GEMM_SUMMARY}")
