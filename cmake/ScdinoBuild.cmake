# Build-speed settings shared by every target: ccache, and one precompiled
# LibTorch header reused by every target that includes LibTorch (a translation
# unit that parses <torch/torch.h> from scratch costs ~40 s on two cores).

find_program(SCDINO_CCACHE ccache)
if(SCDINO_CCACHE AND NOT CMAKE_CXX_COMPILER_LAUNCHER)
  # ccache only caches translation units built with a precompiled header when
  # these checks are relaxed; the header's content is still hashed. Paths
  # under the checkout count relative to it (CCACHE_BASEDIR), so that a
  # clean clone elsewhere (CI's) hits what an earlier checkout compiled.
  set(CMAKE_CXX_COMPILER_LAUNCHER
      ${CMAKE_COMMAND} -E env
      "CCACHE_SLOPPINESS=pch_defines,time_macros,include_file_mtime,include_file_ctime"
      "CCACHE_BASEDIR=${PROJECT_SOURCE_DIR}"
      ${SCDINO_CCACHE})
endif()
# The checkout's path is left out of what the compiler writes (__FILE__ in
# TORCH_CHECK's and GoogleTest's messages, debug info's file names and
# directory): with it, ccache missed every translation unit of a clean clone
# at another path (CCACHE_BASEDIR alone rewrites only the command line; and
# with -g ccache hashes the working directory unless a prefix map covers it).
add_compile_options($<$<COMPILE_LANGUAGE:CXX>:-ffile-prefix-map=${PROJECT_SOURCE_DIR}/=>)

# Debian 13's protobuf exports NOMINMAX (a Windows macro) to every target that
# links it; GCC refuses a PCH built without a macro the header tests, and such
# a translation unit then parses <torch/torch.h> itself (~40 s). Every
# LibTorch target, and the PCH, defines it alike.
set(SCDINO_PCH_DEFINITIONS NOMINMAX)

# The precompiled header lives on its own small object library; every LibTorch
# target reuses it through scdino_use_torch(). Libraries are static and no
# target asks for -fPIC/-fPIE, so one PCH suits libraries and executables.
function(scdino_torch_pch_target)
  if(TARGET scdino_torch_pch)
    return()
  endif()
  file(WRITE ${CMAKE_BINARY_DIR}/scdino_torch_pch.cc "// translation unit that owns the LibTorch precompiled header\n")
  add_library(scdino_torch_pch OBJECT ${CMAKE_BINARY_DIR}/scdino_torch_pch.cc)
  target_link_libraries(scdino_torch_pch PUBLIC torch Threads::Threads)
  target_compile_options(scdino_torch_pch PUBLIC -pthread)
  target_compile_definitions(scdino_torch_pch PUBLIC ${SCDINO_PCH_DEFINITIONS})
  target_precompile_headers(scdino_torch_pch PUBLIC <torch/torch.h>)
endfunction()

# scdino_use_torch(<target>): links LibTorch and reuses the shared PCH.
function(scdino_use_torch target)
  scdino_torch_pch_target()
  target_link_libraries(${target} PUBLIC torch Threads::Threads)
  # gRPC's targets compile with -pthread (it defines _REENTRANT); a PCH is
  # only reused under the same flags, so every LibTorch target uses it.
  target_compile_options(${target} PUBLIC -pthread)
  target_compile_definitions(${target} PUBLIC ${SCDINO_PCH_DEFINITIONS})
  target_precompile_headers(${target} REUSE_FROM scdino_torch_pch)
endfunction()

# scdino_thin_main(TARGET SOURCE): a program whose main.cc only calls its
# body in scdino::program_mains (services/programs/mains.h): no LibTorch
# header, so no precompiled header either.
function(scdino_thin_main target source)
  add_executable(${target} ${source})
  target_link_libraries(${target} PRIVATE scdino::program_mains)
  scdino_warnings(${target})
endfunction()

function(scdino_warnings target)
  target_compile_options(${target} PRIVATE -Wall -Wextra -Wno-unused-parameter)
endfunction()

# SCDINO_SANITIZE: sanitizers compiled into every target (docs/architecture.md#sanitizers):
#   -DSCDINO_SANITIZE=address,undefined   AddressSanitizer + UndefinedBehaviorSanitizer
#   -DSCDINO_SANITIZE=thread              ThreadSanitizer
# Empty (the default): none. A report stops the process (no recovery), so a
# test that meets one fails. LibTorch, gRPC and OpenBLAS stay uninstrumented
# (Debian's builds): ASan still sees every heap access our code makes, UBSan
# checks our code, and TSan sees our threads' accesses and the locks they
# take through libstdc++ and pthreads; tests/sanitizers/ holds the
# suppressions for what the uninstrumented libraries do on their own.
set(SCDINO_SANITIZE "" CACHE STRING "Sanitizers: address,undefined | thread | empty for none")
if(SCDINO_SANITIZE)
  if(SCDINO_SANITIZE STREQUAL "thread")
    set(_scdino_sanitize_flags -fsanitize=thread)
  elseif(SCDINO_SANITIZE MATCHES "^(address|undefined|address,undefined|undefined,address)$")
    # vptr checks need the RTTI of classes LibTorch defines, which an
    # uninstrumented library gives without the checker's type data: off.
    set(_scdino_sanitize_flags -fsanitize=${SCDINO_SANITIZE} -fno-sanitize=vptr -fno-sanitize-recover=all)
  else()
    message(FATAL_ERROR "scdino: SCDINO_SANITIZE='${SCDINO_SANITIZE}': expected address,undefined, address, "
      "undefined, thread or empty")
  endif()
  # Line tables only, and -O1 (the sanitizers' own advice): reports name
  # file and line, and the trees compile on two cores in the test run's time
  # (-O3 costs about half as much again).
  string(REPLACE "-O3" "-O1" CMAKE_CXX_FLAGS_RELEASE "${CMAKE_CXX_FLAGS_RELEASE}")
  add_compile_options(${_scdino_sanitize_flags} -fno-omit-frame-pointer -g1)
  add_link_options(${_scdino_sanitize_flags})
  message(STATUS "scdino: sanitizers ${SCDINO_SANITIZE}")
endif()
