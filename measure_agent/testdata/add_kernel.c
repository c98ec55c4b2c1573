// Test kernel: C = A + B over kTestElements floats, split over two threads with the
// runtime's tf_parallel_for, so that loading it also proves the agent exports the
// runtime. Built as a MODULE library by measure_agent/CMakeLists.txt.
#define _GNU_SOURCE
#include <sched.h>
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

// add_kernel that fails (returns 7) unless every thread it runs on is pinned to a
// single CPU: how the sandbox tests see that the agent pinned the kernel's threads.
static int32_t g_unpinned = 0;

static void PinnedAddChunk(int64_t chunk, void* closure) {
  cpu_set_t set;
  CPU_ZERO(&set);
  if (sched_getaffinity(0, sizeof(set), &set) != 0 || CPU_COUNT(&set) != 1) {
    __atomic_store_n(&g_unpinned, 1, __ATOMIC_RELAXED);
  }
  AddChunk(chunk, closure);
}

int32_t pinned_add_kernel(void** buffers) {
  tf_parallel_for(2, 2, PinnedAddChunk, buffers);
  return __atomic_load_n(&g_unpinned, __ATOMIC_RELAXED) ? 7 : 0;
}

// Integer buffers: C (int32) = A (uint8) + B (int8), serial.
int32_t add_u8_s8_kernel(void** buffers) {
  const uint8_t* a = (const uint8_t*)buffers[0];
  const int8_t* b = (const int8_t*)buffers[1];
  int32_t* c = (int32_t*)buffers[2];
  for (int64_t i = 0; i < kTestElements; ++i) c[i] = (int32_t)a[i] + (int32_t)b[i];
  return 0;
}
