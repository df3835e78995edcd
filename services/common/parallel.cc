// Compiled with -fopenmp (services/common/CMakeLists.txt): see parallel.h.
#include "common/parallel.h"

#ifndef _OPENMP
#error "common/parallel.cc must be compiled with OpenMP (CMake: OpenMP::OpenMP_CXX)"
#endif

#include <ATen/Parallel.h>
#include <omp.h>

namespace scdino {

void ParallelFor(int64_t begin, int64_t end, int64_t grain, const std::function<void(int64_t, int64_t)>& fn) {
  at::parallel_for(begin, end, grain, fn);
}

void SerialOnThisThread() {
  // LibTorch copies the process's count into a thread's OpenMP setting on
  // the thread's first parallel call: done now, so that it cannot undo the
  // line below later. The flag that says it was done lives in an inline
  // function, and LibTorch 2.x keeps its own copy of it apart from ours:
  // at::get_num_threads sets LibTorch's (inside its library), the second
  // call ours (the inline parallel_for of this binary reads it).
  (void)at::get_num_threads();
  at::internal::lazy_init_num_threads();
  omp_set_num_threads(1);  // this thread's setting alone (an OpenMP ICV)
}

}  // namespace scdino
