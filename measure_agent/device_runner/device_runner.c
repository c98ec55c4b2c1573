/* tuneforge-runner: the small program that runs one kernel on a device (issue 21).
 *
 * Dependency-free C (libc and libdl only), cross-built for each architecture the
 * project's build has a cross compiler for (measure_agent/CMakeLists.txt), and run on
 * the device through a launcher: here `qemu-aarch64 -L /usr/aarch64-linux-gnu`, on a
 * farm `ssh board` or `adb shell`. It loads the kernel's shared object, fills its
 * buffers from files, runs the prepack entry once, times `runs` calls of the kernel,
 * runs the unpack entry, writes the output buffer to its file and prints one line:
 *
 *   ok seconds=<median of the runs> runs=<n>
 *   error <what went wrong>          (exit status 1)
 *
 * usage: tuneforge-runner KERNEL.so ENTRY PREPACK|- UNPACK|- RUNS BUFFER...
 *   BUFFER is one kernel argument, in entry-point order:
 *     in:N:PATH    N floats read from PATH (an input)
 *     out:N:PATH   N floats written to PATH after the run (the output)
 *     tmp:N        N floats of scratch (the kernel's internal layouts)
 *
 * The kernel's parallel loops call tf_parallel_for, which this program exports
 * (linked with -rdynamic) and runs serially: a device runner measures one core; the
 * host's thread pool is not part of a device's kernel.
 */
#define _POSIX_C_SOURCE 200809L
#include <dlfcn.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

typedef int32_t (*Entry)(void**);

void tf_parallel_for(int64_t n, int32_t num_threads, void (*fn)(int64_t, void*), void* closure) {
  (void)num_threads;
  for (int64_t i = 0; i < n; ++i) fn(i, closure);
}

static int Fail(const char* what, const char* detail) {
  printf("error %s%s%s\n", what, detail ? ": " : "", detail ? detail : "");
  return 1;
}

static double Now(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return (double)t.tv_sec + (double)t.tv_nsec * 1e-9;
}

static int CompareDoubles(const void* a, const void* b) {
  double x = *(const double*)a, y = *(const double*)b;
  return x < y ? -1 : x > y;
}

int main(int argc, char** argv) {
  if (argc < 7) return Fail("usage: tuneforge-runner KERNEL.so ENTRY PREPACK|- UNPACK|- RUNS BUFFER...", NULL);
  const int runs = atoi(argv[5]);
  if (runs < 1 || runs > 100000) return Fail("RUNS must be 1..100000, got", argv[5]);
  void* lib = dlopen(argv[1], RTLD_NOW | RTLD_LOCAL);
  if (!lib) return Fail("cannot load the kernel", dlerror());
  Entry entry = (Entry)dlsym(lib, argv[2]);
  if (!entry) return Fail("no entry symbol", argv[2]);
  Entry prepack = NULL, unpack = NULL;
  if (strcmp(argv[3], "-") != 0 && !(prepack = (Entry)dlsym(lib, argv[3]))) return Fail("no prepack symbol", argv[3]);
  if (strcmp(argv[4], "-") != 0 && !(unpack = (Entry)dlsym(lib, argv[4]))) return Fail("no unpack symbol", argv[4]);

  const int count = argc - 6;
  void** buffers = calloc((size_t)count, sizeof(void*));
  const char** out_path = calloc((size_t)count, sizeof(char*));
  long* sizes = calloc((size_t)count, sizeof(long));
  if (!buffers || !out_path || !sizes) return Fail("out of memory", NULL);
  for (int i = 0; i < count; ++i) {
    char* spec = argv[6 + i];
    char* kind = strtok(spec, ":");
    char* n_text = strtok(NULL, ":");
    char* path = strtok(NULL, "");
    long n = n_text ? atol(n_text) : 0;
    if (!kind || n < 1) return Fail("bad buffer (in:N:PATH, out:N:PATH or tmp:N)", argv[6 + i]);
    sizes[i] = n;
    size_t bytes = ((size_t)n * sizeof(float) + 63) / 64 * 64;
    buffers[i] = aligned_alloc(64, bytes);
    if (!buffers[i]) return Fail("out of memory for a buffer", n_text);
    memset(buffers[i], 0, bytes);
    if (strcmp(kind, "in") == 0) {
      FILE* f = path ? fopen(path, "rb") : NULL;
      if (!f) return Fail("cannot read input", path);
      size_t got = fread(buffers[i], sizeof(float), (size_t)n, f);
      fclose(f);
      if (got != (size_t)n) return Fail("input file too short", path);
    } else if (strcmp(kind, "out") == 0) {
      if (!path) return Fail("output buffer without a path", NULL);
      out_path[i] = path;
    } else if (strcmp(kind, "tmp") != 0) {
      return Fail("unknown buffer kind", kind);
    }
  }

  if (prepack && prepack(buffers) != 0) return Fail("prepack returned non-zero", NULL);
  double* seconds = calloc((size_t)runs, sizeof(double));
  if (!seconds) return Fail("out of memory", NULL);
  for (int r = 0; r < runs; ++r) {
    double start = Now();
    if (entry(buffers) != 0) return Fail("kernel returned non-zero", NULL);
    seconds[r] = Now() - start;
  }
  if (unpack && unpack(buffers) != 0) return Fail("unpack returned non-zero", NULL);
  for (int i = 0; i < count; ++i) {
    if (!out_path[i]) continue;
    FILE* f = fopen(out_path[i], "wb");
    if (!f || fwrite(buffers[i], sizeof(float), (size_t)sizes[i], f) != (size_t)sizes[i]) {
      return Fail("cannot write output", out_path[i]);
    }
    fclose(f);
  }
  qsort(seconds, (size_t)runs, sizeof(double), CompareDoubles);
  printf("ok seconds=%.9g runs=%d\n", seconds[runs / 2], runs);
  return 0;
}
