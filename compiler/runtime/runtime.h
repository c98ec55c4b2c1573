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

// Element type of a kernel argument; the values are the wire format's
// (tuneforge.v1.ElementType). Little-endian, as on every host we support.
enum class ElementType : int { kFloat32 = 0, kUInt8 = 1, kInt8 = 2, kInt32 = 3 };
int ElementBytes(ElementType type);
const char* ElementTypeName(ElementType type);  // "float32", "uint8", "int8", "int32"
bool IsKnownElementType(int value);

// How an input buffer is filled: values uniform in [low, high). float32: low + (high -
// low) * k / 2^24 for a random 24-bit k, computed in double and rounded once, so every
// machine makes the same floats; integer types: every integer in [low, high) (both
// integral, within the type). Default: [-1, 1) float32, the fill of every float task.
struct FillSpec {
  ElementType type = ElementType::kFloat32;
  double low = -1;
  double high = 1;
};
// The type's full range for integers ([0, 256) for uint8, [-128, 128) for int8, [-2^16,
// 2^16) for int32), [-1, 1) for float32.
FillSpec DefaultFill(ElementType type);
// Empty when `spec` is a fill FillBuffer can make; otherwise what is wrong with it.
std::string CheckFill(const FillSpec& spec);

// Deterministic input data shared by server (reference) and agent (measurement):
// buffer `buffer_index` of a request with `seed` gets `n` elements of `spec`, each a
// function of (seed, buffer_index, position) only. `spec` must pass CheckFill.
void FillBuffer(uint64_t seed, int buffer_index, const FillSpec& spec, void* data, int64_t n);
// The float32 fill in [-1, 1).
void FillBuffer(uint64_t seed, int buffer_index, float* data, int64_t n);

// Element i of a buffer of `type`, as a double (exact for every type).
double ElementAt(ElementType type, const void* data, int64_t i);
// Fills a buffer with a value no correct kernel leaves everywhere: NaN for float32,
// 0xA5 bytes for the integer types (a kernel that writes nothing then fails the check
// unless every expected element happens to be that value).
void PoisonBuffer(ElementType type, void* data, int64_t n);

// float32 little-endian bytes (a request's expected output, the wire format) as
// floats: a copy, since a proto's bytes need not be aligned. A trailing partial float
// is dropped.
std::vector<float> FloatsFromBytes(const std::string& bytes);

// Checks `actual` against `expected`: |a - e| <= atol + rtol * |e| everywhere and no
// NaN. Returns the index of the first mismatch, or -1 when all match.
int64_t FirstMismatch(const float* actual, const float* expected, int64_t n, double atol,
                      double rtol);
// The same for buffers of `type` (integer elements compared as exact doubles).
int64_t FirstMismatch(ElementType type, const void* actual, const void* expected, int64_t n,
                      double atol, double rtol);

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
