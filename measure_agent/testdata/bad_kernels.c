// Test kernels that misbehave, one entry point each, all with the (A, B, C) buffers of
// add_kernel.c. The sandbox must turn every one of them into a MeasureResult.
#include <fcntl.h>
#include <netinet/in.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

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

// ---------------------------------------------------------------------------------
// Hostile kernels: each computes the right answer (where it can) and tries something
// a kernel must not be able to do. The sandbox must turn every one into a
// measurement error, and the agent must go on serving.

static void add(float** b) {
  for (int i = 0; i < kTestElements; ++i) b[2][i] = b[0][i] + b[1][i];
}

// Writes one element past the end of its output (kTestElements floats end on a page
// boundary, where the guard page is).
int32_t oob_write_kernel(void** buffers) {
  float** b = (float**)buffers;
  add(b);
  ((volatile float*)b[2])[kTestElements] = 1.0f;
  return 0;
}

// Right answer, but changes its inputs: on its first call it swaps A[5] and B[5], so
// every sum (the output) stays exactly right and only the inputs check can see it.
int32_t input_write_kernel(void** buffers) {
  static int calls = 0;
  float** b = (float**)buffers;
  if (calls++ == 0) {
    float t = b[0][5];
    b[0][5] = b[1][5];
    b[1][5] = t;
  }
  add(b);
  return 0;
}

int32_t fork_kernel(void** buffers) {
  add((float**)buffers);
  pid_t pid = fork();
  if (pid == 0) _exit(0);
  return 0;
}

int32_t socket_kernel(void** buffers) {
  add((float**)buffers);
  int fd = socket(AF_INET, SOCK_STREAM, 0);
  if (fd >= 0) close(fd);
  return 0;
}

int32_t kill_parent_kernel(void** buffers) {
  add((float**)buffers);
  kill(getppid(), SIGKILL);
  return 0;
}

// Allocates and touches memory until there is none left.
int32_t memory_kernel(void** buffers) {
  add((float**)buffers);
  for (;;) {
    char* p = (char*)malloc((size_t)1 << 26);
    memset(p, 1, (size_t)1 << 26);
  }
  return 0;
}

// Computes nothing and tries to forge the verdict instead: a result file in its
// sandbox directory (the second argument of its command line), as the sandbox of
// old read one, and an "ok" on every descriptor that might be the parent's.
int32_t forge_kernel(void** buffers) {
  (void)buffers;
  char cmdline[4096];
  int fd = open("/proc/self/cmdline", O_RDONLY);
  ssize_t n = fd >= 0 ? read(fd, cmdline, sizeof(cmdline) - 1) : -1;
  if (fd >= 0) close(fd);
  if (n > 0) {
    cmdline[n] = '\0';
    const char* arg = cmdline;
    for (int i = 0; i < 2 && arg < cmdline + n; ++i) arg += strlen(arg) + 1;
    char path[4200];
    snprintf(path, sizeof(path), "%s/result.pb", arg);
    // MeasureResult{costs: [1e-9]} in protobuf wire format.
    static const unsigned char forged[] = {0x12, 0x08, 0x95, 0xd6, 0x26, 0xe8,
                                           0x0b, 0x2e, 0x11, 0x3e};
    int out = open(path, O_WRONLY | O_CREAT | O_TRUNC, 0600);
    if (out >= 0) {
      ssize_t w = write(out, forged, sizeof(forged));
      (void)w;
      close(out);
    }
  }
  // A reply header saying "ok", on the descriptors the control socket could be.
  const int32_t ok[2] = {1, 0};
  for (int d = 3; d < 16; ++d) {
    ssize_t w = send(d, ok, sizeof(ok), MSG_NOSIGNAL | MSG_DONTWAIT);
    (void)w;
  }
  return 0;
}

// Tries to write outside its sandbox directory, at $TUNEFORGE_TEST_ESCAPE_PATH;
// returns 9 when that was refused.
int32_t escape_kernel(void** buffers) {
  add((float**)buffers);
  const char* path = getenv("TUNEFORGE_TEST_ESCAPE_PATH");
  if (path == NULL) return 8;
  int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC, 0600);
  if (fd < 0) return 9;
  ssize_t w = write(fd, "escaped\n", 8);
  (void)w;
  close(fd);
  return 0;
}

// ---------------------------------------------------------------------------------
// Hostile device kernels, for the device runner (device_runner.c): it runs them in a
// child process and holds the verdict itself.

// Right answer, and a forged verdict: result lines with a fake time on its stdout and
// stderr, and on the runner's own stdout through /proc (refused: the runner is not
// dumpable).
int32_t device_fake_time_kernel(void** buffers) {
  add((float**)buffers);
  static const char kLine[] = "ok seconds=1e-12 runs=3\nok nonce=0000000000000000 seconds=1e-12 runs=3\n";
  ssize_t w = write(1, kLine, sizeof(kLine) - 1);
  w = write(2, kLine, sizeof(kLine) - 1);
  char path[64];
  snprintf(path, sizeof(path), "/proc/%d/fd/1", (int)getppid());
  int fd = open(path, O_WRONLY);
  if (fd >= 0) {
    w = write(fd, kLine, sizeof(kLine) - 1);
    close(fd);
  }
  (void)w;
  return 0;
}

// Right on its first call, then skips the work (a kernel that is fast only when timed).
int32_t device_lazy_kernel(void** buffers) {
  static int calls = 0;
  if (calls++ == 0) add((float**)buffers);
  return 0;
}

// Computes once, then replays that output from memory on every later call (fast, and
// right as long as its inputs never change): the second input set must catch it.
int32_t replay_kernel(void** buffers) {
  static float first[kTestElements];
  static int calls = 0;
  float** b = (float**)buffers;
  if (calls++ == 0) {
    add(b);
    memcpy(first, b[2], sizeof(first));
  } else {
    memcpy(b[2], first, sizeof(first));
  }
  return 0;
}
