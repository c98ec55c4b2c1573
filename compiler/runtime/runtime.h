// The tiny runtime that generated kernels call, and that every process loading a
// kernel (agent sandbox, tests, deploy) links and exports. Kept free of LLVM so the
// agent stays small. C ABI: generated code calls these by name.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

extern "C" {

// Calls fn(i, closure) for every i in [0, n), spread over up to `num_threads` threads
// (the calling thread is one of them), and returns when all calls have returned.
// Thread-safe; nested calls run serially on the calling thread.
void tf_parallel_for(int64_t n, int32_t num_threads, void (*fn)(int64_t, void*),
                     void* closure);

// The largest thread count a parallel loop asked for since the last call and did not
// get (the system refused to create the threads, or more than the pool's 256), or 0
// when every loop got its threads; *got (if not null) is how many that loop ran on.
// Clears the record. The loop itself still runs, correctly, on fewer threads; a
// measurement must not: timing treats a shortfall as a failed measurement.
int32_t tf_take_thread_shortfall(int32_t* got);

}  // extern "C"

namespace tuneforge::runtime {

// Signature of every kernel entry point: buffers in the LoweredFunc's param order.
// Returns 0 on success.
using KernelEntry = int32_t (*)(void** buffers);

// Deterministic input data shared by server (reference) and agent (measurement):
// buffer `buffer_index` of a request with `seed` gets values uniform in [-1, 1).
void FillBuffer(uint64_t seed, int buffer_index, float* data, int64_t n);

// float32 little-endian bytes (a request's expected output, the wire format) as
// floats: a copy, since a proto's bytes need not be aligned. A trailing partial float
// is dropped.
std::vector<float> FloatsFromBytes(const std::string& bytes);

// Checks `actual` against `expected`: |a - e| <= atol + rtol * |e| everywhere and no
// NaN. Returns the index of the first mismatch, or -1 when all match.
int64_t FirstMismatch(const float* actual, const float* expected, int64_t n, double atol,
                      double rtol);

// Pins the calling thread to cpus[0] and every pool worker created from now on to
// cpus[1], cpus[2], ... (round robin): a parallel loop's participants then stay on
// distinct CPUs for the whole measurement instead of wherever the scheduler puts (and
// moves) them. For a process that times kernels (the agent's sandbox child), called
// before its first parallel loop; workers that already exist are not moved. Empty:
// no-op. Returns false if the calling thread could not be pinned.
bool PinThreads(const std::vector<int>& cpus);
// The CPUs the calling thread may run on (sched_getaffinity), ascending.
std::vector<int> AllowedCpus();

}  // namespace tuneforge::runtime
