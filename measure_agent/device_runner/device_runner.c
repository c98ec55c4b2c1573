/* tuneforge-runner: the small program that runs one kernel on a device (issue 21).
 *
 * Dependency-free C (libc and libdl only), cross-built for each architecture the
 * project's build has a cross compiler for (measure_agent/CMakeLists.txt), and run on
 * the device through a launcher: here `qemu-aarch64 -L /usr/aarch64-linux-gnu`, on a
 * farm `ssh board` or `adb shell`.
 *
 * usage: tuneforge-runner KERNEL.so ENTRY PREPACK|- UNPACK|- RUNS BUFFER... < NONCE
 *   BUFFER is one kernel argument, in entry-point order:
 *     in:N:PATH    N floats read from PATH (an input)
 *     out:N:PATH   N floats written to PATH after the runs (the output)
 *     tmp:N        N floats of scratch (the kernel's internal layouts)
 *   and, once, not a kernel argument:
 *     check:N:ATOL:RTOL:PATH   the expected output (N floats): read, then removed,
 *                              before the kernel is loaded
 *   optionally, a second input set (none of them kernel arguments):
 *     alt:N:PATH               after an in: buffer, its second input (N floats)
 *     altcheck:N:PATH          the expected output of the second set (read, removed)
 *   Buffers of other element types (the int8 kernels' uint8, int8 and int32) in bytes:
 *   inb:BYTES:PATH, outb:BYTES:PATH, tmpb:BYTES, altb:BYTES:PATH, and the exact checks
 *   checkb:BYTES:PATH and altcheckb:BYTES:PATH (bit for bit; the output poisoned with
 *   0xA5 bytes before every run). Either kind of check goes with either kind of output
 *   of the same size in bytes.
 *   with which the runs alternate between the two sets (run 1 the first, run 2 the
 *   second, ...; the inputs refilled and the prepack re-run between runs, untimed), so
 *   a kernel that replays an output it computed before fails the check.
 *   stdin: one line, the nonce the agent made for this run.
 *
 * The kernel is hostile until proven otherwise (issue 63). It runs in a child process
 * that this one forks before loading it; this process (the verdict's holder) never
 * runs kernel code:
 *   - the buffers are shared memory; this process fills the inputs, poisons the output
 *     with NaN before every timed run and checks it against the expected output after
 *     every run (the child never has the expected output: it is scrubbed from the
 *     child's copy of memory, and its file removed, before the kernel loads), and checks
 *     at the end that every input is bit for bit what it wrote; with a second input
 *     set, consecutive runs compute from different inputs;
 *   - it times each run with its own clock around a round trip on a pipe ("run once"),
 *     less the round trip of an empty command;
 *   - the child's stdout and stderr are a pipe this process reads: a kernel that
 *     prints anything (a fake result line, say) is an error; and this process is not
 *     dumpable (PR_SET_DUMPABLE 0: no /proc/<pid>/mem or /fd of it for another
 *     unprivileged process), so the kernel can neither print on this process's
 *     stdout nor read its nonce, and the agent accepts only a line with the nonce:
 *
 *   ok nonce=<nonce> seconds=<median of the runs> runs=<n>
 *   error <what went wrong>          (exit status 1)
 *
 * The kernel's parallel loops call tf_parallel_for, which this program exports
 * (linked with -rdynamic) and runs serially: a device runner measures one core; the
 * host's thread pool is not part of a device's kernel.
 */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

typedef int32_t (*Entry)(void**);

void tf_parallel_for(int64_t n, int32_t num_threads, void (*fn)(int64_t, void*), void* closure) {
  (void)num_threads;
  for (int64_t i = 0; i < n; ++i) fn(i, closure);
}

static pid_t g_child = -1;

static int Fail(const char* what, const char* detail) {
  if (g_child > 0) {
    kill(g_child, SIGKILL);
    waitpid(g_child, NULL, 0);
  }
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

/* 64-byte aligned, shared with the child (MAP_SHARED before fork), zeroed. */
static void* SharedBytes(long n) {
  size_t bytes = ((size_t)n + 63) / 64 * 64;
  void* p = mmap(NULL, bytes, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
  return p == MAP_FAILED ? NULL : p;
}

static int ReadBytes(const char* path, char* to, long n) {
  FILE* f = path ? fopen(path, "rb") : NULL;
  if (!f) return 0;
  size_t got = fread(to, 1, (size_t)n, f);
  fclose(f);
  return got == (size_t)n;
}

static int ReadAll(int fd, void* to, size_t n) {
  size_t done = 0;
  while (done < n) {
    ssize_t r = read(fd, (char*)to + done, n - done);
    if (r < 0 && errno == EINTR) continue;
    if (r <= 0) return 0;
    done += (size_t)r;
  }
  return 1;
}

/* Whether any input buffer differs, bit for bit, from the copy it was filled from. */
static int InputsChanged(char** copies, void** buffers, const long* sizes, int args) {
  for (int i = 0; i < args; ++i) {
    if (copies[i] && memcmp(copies[i], buffers[i], (size_t)sizes[i]) != 0) return 1;
  }
  return 0;
}

/* The child: loads the kernel and runs what it is told, one byte per command
 * ('P' prepack, 'R' the entry once, 'U' unpack, 'N' nothing), one byte per answer
 * (0 done, 1 the kernel returned non-zero); the first answer says whether it loaded.
 * Exits when the command pipe closes. */
static void ChildMain(char** argv, void** buffers, int cmd, int reply, int printed) {
  int null_fd = open("/dev/null", O_RDWR);
  if (null_fd >= 0) dup2(null_fd, 0);
  dup2(printed, 1);
  dup2(printed, 2);
  unsigned char ok = 0;
  void* lib = dlopen(argv[1], RTLD_NOW | RTLD_LOCAL);
  Entry entry = lib ? (Entry)dlsym(lib, argv[2]) : NULL;
  Entry prepack = lib && strcmp(argv[3], "-") != 0 ? (Entry)dlsym(lib, argv[3]) : NULL;
  Entry unpack = lib && strcmp(argv[4], "-") != 0 ? (Entry)dlsym(lib, argv[4]) : NULL;
  if (!lib) ok = 2;
  else if (!entry || (strcmp(argv[3], "-") != 0 && !prepack) || (strcmp(argv[4], "-") != 0 && !unpack)) ok = 3;
  if (write(reply, &ok, 1) != 1 || ok != 0) _exit(1);
  unsigned char c;
  while (ReadAll(cmd, &c, 1)) {
    Entry e = c == 'P' ? prepack : c == 'R' ? entry : c == 'U' ? unpack : NULL;
    unsigned char status = e && e(buffers) != 0 ? 1 : 0;
    if (write(reply, &status, 1) != 1) break;
  }
  _exit(0);
}

/* Sends one command to the child and waits for its answer: 0 done, 1 the kernel
 * returned non-zero, -1 the child is gone. */
static int Command(int cmd, int reply, unsigned char c) {
  unsigned char status;
  if (write(cmd, &c, 1) != 1 || !ReadAll(reply, &status, 1)) return -1;
  return status;
}

static int ChildGone(const char* during) {
  int status = 0;
  char why[96];
  if (g_child > 0 && waitpid(g_child, &status, 0) == g_child) {
    g_child = -1;
    if (WIFSIGNALED(status)) snprintf(why, sizeof why, "%s (signal %d)", during, WTERMSIG(status));
    else snprintf(why, sizeof why, "%s (exit %d)", during, WIFEXITED(status) ? WEXITSTATUS(status) : -1);
  } else {
    snprintf(why, sizeof why, "%s", during);
  }
  return Fail("the kernel's process ended", why);
}

int main(int argc, char** argv) {
  /* Before anything else: no other unprivileged process (the kernel's among them)
   * may read this one's memory or descriptors. */
  prctl(PR_SET_DUMPABLE, 0, 0, 0, 0);
  signal(SIGPIPE, SIG_IGN);
  if (argc < 7) {
    return Fail("usage: tuneforge-runner KERNEL.so ENTRY PREPACK|- UNPACK|- RUNS BUFFER... < NONCE", NULL);
  }
  char nonce[72] = {0};
  {
    size_t n = 0;
    while (n + 1 < sizeof nonce) {
      ssize_t r = read(0, nonce + n, 1);
      if (r < 0 && errno == EINTR) continue;
      if (r <= 0 || nonce[n] == '\n') break;
      ++n;
    }
    nonce[n] = '\0';
    if (n < 16) return Fail("no nonce on stdin (16 to 70 characters)", NULL);
  }
  const int runs = atoi(argv[5]);
  if (runs < 1 || runs > 100000) return Fail("RUNS must be 1..100000, got", argv[5]);

  const int count = argc - 6;
  void** buffers = calloc((size_t)count, sizeof(void*));
  const char** out_path = calloc((size_t)count, sizeof(char*));
  long* sizes = calloc((size_t)count, sizeof(long)); /* in bytes */
  /* Private copies of the inputs, per input set. */
  char** inputs[2] = {calloc((size_t)count, sizeof(char*)), calloc((size_t)count, sizeof(char*))};
  char* expected[2] = {NULL, NULL};
  long expected_n = 0; /* bytes */
  int exact = -1;      /* the checks: 1 bit for bit (checkb), 0 floats within the tolerance */
  double abs_tol = 0, rel_tol = 0;
  int output = -1, args = 0, last_input = -1;
  if (!buffers || !out_path || !sizes || !inputs[0] || !inputs[1]) return Fail("out of memory", NULL);
  for (int i = 0; i < count; ++i) {
    char* spec = argv[6 + i];
    char* kind = strtok(spec, ":");
    char* n_text = strtok(NULL, ":");
    long n = n_text ? atol(n_text) : 0;
    if (!kind || n < 1 || n > (1L << 40)) {
      return Fail("bad buffer (in:N:PATH, out:N:PATH, tmp:N, check:N:ATOL:RTOL:PATH, alt:N:PATH or altcheck:N:PATH; "
                  "inb:, outb:, tmpb:, checkb:BYTES:PATH, altb:, altcheckb: in bytes)",
                  argv[6 + i]);
    }
    /* A kind ending in 'b' counts bytes; the others floats. */
    const size_t kind_length = strlen(kind);
    const int in_bytes = kind_length > 1 && kind[kind_length - 1] == 'b';
    if (in_bytes) kind[kind_length - 1] = '\0';
    const long bytes = in_bytes ? n : n * (long)sizeof(float);
    if (strcmp(kind, "check") == 0 || strcmp(kind, "altcheck") == 0) {
      const int set = kind[0] == 'a';
      const char* atol_text = set || in_bytes ? "0" : strtok(NULL, ":");
      const char* rtol_text = set || in_bytes ? "0" : strtok(NULL, ":");
      char* path = strtok(NULL, "");
      if (!atol_text || !rtol_text || !path || expected[set]) {
        return Fail("bad check (one check:N:ATOL:RTOL:PATH or checkb:BYTES:PATH, at most one altcheck)", NULL);
      }
      if (!set) {
        abs_tol = atof(atol_text);
        rel_tol = atof(rtol_text);
        expected_n = bytes;
        exact = in_bytes;
      } else if (bytes != expected_n || in_bytes != exact) {
        return Fail("altcheck must follow a check of the same kind and size", NULL);
      }
      expected[set] = malloc((size_t)bytes);
      if (!expected[set] || !ReadBytes(path, expected[set], bytes)) return Fail("cannot read the expected output", path);
      unlink(path);
      continue;
    }
    if (strcmp(kind, "alt") == 0) {
      char* path = strtok(NULL, "");
      if (last_input < 0 || inputs[1][last_input] || bytes != sizes[last_input]) {
        return Fail("alt:N:PATH must follow an in: buffer of the same size", argv[6 + i]);
      }
      inputs[1][last_input] = malloc((size_t)bytes);
      if (!inputs[1][last_input] || !ReadBytes(path, inputs[1][last_input], bytes)) {
        return Fail("cannot read input", path);
      }
      continue;
    }
    char* path = strtok(NULL, "");
    sizes[args] = bytes;
    buffers[args] = SharedBytes(bytes);
    if (!buffers[args]) return Fail("out of memory for a buffer", n_text);
    if (strcmp(kind, "in") == 0) {
      inputs[0][args] = malloc((size_t)bytes);
      if (!inputs[0][args] || !ReadBytes(path, inputs[0][args], bytes)) return Fail("cannot read input", path);
      memcpy(buffers[args], inputs[0][args], (size_t)bytes);
      last_input = args;
    } else if (strcmp(kind, "out") == 0) {
      if (!path || output >= 0) return Fail("one output buffer with a path", NULL);
      out_path[args] = path;
      output = args;
    } else if (strcmp(kind, "tmp") != 0) {
      return Fail("unknown buffer kind", kind);
    }
    ++args;
  }
  if (output < 0 || !expected[0] || expected_n != sizes[output]) {
    return Fail("needs one out: buffer and a check: of the same size", NULL);
  }
  /* Two input sets: every in: buffer has its alt:, and the second set its altcheck:. */
  int sets = expected[1] ? 2 : 1;
  for (int i = 0; i < args; ++i) {
    if (inputs[0][i] && (inputs[1][i] != NULL) != (sets == 2)) {
      return Fail("a second input set needs an alt: after every in: buffer and one altcheck:", NULL);
    }
  }

  int cmd[2], reply[2], printed[2];
  if (pipe(cmd) != 0 || pipe(reply) != 0 || pipe(printed) != 0) return Fail("pipe failed", strerror(errno));
  fflush(stdout);
  g_child = fork();
  if (g_child < 0) return Fail("fork failed", strerror(errno));
  if (g_child == 0) {
    /* Nothing the verdict depends on stays in the child's copy of memory. */
    for (int set = 0; set < sets; ++set) {
      memset(expected[set], 0, (size_t)expected_n);
      free(expected[set]);
      for (int i = 0; i < args; ++i) {
        if (inputs[set][i]) memset(inputs[set][i], 0, (size_t)sizes[i]);
      }
    }
    memset(nonce, 0, sizeof nonce);
    close(cmd[1]);
    close(reply[0]);
    close(printed[0]);
    ChildMain(argv, buffers, cmd[0], reply[1], printed[1]);
  }
  close(cmd[0]);
  close(reply[1]);
  close(printed[1]);
  fcntl(printed[0], F_SETFL, O_NONBLOCK);
  unsigned char loaded = 1;
  if (!ReadAll(reply[0], &loaded, 1)) return ChildGone("while loading the kernel");
  if (loaded == 2) return Fail("cannot load the kernel", argv[1]);
  if (loaded != 0) return Fail("no entry, prepack or unpack symbol", argv[2]);

  if (Command(cmd[1], reply[0], 'P') != 0) return Fail("prepack failed", NULL);
  /* The cost of a round trip that runs nothing, taken off every run. */
  double trip = 1e9;
  for (int i = 0; i < 5; ++i) {
    double t0 = Now();
    if (Command(cmd[1], reply[0], 'N') != 0) return ChildGone("during an empty command");
    double t = Now() - t0;
    if (t < trip) trip = t;
  }
  double* seconds = calloc((size_t)runs, sizeof(double));
  if (!seconds) return Fail("out of memory", NULL);
  char* out = buffers[output];
  int set = 0;
  for (int r = 0; r < runs; ++r) {
    if (r % sets != set) {
      /* The inputs are checked before the refill would hide a write into them. */
      if (InputsChanged(inputs[set], buffers, sizes, args)) return Fail("the kernel changed its input", NULL);
      set = r % sets;
      for (int i = 0; i < args; ++i) {
        if (inputs[set][i]) memcpy(buffers[i], inputs[set][i], (size_t)sizes[i]);
      }
      if (Command(cmd[1], reply[0], 'P') != 0) return Fail("prepack failed", NULL);
    }
    if (exact) {
      memset(out, 0xA5, (size_t)expected_n);
    } else {
      for (long i = 0; i < expected_n / (long)sizeof(float); ++i) ((float*)out)[i] = NAN;
    }
    double t0 = Now();
    int status = Command(cmd[1], reply[0], 'R');
    double t = Now() - t0;
    if (status < 0) return ChildGone("during a run");
    if (status != 0) return Fail("kernel returned non-zero", NULL);
    if (Command(cmd[1], reply[0], 'U') != 0) return Fail("unpack failed", NULL);
    seconds[r] = t - (trip < t / 2 ? trip : t / 2);
    if (exact) {
      for (long i = 0; i < expected_n; ++i) {
        if (out[i] != expected[set][i]) {
          char where[160];
          snprintf(where, sizeof where, "byte %ld of run %d%s: %d vs %d", i, r + 1, set ? " (second input set)" : "",
                   (unsigned char)out[i], (unsigned char)expected[set][i]);
          return Fail("wrong answer", where);
        }
      }
      continue;
    }
    const float* want = (const float*)expected[set];
    const float* got = (const float*)out;
    for (long i = 0; i < expected_n / (long)sizeof(float); ++i) {
      double d = fabs((double)got[i] - (double)want[i]);
      if (!(d <= abs_tol + rel_tol * fabs((double)want[i]))) {
        char where[160];
        snprintf(where, sizeof where, "index %ld of run %d%s: %g vs %g", i, r + 1,
                 set ? " (second input set)" : "", (double)got[i], (double)want[i]);
        return Fail("wrong answer", where);
      }
    }
  }
  if (InputsChanged(inputs[set], buffers, sizes, args)) return Fail("the kernel changed its input", NULL);
  close(cmd[1]); /* the child exits */
  int status = 0;
  waitpid(g_child, &status, 0);
  g_child = -1;
  char said[48];
  ssize_t n = read(printed[0], said, sizeof said - 1);
  if (n > 0) {
    for (ssize_t i = 0; i < n; ++i) said[i] = said[i] >= 32 && said[i] < 127 ? said[i] : '.';
    said[n] = '\0';
    return Fail("the kernel printed (a kernel prints nothing)", said);
  }
  FILE* f = fopen(out_path[output], "wb");
  if (!f || fwrite(out, 1, (size_t)expected_n, f) != (size_t)expected_n) {
    return Fail("cannot write output", out_path[output]);
  }
  fclose(f);
  qsort(seconds, (size_t)runs, sizeof(double), CompareDoubles);
  printf("ok nonce=%s seconds=%.9g runs=%d\n", nonce, seconds[runs / 2], runs);
  return 0;
}
