// Test kernel: C = A + B over kTestElements floats, split over two threads with the
// runtime's tf_parallel_for, so that loading it also proves the agent exports the
// runtime. Built as a MODULE library by measure_agent/CMakeLists.txt.
#include <stdint.h>

#include "measure_agent/testdata/test_kernel.h"

void tf_parallel_for(int64_t n, int32_t num_threads, void (*fn)(int64_t, void*), void* closure);

static void AddChunk(int64_t chunk, void* closure) {
  float** buffers = (float**)closure;
  const int64_t per_chunk = kTestElements / 2;
  for (int64_t i = chunk * per_chunk; i < (chunk + 1) * per_chunk; ++i) {
    buffers[2][i] = buffers[0][i] + buffers[1][i];
  }
}

int32_t add_kernel(void** buffers) {
  tf_parallel_for(2, 2, AddChunk, buffers);
  return 0;
}
