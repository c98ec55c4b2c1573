/* Runs a model library made by `tuneforge deploy --model M.onnx -o DIR` through its C
 * API, with nothing else: no tuneforge, no LLVM, no onnxruntime.
 *
 *   cc model_example.c -I DIR -L DIR -ltuneforge_model -Wl,-rpath,DIR -o model_example
 *   ./model_example DIR [--runs N] [--out OUTDIR] [INPUT0.bin INPUT1.bin ...]
 *
 * Inputs are raw float32 files (C order) of exactly the input's size, in the model's
 * input order; without them every input is filled with a fixed pattern. --out writes
 * output i to OUTDIR/output<i>.bin (raw float32). --runs N times N more inferences and
 * prints the median and the minimum in milliseconds (--samples: every one). */
#define _POSIX_C_SOURCE 199309L
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "tuneforge_model.h"

static double now_ms(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return t.tv_sec * 1e3 + t.tv_nsec / 1e6;
}

static int compare(const void* a, const void* b) {
  double x = *(const double*)a, y = *(const double*)b;
  return x < y ? -1 : x > y;
}

static int read_floats(const char* path, float* to, int64_t n) {
  FILE* f = fopen(path, "rb");
  if (!f) {
    fprintf(stderr, "cannot open %s\n", path);
    return -1;
  }
  size_t got = fread(to, sizeof(float), (size_t)n, f);
  int extra = fgetc(f) != EOF;
  fclose(f);
  if (got != (size_t)n || extra) {
    fprintf(stderr, "%s: expected exactly %lld floats\n", path, (long long)n);
    return -1;
  }
  return 0;
}

int main(int argc, char** argv) {
  if (argc < 2) {
    fprintf(stderr, "usage: %s DIR [--runs N] [--out OUTDIR] [INPUT.bin ...]\n", argv[0]);
    return 2;
  }
  const char* dir = argv[1];
  const char* out_dir = NULL;
  int runs = 0, num_files = 0, samples = 0;
  const char* files[64];
  for (int i = 2; i < argc; ++i) {
    if (strcmp(argv[i], "--runs") == 0 && i + 1 < argc) {
      runs = atoi(argv[++i]);
    } else if (strcmp(argv[i], "--samples") == 0) {
      samples = 1;
    } else if (strcmp(argv[i], "--out") == 0 && i + 1 < argc) {
      out_dir = argv[++i];
    } else if (num_files < 64) {
      files[num_files++] = argv[i];
    }
  }
  tf_model* model = tf_model_load(dir);
  if (!model) {
    fprintf(stderr, "tf_model_load: %s\n", tf_model_error());
    return 1;
  }
  const int ni = tf_model_num_inputs(), no = tf_model_num_outputs();
  if (num_files != 0 && num_files != ni) {
    fprintf(stderr, "the model has %d inputs, %d files given\n", ni, num_files);
    return 2;
  }
  float** inputs = calloc((size_t)ni + 1, sizeof(float*));
  float** outputs = calloc((size_t)no + 1, sizeof(float*));
  for (int i = 0; i < ni; ++i) {
    const int64_t n = tf_model_input_elements(i);
    inputs[i] = malloc((size_t)n * sizeof(float));
    printf("input  %d: %s [", i, tf_model_input_name(i));
    for (int d = 0; d < tf_model_input_rank(i); ++d) printf(d ? ", %lld" : "%lld", (long long)tf_model_input_shape(i)[d]);
    printf("]\n");
    if (num_files) {
      if (read_floats(files[i], inputs[i], n) != 0) return 1;
    } else {
      for (int64_t j = 0; j < n; ++j) inputs[i][j] = (float)((j * 7919 % 2001) - 1000) / 1000.0f;
    }
  }
  for (int i = 0; i < no; ++i) {
    outputs[i] = malloc((size_t)tf_model_output_elements(i) * sizeof(float));
    printf("output %d: %s [", i, tf_model_output_name(i));
    for (int d = 0; d < tf_model_output_rank(i); ++d) printf(d ? ", %lld" : "%lld", (long long)tf_model_output_shape(i)[d]);
    printf("]\n");
  }
  if (tf_model_run(model, (const float* const*)inputs, outputs) != 0) {
    fprintf(stderr, "tf_model_run: %s\n", tf_model_error());
    return 1;
  }
  if (out_dir) {
    for (int i = 0; i < no; ++i) {
      char path[4096];
      snprintf(path, sizeof path, "%s/output%d.bin", out_dir, i);
      FILE* f = fopen(path, "wb");
      if (!f || fwrite(outputs[i], sizeof(float), (size_t)tf_model_output_elements(i), f) !=
                    (size_t)tf_model_output_elements(i)) {
        fprintf(stderr, "cannot write %s\n", path);
        return 1;
      }
      fclose(f);
      printf("wrote %s\n", path);
    }
  }
  if (runs > 0) {
    double* ms = malloc((size_t)runs * sizeof(double));
    for (int r = 0; r < runs; ++r) {
      const double start = now_ms();
      if (tf_model_run(model, (const float* const*)inputs, outputs) != 0) {
        fprintf(stderr, "tf_model_run: %s\n", tf_model_error());
        return 1;
      }
      ms[r] = now_ms() - start;
    }
    if (samples) {
      printf("samples_ms:");
      for (int r = 0; r < runs; ++r) printf(" %.6f", ms[r]);
      printf("\n");
    }
    qsort(ms, (size_t)runs, sizeof(double), compare);
    printf("runs: %d, median %.4f ms, min %.4f ms\n", runs, ms[runs / 2], ms[0]);
    free(ms);
  }
  for (int i = 0; i < ni; ++i) free(inputs[i]);
  for (int i = 0; i < no; ++i) free(outputs[i]);
  free(inputs);
  free(outputs);
  tf_model_free(model);
  return 0;
}
