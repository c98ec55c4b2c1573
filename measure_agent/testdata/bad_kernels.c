// Test kernels that misbehave, one entry point each, all with the (A, B, C) buffers of
// add_kernel.c. The sandbox must turn every one of them into a MeasureResult.
#include <stdint.h>
#include <stdlib.h>

#include "measure_agent/testdata/test_kernel.h"

// C = A - B: a wrong answer.
int32_t wrong_kernel(void** buffers) {
  float** b = (float**)buffers;
  for (int i = 0; i < kTestElements; ++i) b[2][i] = b[0][i] - b[1][i];
  return 0;
}

// Writes nothing: the NaN sentinel must make this a wrong answer.
int32_t noop_kernel(void** buffers) {
  (void)buffers;
  return 0;
}

// Correct on the first call, wrong afterwards (like a kernel with a data race).
int32_t flaky_kernel(void** buffers) {
  static int calls = 0;
  float** b = (float**)buffers;
  float bias = calls++ == 0 ? 0.0f : 1.0f;
  for (int i = 0; i < kTestElements; ++i) b[2][i] = b[0][i] + b[1][i] + bias;
  return 0;
}

int32_t segv_kernel(void** buffers) {
  (void)buffers;
  *(volatile int*)0 = 1;
  return 0;
}

int32_t abort_kernel(void** buffers) {
  (void)buffers;
  abort();
}

int32_t exit_kernel(void** buffers) {
  (void)buffers;
  exit(3);
}

int32_t fail_kernel(void** buffers) {
  (void)buffers;
  return 7;
}

int32_t loop_kernel(void** buffers) {
  (void)buffers;
  volatile uint64_t spins = 0;
  for (;;) ++spins;
  return 0;
}
