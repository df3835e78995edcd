// Compiled with -fopenmp (services/common/CMakeLists.txt): see parallel.h.
#include "common/parallel.h"

#ifndef _OPENMP
#error "common/parallel.cc must be compiled with OpenMP (CMake: OpenMP::OpenMP_CXX)"
#endif

#include <ATen/Parallel.h>

namespace scdino {

void ParallelFor(int64_t begin, int64_t end, int64_t grain, const std::function<void(int64_t, int64_t)>& fn) {
  at::parallel_for(begin, end, grain, fn);
}

}  // namespace scdino
