/* Links a library made by `tuneforge deploy --name tuneforge_kernels`, runs every
 * kernel in it (matmul, batch_matmul, dense, conv2d, depthwise_conv2d) on random
 * inputs through the generic entry, and checks each against a plain C loop.
 *
 *   cc example.c -I DIR -L DIR -ltuneforge_kernels -Wl,-rpath,DIR -lm -o example
 *   ./example        # prints one line per kernel; exit status 0 when all are correct
 *
 * The typed functions in the header take the same buffers by name, e.g.
 *   tuneforge_kernels_dense_64x256x128x1x1(X, W, bias, Y);
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "tuneforge_kernels.h"

typedef tuneforge_kernels_kernel_info Info;

static void Fill(float* x, long n, unsigned seed) {
  for (long i = 0; i < n; ++i) {
    seed = seed * 1103515245u + 12345u;
    x[i] = (float)((seed >> 8) & 0xffff) / 32768.0f - 1.0f;
  }
}

/* The task parameter `name` (e.g. "M"), or -1. */
static long Param(const Info* k, const char* name) {
  for (int i = 0; i < k->num_params; ++i)
    if (strcmp(k->param_names[i], name) == 0) return (long)k->params[i];
  return -1;
}

/* C = A * B for `batch` row-major products of MxK by KxN. */
static void Matmul(const float* a, const float* b, double* c, long batch, long m, long n, long kk) {
  for (long p = 0; p < batch; ++p)
    for (long i = 0; i < m; ++i)
      for (long j = 0; j < n; ++j) {
        double sum = 0;
        for (long q = 0; q < kk; ++q) sum += (double)a[(p * m + i) * kk + q] * b[(p * kk + q) * n + j];
        c[(p * m + i) * n + j] = sum;
      }
}

/* Direct convolution, NCHW input, OIHW (or CRS for depthwise) filter. */
static void Conv(const float* in, const float* f, double* out, long nb, long c, long h, long w,
                 long k, long r, long s, long stride, long pad, int depthwise) {
  long oh = (h + 2 * pad - r) / stride + 1, ow = (w + 2 * pad - s) / stride + 1;
  for (long n = 0; n < nb; ++n)
    for (long o = 0; o < k; ++o)
      for (long y = 0; y < oh; ++y)
        for (long x = 0; x < ow; ++x) {
          double sum = 0;
          for (long ci = depthwise ? o : 0; ci < (depthwise ? o + 1 : c); ++ci)
            for (long dy = 0; dy < r; ++dy)
              for (long dx = 0; dx < s; ++dx) {
                long iy = y * stride + dy - pad, ix = x * stride + dx - pad;
                if (iy < 0 || iy >= h || ix < 0 || ix >= w) continue;
                float fv = depthwise ? f[(o * r + dy) * s + dx] : f[((o * c + ci) * r + dy) * s + dx];
                sum += (double)in[((n * c + ci) * h + iy) * w + ix] * fv;
              }
          out[((n * k + o) * oh + y) * ow + x] = sum;
        }
}

/* Runs kernel `k` on inputs of the given sizes; compares its output with `expected`,
 * allowing float32 accumulation error over `terms` products. */
static int Check(const Info* k, long* sizes, int inputs, long out_size, double* expected,
                 long terms, unsigned seed) {
  void* buffers[8];
  for (int i = 0; i < inputs; ++i) {
    buffers[i] = malloc(sizeof(float) * sizes[i]);
    Fill(buffers[i], sizes[i], seed + (unsigned)i);
  }
  float* out = malloc(sizeof(float) * out_size);
  buffers[inputs] = out;
  int bad = 0;
  if (k->run(buffers) != 0) {
    printf("%s: returned an error\n", k->function);
    bad = 1;
  }
  /* The expected values need the same inputs: the caller fills them from `seed` too. */
  for (long i = 0; i < out_size && !bad; ++i) {
    if (fabs(out[i] - expected[i]) > 4e-6 * terms + 1e-5 + 1e-4 * fabs(expected[i])) {
      printf("%s: output[%ld] = %g, expected %g\n", k->function, i, out[i], expected[i]);
      bad = 1;
    }
  }
  if (!bad) printf("%s: %s correct\n", k->function, k->task);
  for (int i = 0; i <= inputs; ++i) free(buffers[i]);
  return bad;
}

static float* Filled(long n, unsigned seed) {
  float* x = malloc(sizeof(float) * n);
  Fill(x, n, seed);
  return x;
}

static int CheckKernel(const Info* k) {
  const unsigned seed = 11;
  int bad = 0;
  if (strcmp(k->op, "matmul") == 0 || strcmp(k->op, "batch_matmul") == 0) {
    long b = strcmp(k->op, "matmul") == 0 ? 1 : Param(k, "B");
    long m = Param(k, "M"), n = Param(k, "N"), kk = Param(k, "K");
    long sizes[] = {b * m * kk, b * kk * n};
    float *a = Filled(sizes[0], seed), *bb = Filled(sizes[1], seed + 1);
    double* want = malloc(sizeof(double) * b * m * n);
    Matmul(a, bb, want, b, m, n, kk);
    bad = Check(k, sizes, 2, b * m * n, want, kk, seed);
    free(a), free(bb), free(want);
  } else if (strcmp(k->op, "dense") == 0) {
    long m = Param(k, "M"), n = Param(k, "N"), kk = Param(k, "K");
    int bias = Param(k, "bias") == 1, relu = Param(k, "relu") == 1;
    long sizes[] = {m * kk, kk * n, n};
    float *x = Filled(sizes[0], seed), *w = Filled(sizes[1], seed + 1), *b = Filled(n, seed + 2);
    double* want = malloc(sizeof(double) * m * n);
    Matmul(x, w, want, 1, m, n, kk);
    for (long i = 0; i < m * n; ++i) {
      if (bias) want[i] += b[i % n];
      if (relu && want[i] < 0) want[i] = 0;
    }
    bad = Check(k, sizes, bias ? 3 : 2, m * n, want, kk, seed);
    free(x), free(w), free(b), free(want);
  } else if (strcmp(k->op, "conv2d") == 0 || strcmp(k->op, "depthwise_conv2d") == 0) {
    int dw = strcmp(k->op, "depthwise_conv2d") == 0;
    long nb = Param(k, "N"), c = Param(k, "C"), h = Param(k, "H"), w = Param(k, "W");
    long kk = dw ? c : Param(k, "K"), r = Param(k, "R"), s = Param(k, "S");
    long stride = Param(k, "stride"), pad = Param(k, "pad");
    long oh = (h + 2 * pad - r) / stride + 1, ow = (w + 2 * pad - s) / stride + 1;
    long sizes[] = {nb * c * h * w, dw ? c * r * s : kk * c * r * s};
    float *in = Filled(sizes[0], seed), *f = Filled(sizes[1], seed + 1);
    double* want = malloc(sizeof(double) * nb * kk * oh * ow);
    Conv(in, f, want, nb, c, h, w, kk, r, s, stride, pad, dw);
    bad = Check(k, sizes, 2, nb * kk * oh * ow, want, dw ? r * s : c * r * s, seed);
    free(in), free(f), free(want);
  } else {
    printf("%s: op %s has no check in this example\n", k->function, k->op);
    bad = 1;
  }
  return bad;
}

int main(void) {
  int failures = 0;
  for (int i = 0; i < tuneforge_kernels_num_kernels(); ++i)
    failures += CheckKernel(tuneforge_kernels_kernel(i));
  return failures == 0 ? 0 : 1;
}
