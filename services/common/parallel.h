// A parallel loop over LibTorch's intra-op threads that is parallel.
//
// at::parallel_for is a header template: its OpenMP region is compiled into
// the caller's translation unit, and a translation unit built without
// -fopenmp (Debian's LibTorch exports no OpenMP flag to its users) gets the
// serial fallback silently. This one is compiled with OpenMP (parallel.cc,
// CMake's OpenMP::OpenMP_CXX), on the same libgomp as LibTorch and oneDNN,
// so its threads are LibTorch's and a oneDNN product called inside runs on
// the calling thread. tests/model/cpu_gemm_test.cc checks that two threads
// really run.
#pragma once

#include <cstdint>
#include <functional>

namespace scdino {

/// fn(chunk_begin, chunk_end) over [begin, end) in chunks of at least
/// `grain` items, one chunk per LibTorch thread (at::get_num_threads());
/// serial inside a parallel region or below two chunks. The first
/// exception thrown in fn is rethrown here.
void ParallelFor(int64_t begin, int64_t end, int64_t grain, const std::function<void(int64_t, int64_t)>& fn);

/// Keeps this thread's LibTorch and oneDNN work on this one thread and
/// leaves the process's intra-op count (set once, at the edge, by
/// run::ConfigureCpu) as it is. For threads that work beside the compute:
/// the loader's readers, the channel statistics'. at::set_num_threads(1)
/// there would store 1 as the process's count, which every thread takes on
/// its first parallel call, the training step's thread included: the
/// trainer then computed on one thread whatever scdino.threads said.
void SerialOnThisThread();

}  // namespace scdino
