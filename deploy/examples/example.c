/* Links a library made by `tuneforge deploy --name tuneforge_kernels`, runs every
 * matmul kernel in it on random inputs and checks it against a plain C loop.
 *
 *   cc example.c -I DIR -L DIR -ltuneforge_kernels -Wl,-rpath,DIR -o example
 *   ./example        # prints one line per kernel; exit status 0 when all are correct
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "tuneforge_kernels.h"

static void Fill(float* x, long n, unsigned seed) {
  for (long i = 0; i < n; ++i) {
    seed = seed * 1103515245u + 12345u;
    x[i] = (float)((seed >> 8) & 0xffff) / 32768.0f - 1.0f;
  }
}

static int CheckMatmul(const tuneforge_kernels_kernel_info* k) {
  long m = k->params[0], n = k->params[1], kk = k->params[2];
  float* a = malloc(sizeof(float) * m * kk);
  float* b = malloc(sizeof(float) * kk * n);
  float* c = malloc(sizeof(float) * m * n);
  Fill(a, m * kk, 1);
  Fill(b, kk * n, 2);
  void* buffers[] = {a, b, c};
  int bad = 0;
  if (k->run(buffers) != 0) {
    printf("%s: returned an error\n", k->function);
    bad = 1;
  }
  for (long i = 0; i < m && !bad; ++i) {
    for (long j = 0; j < n && !bad; ++j) {
      double sum = 0;
      for (long p = 0; p < kk; ++p) sum += (double)a[i * kk + p] * b[p * n + j];
      if (fabs(c[i * n + j] - sum) > 4e-6 * kk + 1e-5 + 1e-4 * fabs(sum)) {
        printf("%s: C[%ld][%ld] = %g, expected %g\n", k->function, i, j, c[i * n + j], sum);
        bad = 1;
      }
    }
  }
  if (!bad) printf("%s: %s correct\n", k->function, k->task);
  free(a);
  free(b);
  free(c);
  return bad;
}

int main(void) {
  int failures = 0;
  for (int i = 0; i < tuneforge_kernels_num_kernels(); ++i) {
    const tuneforge_kernels_kernel_info* k = tuneforge_kernels_kernel(i);
    if (strcmp(k->op, "matmul") == 0) failures += CheckMatmul(k);
  }
  return failures == 0 ? 0 : 1;
}
