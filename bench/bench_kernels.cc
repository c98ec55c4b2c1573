// `tuneforge bench kernels`: tuned tuneforge kernels side by side with the vendor
// library, in one process, on the same inputs and thread count.
//
// Per case (a TuningTask) and thread count:
//   1. tune in process: the template's Heuristics() first, then `--trials` configs from
//      the RandomPolicy SearchPolicy; each candidate is built (BuildArtifact), loaded
//      (LoadedModule), checked once against the reference (a wrong kernel can never
//      win) and timed with the agent's protocol (warm-up, `number` runs per sample
//      grown to min_sample_ms, `repeat` samples, median);
//   2. re-measure the top 3 interleaved and keep the fastest;
//   3. time that kernel and the vendor library ALTERNATELY (sample of one, sample of
//      the other, ...), medians of both, so drift on a shared machine hits both sides.
// Vendors: OpenBLAS cblas_sgemm (row-major, openblas_set_num_threads = threads) and
// oneDNN dnnl_sgemm (OpenMP threads) for matmul, one call per matrix for
// batch_matmul, sgemm plus a bias/ReLU loop for dense (tuneforge's dense packs its
// weights once, untimed; the vendors pack inside every call); oneDNN's convolution
// primitive for conv2d and depthwise. Every vendor output is checked against the
// reference too; the ratio is against the strongest vendor of the case. Debian's
// OpenBLAS picks its kernels by CPU when it loads (OPENBLAS_CORETYPE overrides it);
// on CPUs it predates (Zen 4/5 with AVX-512) its default is the AVX2 "Haswell" path,
// and oneDNN, which detects the CPU, is the strong baseline there.
//
// Nothing here is asserted: the figures are for people (BENCHMARKS.md).
#include <cblas.h>
#include <dlfcn.h>
#include <sys/resource.h>
#include <time.h>

#include <algorithm>
#include <chrono>
#include <thread>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <limits>
#include <map>
#include <optional>
#include <memory>
#include <random>
#include <set>
#include <string>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_split.h"
#include "compiler/codegen/build.h"
#include "compiler/reference/reference.h"
#include "compiler/runtime/module_loader.h"
#include "compiler/runtime/runtime.h"
#include "compiler/runtime/timing.h"
#include "compiler/support/files.h"
#include "compiler/support/log.h"
#include "compiler/support/status.h"
#include "compiler/task/task.h"
#include "compiler/templates/template.h"
#include "nlohmann/json.hpp"
#include "bench/bench_dnnl.h"
#include "bench/bench.h"
#include "cli/flags.h"
#include "tuner/search_policy.h"
#include "tuner/tuning_loop.h"

namespace tuneforge::cli {
namespace {

using nlohmann::json;

constexpr const char* kBenchKernelsUsage =
    "usage: tuneforge bench kernels [--suite quick|full|conv|depthwise|smoke] [--task TEXT]\n"
    "                               [--trials N | --config JSON] [--target TEXT]\n"
    "                               [--threads 1,2] [--min-sample-ms MS] [--seed S] [--json]\n"
    "  Tunes each case of the suite in process with the product's default search (the\n"
    "  template's heuristic configs, then N configs proposed by the default policy, the\n"
    "  XGBoost cost model, in batches of 8), then times the best kernel and every vendor\n"
    "  baseline (matmul, dense, batch_matmul: OpenBLAS cblas_sgemm and oneDNN's\n"
    "  dnnl_sgemm; batch_matmul with OpenBLAS the stronger of per-matrix threading and\n"
    "  the batch split over threads; dense with W's packing timed on both sides;\n"
    "  conv2d, depthwise, qconv2d: oneDNN's convolution, layout reorders untimed on both\n"
    "  sides)\n"
    "  alternately and prints tuneforge GFLOP/s, its share of the machine's FMA peak\n"
    "  (measured first), the strongest vendor's GFLOP/s, the ratio to it, every vendor's\n"
    "  figure, and the geometric mean of the ratios per operator and thread count.\n"
    "  --suite    quick (default, a few minutes on 2 cores: matmul, batch_matmul, dense),\n"
    "             full (the matmul family at 200 trials), conv (ResNet-18 conv2d layers vs\n"
    "             oneDNN), depthwise (MobileNet-V2 depthwise layers vs oneDNN), int8 (qmatmul\n"
    "             vs oneDNN's int8 matmul, and float32 matmuls of the same shapes for the\n"
    "             int8/float32 ratio), int8conv (qconv2d, ResNet layers, vs oneDNN's int8\n"
    "             convolution, and float32 conv2d of the same shapes), int8depthwise (the\n"
    "             depthwise layers in int8 vs oneDNN's), smoke (tiny, for tests)\n"
    "  --task     benchmark this one task instead of a suite\n"
    "  --target   the target to tune and build for, e.g. \"-mcpu=x86-64-v3\n"
    "             -mattr=+avx,+avx2,+fma\" (AVX2 only); the host's triple (default: host)\n"
    "  --config   with --task: time this config of the task's template against the\n"
    "             vendors, no search (e.g. a config from `tuneforge db best --json`)\n"
    "  --openblas-core NAME  also time OpenBLAS forced onto core type NAME (e.g. SkylakeX)\n"
    "             in a child process; by default that happens only when OpenBLAS's best\n"
    "             core here (SkylakeX with AVX-512) is not the one it loaded with\n"
    "  --trials   configs the policy proposes per case, on top of the heuristics\n"
    "             (suite default)\n"
    "  --threads  comma-separated thread counts (default 1,2)\n"
    "  --json     print JSON instead of the table\n";

struct Suite {
  std::string name;
  std::vector<std::string> tasks;
  int trials;            // configs the policy proposes per case, on top of the heuristics
  double min_sample_ms;  // final timing; tuning uses half of it
};

const std::vector<Suite>& Suites() {
  static const auto* suites = new std::vector<Suite>{
      {"smoke", {"matmul M=37 N=64 K=29", "matmul M=1 N=100 K=64", "batch_matmul B=3 M=5 N=32 K=9",
        "dense M=13 N=32 K=20 bias=1 relu=1",
        "conv2d N=1 C=16 H=9 W=9 K=32 R=3 S=3 stride=1 pad=1",
        "depthwise_conv2d N=1 C=32 H=10 W=10 R=3 S=3 stride=2 pad=1"},
       3, 2},
      {"quick",
       {"matmul M=1024 N=1024 K=1024", "matmul M=128 N=768 K=768", "matmul M=64 N=1000 K=2048",
        "batch_matmul B=12 M=128 N=128 K=64", "dense M=128 N=768 K=3072 bias=1 relu=1"},
       16,
       40},
      {"full",
       {"matmul M=1024 N=1024 K=1024", "matmul M=512 N=3072 K=768", "matmul M=128 N=768 K=768",
        "matmul M=64 N=1000 K=2048", "matmul M=1 N=4096 K=4096",
        "batch_matmul B=12 M=128 N=128 K=64", "dense M=128 N=768 K=3072 bias=1 relu=1"},
       200,
       100},
      // Every distinct convolution of ResNet-18 (batch 1): the 7x7 stem, the 3x3 stages,
      // the 3x3 stride-2 first convolutions of stages 2-4 and their 1x1 downsamples.
      {"conv",
       {"conv2d N=1 C=3 H=224 W=224 K=64 R=7 S=7 stride=2 pad=3",
        "conv2d N=1 C=64 H=56 W=56 K=64 R=3 S=3 stride=1 pad=1",
        "conv2d N=1 C=128 H=28 W=28 K=128 R=3 S=3 stride=1 pad=1",
        "conv2d N=1 C=256 H=14 W=14 K=256 R=3 S=3 stride=1 pad=1",
        "conv2d N=1 C=512 H=7 W=7 K=512 R=3 S=3 stride=1 pad=1",
        "conv2d N=1 C=64 H=56 W=56 K=128 R=3 S=3 stride=2 pad=1",
        "conv2d N=1 C=128 H=28 W=28 K=256 R=3 S=3 stride=2 pad=1",
        "conv2d N=1 C=256 H=14 W=14 K=512 R=3 S=3 stride=2 pad=1",
        "conv2d N=1 C=64 H=56 W=56 K=128 R=1 S=1 stride=2 pad=0",
        "conv2d N=1 C=128 H=28 W=28 K=256 R=1 S=1 stride=2 pad=0",
        "conv2d N=1 C=256 H=14 W=14 K=512 R=1 S=1 stride=2 pad=0"},
       16,
       40},
      // int8 GEMMs (u8 activations with zero point 128, s8 weights; requantized with
      // per-column scales as QLinearMatMul does, or the raw int32 sums as MatMulInteger)
      // against oneDNN's int8 matmul, and our float32 kernels of the same shapes.
      {"int8",
       {"qmatmul M=1024 N=1024 K=1024 a_zero=128 dtype=u8s8s32",
        "qmatmul M=128 N=768 K=768 a_zero=128 per_channel=1 dtype=u8s8u8",
        "qmatmul M=128 N=3072 K=768 a_zero=128 per_channel=1 dtype=u8s8u8",
        "qmatmul M=128 N=768 K=3072 a_zero=128 per_channel=1 dtype=u8s8u8",
        "qmatmul M=512 N=512 K=512 a_zero=128 per_channel=1 dtype=u8s8f32", "matmul M=1024 N=1024 K=1024",
        "matmul M=128 N=768 K=768", "matmul M=128 N=3072 K=768", "matmul M=128 N=768 K=3072",
        "matmul M=512 N=512 K=512"},
       16,
       40},
      // int8 convolutions (ResNet's layers: u8 activations with zero point 128, s8
      // weights, requantized per output channel as QLinearConv does) against oneDNN's
      // int8 convolution, and our float32 convolutions of the same shapes.
      {"int8conv",
       {"qconv2d N=1 C=64 H=56 W=56 K=64 R=3 S=3 stride=1 pad=1 a_zero=128 per_channel=1 dtype=u8s8u8",
        "qconv2d N=1 C=128 H=28 W=28 K=128 R=3 S=3 stride=1 pad=1 a_zero=128 per_channel=1 dtype=u8s8u8",
        "qconv2d N=1 C=256 H=14 W=14 K=256 R=3 S=3 stride=1 pad=1 a_zero=128 per_channel=1 dtype=u8s8u8",
        "qconv2d N=1 C=512 H=7 W=7 K=512 R=3 S=3 stride=1 pad=1 a_zero=128 per_channel=1 dtype=u8s8u8",
        "qconv2d N=1 C=64 H=56 W=56 K=128 R=3 S=3 stride=2 pad=1 a_zero=128 per_channel=1 dtype=u8s8u8",
        "qconv2d N=1 C=256 H=56 W=56 K=64 R=1 S=1 stride=1 pad=0 a_zero=128 per_channel=1 dtype=u8s8u8",
        "qconv2d N=1 C=64 H=56 W=56 K=256 R=1 S=1 stride=1 pad=0 a_zero=128 per_channel=1 dtype=u8s8u8",
        "conv2d N=1 C=64 H=56 W=56 K=64 R=3 S=3 stride=1 pad=1",
        "conv2d N=1 C=128 H=28 W=28 K=128 R=3 S=3 stride=1 pad=1",
        "conv2d N=1 C=256 H=14 W=14 K=256 R=3 S=3 stride=1 pad=1",
        "conv2d N=1 C=512 H=7 W=7 K=512 R=3 S=3 stride=1 pad=1",
        "conv2d N=1 C=64 H=56 W=56 K=128 R=3 S=3 stride=2 pad=1",
        "conv2d N=1 C=256 H=56 W=56 K=64 R=1 S=1 stride=1 pad=0",
        "conv2d N=1 C=64 H=56 W=56 K=256 R=1 S=1 stride=1 pad=0"},
       16,
       40},
      // MobileNet-V2's 3x3 depthwise layers (the stride-2 one reads 112^2, writes 56^2).
      {"depthwise",
       {"depthwise_conv2d N=1 C=32 H=112 W=112 R=3 S=3 stride=1 pad=1",
        "depthwise_conv2d N=1 C=96 H=112 W=112 R=3 S=3 stride=2 pad=1",
        "depthwise_conv2d N=1 C=144 H=56 W=56 R=3 S=3 stride=1 pad=1",
        "depthwise_conv2d N=1 C=192 H=28 W=28 R=3 S=3 stride=1 pad=1",
        "depthwise_conv2d N=1 C=576 H=14 W=14 R=3 S=3 stride=1 pad=1"},
       16,
       40},
      // The same layers in int8 (u8 activations with zero point 128, per-channel
      // requantized u8 out, as a QDQ MobileNetV2 has them) against oneDNN's int8
      // depthwise convolution, and the float32 ones for the int8/float32 ratio.
      {"int8depthwise",
       {"qdepthwise_conv2d N=1 C=32 H=112 W=112 R=3 S=3 stride=1 pad=1 a_zero=128 per_channel=1 dtype=u8s8u8",
        "qdepthwise_conv2d N=1 C=96 H=112 W=112 R=3 S=3 stride=2 pad=1 a_zero=128 per_channel=1 dtype=u8s8u8",
        "qdepthwise_conv2d N=1 C=144 H=56 W=56 R=3 S=3 stride=1 pad=1 a_zero=128 per_channel=1 dtype=u8s8u8",
        "qdepthwise_conv2d N=1 C=192 H=28 W=28 R=3 S=3 stride=1 pad=1 a_zero=128 per_channel=1 dtype=u8s8u8",
        "qdepthwise_conv2d N=1 C=576 H=14 W=14 R=3 S=3 stride=1 pad=1 a_zero=128 per_channel=1 dtype=u8s8u8",
        "depthwise_conv2d N=1 C=32 H=112 W=112 R=3 S=3 stride=1 pad=1",
        "depthwise_conv2d N=1 C=96 H=112 W=112 R=3 S=3 stride=2 pad=1",
        "depthwise_conv2d N=1 C=144 H=56 W=56 R=3 S=3 stride=1 pad=1",
        "depthwise_conv2d N=1 C=192 H=28 W=28 R=3 S=3 stride=1 pad=1",
        "depthwise_conv2d N=1 C=576 H=14 W=14 R=3 S=3 stride=1 pad=1"},
       16,
       40},
  };
  return *suites;
}

// 64-byte aligned buffer (a cache line; an AVX-512 vector) of `n` elements of `type`;
// `data` is the float32 view, `raw()` the untyped one.
struct AlignedBuffer {
  struct Free {
    void operator()(float* p) const { std::free(p); }
  };
  explicit AlignedBuffer(int64_t n, runtime::ElementType element_type = runtime::ElementType::kFloat32)
      : size(n),
        type(element_type),
        data(static_cast<float*>(std::aligned_alloc(
            64, static_cast<size_t>((std::max<int64_t>(n, 1) * runtime::ElementBytes(element_type) + 63) / 64 *
                                    64)))) {
    TF_CHECK(data != nullptr, "out of memory");
  }
  void* raw() const { return data.get(); }
  int64_t size;
  runtime::ElementType type;
  std::unique_ptr<float, Free> data;
};

double Now() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

// CPU seconds of this thread plus of waited-for children (the linker): the build
// cost without the wait for other processes on a shared machine.
double BuildCpuSeconds() {
  timespec ts{};
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
  rusage kids{};
  getrusage(RUSAGE_CHILDREN, &kids);
  auto tv = [](const timeval& t) { return static_cast<double>(t.tv_sec) + t.tv_usec * 1e-6; };
  return static_cast<double>(ts.tv_sec) + ts.tv_nsec * 1e-9 + tv(kids.ru_utime) +
         tv(kids.ru_stime);
}

// One runnable side of the comparison: a loaded kernel or a vendor call.
using RunFn = std::function<void()>;

// The agent's protocol, in process: runs per sample grown (doubling) until a sample
// lasts `min_sample_s`; returns that number of runs.
int64_t Calibrate(const RunFn& run, double min_sample_s) {
  int64_t number = 1;
  for (;;) {
    double start = Now();
    for (int64_t i = 0; i < number; ++i) run();
    double s = Now() - start;
    if (s >= min_sample_s || number >= (int64_t{1} << 20)) return number;
    // Jump close to the target, at most 16x at a time (the first runs may be cold).
    int64_t grow = s <= 0 ? 16 : static_cast<int64_t>(std::ceil(min_sample_s / s * 1.1));
    number *= std::clamp<int64_t>(grow, 2, 16);
  }
}

double Sample(const RunFn& run, int64_t number) {
  double start = Now();
  for (int64_t i = 0; i < number; ++i) run();
  return (Now() - start) / static_cast<double>(number);
}

// Inputs, reference output and the output buffer of one case. The kernel's buffers
// are the inputs, the prepacked buffers and the output in entry-point order (the
// template's params); the prepacked ones belong to each candidate (PrepackedPointers),
// since every config packs in its own layout.
struct CaseData {
  std::vector<AlignedBuffer> inputs;
  AlignedBuffer output{0};
  HostBuffer expected;
  Tolerance tolerance;
  // Per entry-point param: the shared buffer, or null for a prepacked one of
  // prepacked_sizes[i] elements of prepacked_types[i].
  std::vector<void*> shared;
  std::vector<int64_t> prepacked_sizes;
  std::vector<runtime::ElementType> prepacked_types;
  std::vector<void*> pointers;  // entry-point order, prepacked slots null
};

absl::StatusOr<std::unique_ptr<CaseData>> MakeCaseData(const TuningTask& task) {
  auto data = std::make_unique<CaseData>();
  const std::vector<HostBuffer> inputs = MakeTypedInputs(task, /*seed=*/1);
  ASSIGN_OR_RETURN(data->expected, TypedReferenceOutput(task, inputs));
  for (const HostBuffer& in : inputs) {
    AlignedBuffer b(in.elements(), in.type());
    std::memcpy(b.raw(), in.data(), static_cast<size_t>(in.bytes()));
    data->inputs.push_back(std::move(b));
  }
  data->output = AlignedBuffer(data->expected.elements(), data->expected.type());
  data->tolerance = ToleranceFor(task);
  // The entry-point order is the template's (the same for every config).
  Target target = DetectHostTarget("bench");
  ASSIGN_OR_RETURN(const Template* tmpl, FindTemplate(task));
  ASSIGN_OR_RETURN(ir::LoweredFunc naive, tmpl->Instantiate(task, target, tmpl->Naive(task, target)));
  size_t next_input = 0;
  for (const ir::BufferParam& p : naive.params) {
    void* buffer = nullptr;
    if (p.is_output) {
      buffer = data->output.raw();
    } else if (!p.is_internal) {
      if (next_input >= data->inputs.size())
        return absl::InternalError("template params and reference inputs disagree");
      buffer = data->inputs[next_input++].raw();
    }
    data->shared.push_back(buffer);
    data->prepacked_sizes.push_back(p.is_internal ? p.NumElements() : 0);
    data->prepacked_types.push_back(ElementTypeOf(p));
    data->pointers.push_back(buffer);
  }
  return data;
}

// The entry-point pointers for one candidate: the shared buffers plus its own
// prepacked buffers, allocated into `owned`.
// `elements`: the candidate's own buffer sizes (Artifact::buffer_elements; its
// internal buffers' sizes depend on the config).
std::vector<void*> CandidatePointers(const CaseData& data, const std::vector<int64_t>& elements,
                                     std::vector<AlignedBuffer>* owned) {
  std::vector<void*> out;
  for (size_t i = 0; i < data.shared.size(); ++i) {
    if (data.shared[i]) {
      out.push_back(data.shared[i]);
    } else {
      owned->emplace_back(i < elements.size() ? elements[i] : data.prepacked_sizes[i], data.prepacked_types[i]);
      out.push_back(owned->back().raw());
    }
  }
  return out;
}

// Runs once on a poisoned output (NaN; integer outputs 0xA5 bytes) and compares with
// the reference. `unpack` (may be empty): the kernel's output layout transform, run
// before the check.
absl::Status CheckOutput(const RunFn& run, CaseData& data, const std::string& who,
                         const RunFn& unpack = {}) {
  const runtime::ElementType type = data.output.type;
  runtime::PoisonBuffer(type, data.output.raw(), data.output.size);
  run();
  if (unpack) unpack();
  int64_t bad = runtime::FirstMismatch(type, data.output.raw(), data.expected.data(), data.output.size,
                                       data.tolerance.atol, data.tolerance.rtol);
  if (bad >= 0) {
    return absl::InternalError(who + ": wrong answer at index " + std::to_string(bad) + ": " +
                               std::to_string(runtime::ElementAt(type, data.output.raw(), bad)) + " vs " +
                               std::to_string(runtime::ElementAt(type, data.expected.data(), bad)));
  }
  return absl::OkStatus();
}

// The vendor library's call for the task, reading and writing `data`'s buffers.
// oneDNN's convolution as a vendor run; `unpack` reorders its blocked output into
// the case's NCHW output (before checks, untimed).
absl::StatusOr<RunFn> DnnlRun(const TuningTask& task, CaseData& data, int threads,
                              std::string* name, RunFn* unpack, bool winograd = false) {
  ASSIGN_OR_RETURN(std::shared_ptr<DnnlConv> conv,
                   MakeDnnlConv(task, data.inputs[0].data.get(), data.inputs[1].data.get(),
                                data.output.data.get(), threads, winograd));
  *name = winograd ? "onednn winograd" : "onednn";
  TF_LOG(Info) << "bench: oneDNN implementation " << conv->impl();
  *unpack = [conv] { conv->Unpack(); };
  return RunFn([conv] { conv->Run(); });
}

absl::StatusOr<RunFn> OpenBlasRun(const TuningTask& task, CaseData& data, int threads,
                                  std::string* name, RunFn* unpack);

// dense's epilogue on the vendors' side: the plain loop a user would write after an
// sgemm (vectorised by the compiler; serial: about 1 % of the work).
void BiasRelu(float* c, int64_t m, int64_t n, const float* bias, bool relu) {
  if (!bias && !relu) return;
  for (int64_t i = 0; i < m; ++i) {
    float* row = c + i * n;
    for (int64_t j = 0; j < n; ++j) {
      float v = bias ? row[j] + bias[j] : row[j];
      row[j] = relu ? std::max(v, 0.0f) : v;
    }
  }
}

// OpenBLAS is loaded on first use, not linked: its worker threads start when the
// library loads and, idle, keep yielding on the cores, which slowed every parallel
// kernel of the tuneforge process (`bench model` and `model run` of the MLP at 2
// threads: 0.2 ms instead of 0.6 us). Only `bench kernels` runs OpenBLAS, and only it
// pays for the threads.
struct OpenBlasLib {
  char* (*corename)() = nullptr;
  void (*set_threads)(int) = nullptr;
  decltype(&::cblas_sgemm) sgemm = nullptr;
};

const OpenBlasLib& Blas() {
  static const OpenBlasLib lib = [] {
    OpenBlasLib l;
    void* h = dlopen(TF_OPENBLAS_LIBRARY, RTLD_NOW | RTLD_LOCAL);
    TF_CHECK(h != nullptr, "cannot load OpenBLAS from ", TF_OPENBLAS_LIBRARY, ": ", dlerror());
    l.corename = reinterpret_cast<char* (*)()>(dlsym(h, "openblas_get_corename"));
    l.set_threads = reinterpret_cast<void (*)(int)>(dlsym(h, "openblas_set_num_threads"));
    l.sgemm = reinterpret_cast<decltype(&::cblas_sgemm)>(dlsym(h, "cblas_sgemm"));
    TF_CHECK(l.corename && l.set_threads && l.sgemm, "OpenBLAS at ", TF_OPENBLAS_LIBRARY,
             " lacks openblas_get_corename, openblas_set_num_threads or cblas_sgemm");
    return l;
  }();
  return lib;
}

// "openblas <core>": the kernels this process's OpenBLAS chose when it loaded.
std::string OpenBlasName() { return std::string("openblas ") + Blas().corename(); }

// OpenBLAS's strongest core type for this CPU: its AVX-512 kernels where the CPU has
// AVX-512 (Debian's 0.3.21 predates Zen 4/5 and would otherwise pick Haswell),
// else what it chose itself.
std::string BestOpenBlasCore() {
  if (__builtin_cpu_supports("avx512f")) return "SkylakeX";
  return Blas().corename();
}

// The float32 GEMM family, which OpenBLAS computes (sgemm) and is timed against.
bool OpenBlasHasIt(const TuningTask& task) {
  return task.op() == "matmul" || task.op() == "batch_matmul" || task.op() == "dense";
}

// OpenBLAS forced onto `core` (OPENBLAS_CORETYPE, read when the library loads), in a
// child process of this binary (`bench kernels --openblas-only`): its GFLOP/s.
absl::StatusOr<double> OpenBlasInChild(const TuningTask& task, int threads, double min_sample_s,
                                       const std::string& core) {
  ASSIGN_OR_RETURN(TempDir dir, TempDir::Create("tuneforge-openblas"));
  const std::string log = dir.File("child.log");
  setenv("OPENBLAS_CORETYPE", core.c_str(), 1);
  absl::Status run = RunChecked(
      {"/proc/self/exe", "bench", "kernels", "--openblas-only", "--task", task.CanonicalText(), "--threads",
       std::to_string(threads), "--min-sample-ms", std::to_string(static_cast<int>(min_sample_s * 1e3)),
       "--json"},
      log);
  unsetenv("OPENBLAS_CORETYPE");
  RETURN_IF_ERROR(run);
  ASSIGN_OR_RETURN(std::string out, ReadFile(log));
  const size_t at = out.rfind("\n{");  // the child's last line, a JSON object
  json j = json::parse(out.substr(at == std::string::npos ? 0 : at + 1), nullptr, false);
  if (j.is_discarded()) return absl::InternalError("OpenBLAS child printed no result: " + out);
  return j["gflops"].get<double>();
}

// oneDNN's GEMM (`dnnl_sgemm`, row-major, OpenMP threads) for matmul, dense (plus
// the same bias/ReLU loop as the OpenBLAS side) and batch_matmul (one call per
// matrix on all threads).
absl::StatusOr<RunFn> DnnlGemmRun(const TuningTask& task, CaseData& data, int threads, std::string* name) {
  *name = "onednn sgemm";
  const bool batched = task.op() == "batch_matmul";
  const int64_t batch = batched ? task.Param("B") : 1;
  const int64_t m = task.Param("M"), n = task.Param("N"), k = task.Param("K");
  const float* a = data.inputs[0].data.get();
  const float* b = data.inputs[1].data.get();
  const bool dense = task.op() == "dense";
  const float* bias = dense && task.Param("bias") ? data.inputs[2].data.get() : nullptr;
  const bool relu = dense && task.Param("relu") == 1;
  float* c = data.output.data.get();
  return RunFn([=] {
    DnnlSetThreads(threads);
    for (int64_t x = 0; x < batch; ++x) {
      DnnlSgemm(m, n, k, a + x * m * k, b + x * k * n, c + x * m * n);
    }
    BiasRelu(c, m, n, bias, relu);
  });
}

struct Vendor {
  std::string name;
  RunFn run;
  RunFn unpack;  // may be empty
};

// Every vendor baseline of the task, each in its strongest configuration here:
// conv2d/depthwise: oneDNN's convolution primitive, direct and (conv2d, where oneDNN
// has one for the shape) Winograd; GEMMs: OpenBLAS and oneDNN's sgemm. The case's
// figure is against the strongest; all are reported.
absl::StatusOr<std::vector<Vendor>> VendorRuns(const TuningTask& task, CaseData& data, int threads) {
  std::vector<Vendor> out;
  Vendor v;
  if (task.op() == "qmatmul") {
    // oneDNN's int8 matmul; OpenBLAS has no integer GEMM.
    std::string impl;
    const float* scale = task.QuantizedOutput() == "s32" ? nullptr : data.inputs.back().data.get();
    ASSIGN_OR_RETURN(v.run, MakeDnnlQuantizedMatmul(task, static_cast<const uint8_t*>(data.inputs[0].raw()),
                                                    static_cast<const int8_t*>(data.inputs[1].raw()), scale,
                                                    data.output.raw(), threads, &impl));
    v.name = "onednn int8 matmul (" + impl + ")";
    out.push_back(std::move(v));
    return out;
  }
  if (task.op() == "qconv2d" || task.op() == "qdepthwise_conv2d") {
    const float* scale = task.QuantizedOutput() == "s32" ? nullptr : data.inputs.back().data.get();
    ASSIGN_OR_RETURN(std::shared_ptr<DnnlConv> conv,
                     MakeDnnlQuantizedConv(task, static_cast<const uint8_t*>(data.inputs[0].raw()),
                                           static_cast<const int8_t*>(data.inputs[1].raw()), scale,
                                           data.output.raw(), threads));
    v.name = "onednn int8 conv (" + conv->impl() + ")";
    v.run = [conv] { conv->Run(); };
    v.unpack = [conv] { conv->Unpack(); };
    out.push_back(std::move(v));
    return out;
  }
  if (task.op() == "conv2d" || task.op() == "depthwise_conv2d") {
    ASSIGN_OR_RETURN(v.run, DnnlRun(task, data, threads, &v.name, &v.unpack));
    out.push_back(std::move(v));
    if (task.op() == "conv2d") {
      Vendor w;
      absl::StatusOr<RunFn> run = DnnlRun(task, data, threads, &w.name, &w.unpack, /*winograd=*/true);
      if (run.ok()) {
        w.run = std::move(*run);
        out.push_back(std::move(w));
      } else if (run.status().code() != absl::StatusCode::kUnimplemented) {
        return run.status();
      }
    }
    return out;
  }
  ASSIGN_OR_RETURN(v.run, OpenBlasRun(task, data, threads, &v.name, &v.unpack));
  out.push_back(std::move(v));
  Vendor d;
  ASSIGN_OR_RETURN(d.run, DnnlGemmRun(task, data, threads, &d.name));
  out.push_back(std::move(d));
  // oneDNN's matmul primitive (plain layouts; dense: the same bias/ReLU loop after it).
  const bool batched = task.op() == "batch_matmul", dense = task.op() == "dense";
  const int64_t m = task.Param("M"), n = task.Param("N");
  std::string impl;
  ASSIGN_OR_RETURN(std::function<void()> matmul,
                   MakeDnnlMatmul(batched ? task.Param("B") : 0, m, n, task.Param("K"),
                                  data.inputs[0].data.get(), data.inputs[1].data.get(),
                                  data.output.data.get(), threads, &impl));
  const float* bias = dense && task.Param("bias") ? data.inputs[2].data.get() : nullptr;
  const bool relu = dense && task.Param("relu") == 1;
  float* c = data.output.data.get();
  Vendor mm;
  mm.name = "onednn matmul (" + impl + ")";
  mm.run = [=] {
    matmul();
    BiasRelu(c, m, n, bias, relu);
  };
  out.push_back(std::move(mm));
  return out;
}

absl::StatusOr<RunFn> OpenBlasRun(const TuningTask& task, CaseData& data, int threads,
                                  std::string* name, RunFn* unpack) {
  (void)unpack;
  if (task.op() == "matmul") {
    *name = OpenBlasName();
    Blas().set_threads(threads);
    const int m = static_cast<int>(task.Param("M")), n = static_cast<int>(task.Param("N")),
              k = static_cast<int>(task.Param("K"));
    const float* a = data.inputs[0].data.get();
    const float* b = data.inputs[1].data.get();
    float* c = data.output.data.get();
    return RunFn([=] {
      Blas().sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, m, n, k, 1.0f, a, k, b, n, 0.0f, c,
                  n);
    });
  }
  if (task.op() == "dense") {
    // sgemm on the unpacked W (OpenBLAS packs inside every call; it has no public
    // prepacked-weights API in 0.3.21), then the bias/ReLU epilogue as a plain loop a
    // user would write (vectorised by the compiler; serial: it is ~1 % of the work).
    *name = OpenBlasName();
    Blas().set_threads(threads);
    const int m = static_cast<int>(task.Param("M")), n = static_cast<int>(task.Param("N")),
              k = static_cast<int>(task.Param("K"));
    const bool relu = task.Param("relu") == 1;
    const float* x = data.inputs[0].data.get();
    const float* w = data.inputs[1].data.get();
    const float* bias = task.Param("bias") ? data.inputs[2].data.get() : nullptr;
    float* y = data.output.data.get();
    return RunFn([=] {
      Blas().sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, m, n, k, 1.0f, x, k, w, n, 0.0f, y,
                  n);
      BiasRelu(y, m, n, bias, relu);
    });
  }
  if (task.op() == "batch_matmul") {
    // OpenBLAS 0.3.21 has no batched sgemm: one call per matrix, as a user would, in
    // the stronger of two ways: every call on all threads, or (threads > 1) the batch
    // split across the threads (OpenMP) with each small matrix on one thread, which
    // is what small matrices need. Picked by timing both here; the name says which.
    const int64_t batch = task.Param("B");
    const int m = static_cast<int>(task.Param("M")), n = static_cast<int>(task.Param("N")),
              k = static_cast<int>(task.Param("K"));
    const float* a = data.inputs[0].data.get();
    const float* b = data.inputs[1].data.get();
    float* c = data.output.data.get();
    auto one = [=](int64_t x) {
      Blas().sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, m, n, k, 1.0f, a + x * m * k, k,
                  b + x * k * n, n, 0.0f, c + x * m * n, n);
    };
    RunFn per_call = [=] {
      Blas().set_threads(threads);
      for (int64_t x = 0; x < batch; ++x) one(x);
    };
    *name = OpenBlasName() + " (" + std::to_string(threads) + " threads per matrix)";
    if (threads == 1) return per_call;
    RunFn split = [=] {
      Blas().set_threads(1);
#pragma omp parallel for num_threads(threads) schedule(static)
      for (int64_t x = 0; x < batch; ++x) one(x);
    };
    std::vector<double> t_call, t_split;
    const int64_t n_call = Calibrate(per_call, 0.02), n_split = Calibrate(split, 0.02);
    for (int r = 0; r < 3; ++r) {
      t_call.push_back(Sample(per_call, n_call));
      t_split.push_back(Sample(split, n_split));
    }
    if (Median(t_split) < Median(t_call)) {
      *name = OpenBlasName() + " (batch split over " + std::to_string(threads) + " threads)";
      return split;
    }
    return per_call;
  }
  return absl::UnimplementedError("no vendor baseline for op " + task.op());
}

struct Candidate {
  Config config;
  std::unique_ptr<runtime::LoadedModule> module;
  double cost = std::numeric_limits<double>::infinity();  // seconds per run (tuning)
  std::vector<AlignedBuffer> prepacked;  // this config's prepacked buffers, if any
  std::vector<void*> pointers;           // entry-point order
};

struct CaseResult {
  std::string task_text;
  std::string op;
  int threads = 1;
  std::string vendor;  // the strongest of `vendors`
  double tf_gflops = 0, vendor_gflops = 0;
  std::map<std::string, double> vendors;  // every vendor baseline's GFLOP/s
  // dense: tf_gflops times W's packing in every run (OpenBLAS packs inside each sgemm);
  // this is the kernel with W packed once, untimed (what an inference runtime does).
  double tf_prepacked_gflops = 0;
  std::string untimed;         // work neither side's figure includes
  std::string policy;          // the search policy that tuned the case
  std::string policy_failure;  // SearchPolicy::TakeWarnings' last, if the policy ever warned
  std::string best_config;
  int measured = 0, failed = 0;
  double median_build_ms = 0;
  double median_build_cpu_ms = 0;
  double tune_seconds = 0;
  std::vector<double> build_seconds;      // wall
  std::vector<double> build_cpu_seconds;  // CPU, see BuildCpuSeconds
};

// Tunes one case and times the winner against the vendor, alternating.
absl::StatusOr<CaseResult> RunCase(const TuningTask& task, CaseData& data, int threads,
                                   int trials, double min_sample_s, uint64_t seed,
                                   const std::string& forced_core,
                                   const std::optional<Config>& fixed_config,
                                   const Target& base_target) {
  CaseResult result;
  result.task_text = task.CanonicalText();
  result.op = task.op();
  result.threads = threads;
  double start = Now();

  Target target = base_target;
  target.num_threads = threads;
  ASSIGN_OR_RETURN(const Template* tmpl, FindTemplate(task));
  ConfigSpace space = tmpl->Space(task, target);
  // The product's default search: the template's heuristic configs first (the warm
  // start), then the default policy ("model": XGBoost cost model + simulated annealing)
  // in batches of 8, each batch observed before the next is proposed.
  PolicyContext policy_context{task, target, tmpl, seed, nullptr, {}};
  ASSIGN_OR_RETURN(std::unique_ptr<SearchPolicy> policy,
                   MakeSearchPolicy(TuningOptions().policy, policy_context));
  result.policy = policy->name();
  const WorkloadInfo workload = MakeWorkloadInfo(task);
  const TargetInfo target_info = MakeTargetInfo(target);

  std::vector<Candidate> measured;
  double best = std::numeric_limits<double>::infinity();
  // Candidates are ranked by what the table reports (CaseResult::untimed): for dense,
  // the kernel with W's packing (its prepack entry), as sgemm packs inside the call.
  // (Until session 9 tuning timed the kernel alone, on W packed once, and so picked
  // packed-W configs whose packing then made the reported figure 0.84x.)
  const bool packing_timed = task.op() == "dense";
  auto timed_run = [packing_timed](runtime::LoadedModule* module, void** buffers) -> RunFn {
    if (!packing_timed) return [module, buffers] { module->Run(buffers); };
    return [module, buffers] {
      module->Prepack(buffers);
      module->Run(buffers);
    };
  };
  // Builds, checks and times one config; its cost, or +inf when it failed.
  auto measure = [&](const Config& config) -> double {
    const double failed = std::numeric_limits<double>::infinity();
    absl::StatusOr<ir::LoweredFunc> func = tmpl->Instantiate(task, target, config);
    if (!func.ok()) {
      ++result.failed;
      return failed;
    }
    double cpu0 = BuildCpuSeconds();
    absl::StatusOr<Artifact> artifact = BuildArtifact(*func, target);
    double build_cpu = BuildCpuSeconds() - cpu0;
    if (!artifact.ok()) {
      TF_LOG(Warning) << "build failed for " << config.ToJson() << ": " << artifact.status();
      ++result.failed;
      return failed;
    }
    result.build_seconds.push_back(artifact->build_seconds);
    result.build_cpu_seconds.push_back(build_cpu);
    std::string error;
    Candidate cand;
    cand.config = config;
    cand.module =
        runtime::LoadedModule::Load(artifact->shared_object, artifact->entry_symbol, &error);
    if (!cand.module) {
      TF_LOG(Warning) << "load failed: " << error;
      ++result.failed;
      return failed;
    }
    runtime::LoadedModule* module = cand.module.get();
    cand.pointers = CandidatePointers(data, artifact->buffer_elements, &cand.prepacked);
    void** buffers = cand.pointers.data();
    if (module->Prepack(buffers) != 0) {
      ++result.failed;
      return failed;
    }
    RunFn run = [module, buffers] { module->Run(buffers); };
    RunFn unpack = [module, buffers] { module->Unpack(buffers); };
    absl::Status ok = CheckOutput(run, data, "tuneforge " + config.ToJson(), unpack);
    if (!ok.ok()) {
      TF_LOG(Warning) << ok.message();
      ++result.failed;
      return failed;
    }
    ++result.measured;
    // One warm run, timed alone. (Until session 9 this was the checked run above, whose
    // time includes the NaN fill, the unpack and the comparison: on kernels under a
    // millisecond, e.g. the ResNet stem, that is over 4x the kernel, so every candidate
    // after the first was judged hopeless by it and ranked by check time.)
    const RunFn timed = timed_run(module, buffers);
    const double t0 = Now();
    timed();
    const double first = Now() - t0;
    if (first > 4 * best) {  // hopeless: one warm run is enough to tell
      cand.cost = first;
    } else {
      // The product's protocol (compiler/runtime/timing.h): 3 samples, more while
      // they disagree, so a sample that met a busy moment does not decide the ranking.
      const MeasureOptions protocol;
      int64_t number = Calibrate(timed, min_sample_s / 2);
      std::vector<double> samples;
      for (int r = 0; r < protocol.repeat; ++r) samples.push_back(Sample(timed, number));
      while (runtime::WantsAnotherSample(samples, protocol.max_repeat, protocol.max_spread)) {
        samples.push_back(Sample(timed, number));
      }
      cand.cost = Median(samples);
    }
    best = std::min(best, cand.cost);
    const double cost = cand.cost;
    measured.push_back(std::move(cand));
    return cost;
  };
  auto measure_batch = [&](const std::vector<Config>& configs) {
    std::vector<TuningRecord> records;
    for (const Config& config : configs) {
      const double cost = measure(config);
      TuningRecord r;
      r.workload = workload;
      r.target = target_info;
      r.template_name = tmpl->name();
      r.template_version = tmpl->version();
      r.config_json = config.ToJson();
      if (std::isfinite(cost)) {
        r.result.costs = {cost};
      } else {
        r.result.error = MeasureErrorKind::kRuntimeError;
      }
      records.push_back(std::move(r));
    }
    policy->Observe(records);
  };
  if (fixed_config) {  // --config: this one, no search
    RETURN_IF_ERROR(space.Check(*fixed_config));
    measure_batch({*fixed_config});
    trials = 0;
  } else {
    measure_batch(tmpl->Heuristics(task, target));
  }
  for (int proposed = 0; proposed < trials;) {
    std::vector<Config> batch = policy->Propose(std::min(8, trials - proposed));
    if (batch.empty()) break;
    for (std::string& warning : policy->TakeWarnings()) result.policy_failure = std::move(warning);
    proposed += static_cast<int>(batch.size());
    measure_batch(batch);
  }
  if (measured.empty()) return absl::InternalError("no valid kernel for " + result.task_text);

  // Top 3, re-measured interleaved: tuning samples are noisy.
  std::sort(measured.begin(), measured.end(),
            [](const Candidate& a, const Candidate& b) { return a.cost < b.cost; });
  measured.resize(std::min<size_t>(3, measured.size()));
  std::vector<RunFn> runs, ranked_runs;  // the kernel alone; what is ranked (see above)
  std::vector<int64_t> numbers;
  for (Candidate& c : measured) {
    runtime::LoadedModule* module = c.module.get();
    void** buffers = c.pointers.data();
    runs.push_back([module, buffers] { module->Run(buffers); });
    ranked_runs.push_back(timed_run(module, buffers));
    numbers.push_back(Calibrate(ranked_runs.back(), min_sample_s / 2));
  }
  std::vector<std::vector<double>> samples(runs.size());
  for (int r = 0; r < 3; ++r)
    for (size_t i = 0; i < runs.size(); ++i)
      samples[i].push_back(Sample(ranked_runs[i], numbers[i]));
  size_t winner = 0;
  for (size_t i = 1; i < runs.size(); ++i)
    if (Median(samples[i]) < Median(samples[winner])) winner = i;
  result.best_config = measured[winner].config.ToJson();

  // The winner against every vendor, alternating samples.
  ASSIGN_OR_RETURN(std::vector<Vendor> vendors, VendorRuns(task, data, threads));
  for (const Vendor& v : vendors) RETURN_IF_ERROR(CheckOutput(v.run, data, v.name, v.unpack));
  std::this_thread::sleep_for(std::chrono::milliseconds(300));  // see `quiet` below
  runtime::LoadedModule* winner_module = measured[winner].module.get();
  void** winner_buffers = measured[winner].pointers.data();
  RETURN_IF_ERROR(CheckOutput(runs[winner], data, "tuneforge " + result.best_config,
                              [=] { winner_module->Unpack(winner_buffers); }));
  // What each side's timed run includes (see CaseResult::untimed).
  RunFn tf_run = runs[winner];
  const bool dense = task.op() == "dense";
  if (dense) {
    tf_run = [=] {
      winner_module->Prepack(winner_buffers);
      winner_module->Run(winner_buffers);
    };
    result.untimed = "none: tuneforge packs W in every timed run, as OpenBLAS does inside sgemm";
  } else if (task.op() == "conv2d" || task.op() == "depthwise_conv2d" || task.op() == "qconv2d" ||
             task.op() == "qdepthwise_conv2d") {
    result.untimed = "both sides: input padding+blocking, filter blocking, output unblocking "
                     "(tuneforge prepack/unpack, oneDNN reorders)";
  }
  int64_t tf_number = Calibrate(tf_run, min_sample_s);
  int64_t prepacked_number = dense ? Calibrate(runs[winner], min_sample_s) : 0;
  std::vector<int64_t> vendor_numbers;
  for (const Vendor& v : vendors) vendor_numbers.push_back(Calibrate(v.run, min_sample_s));
  std::vector<double> tf_samples, prepacked_samples;
  std::vector<std::vector<double>> vendor_samples(vendors.size());
  // OpenBLAS's workers spin for a while after a call returns (up to ~2^28 cycles by
  // default) and would steal the second core from whatever runs next. Each side
  // keeps its own spinning within its sample; between samples both sides get a quiet
  // pause, so neither pays for the other's idle threads.
  auto quiet = [] { std::this_thread::sleep_for(std::chrono::milliseconds(300)); };
  quiet();
  for (int r = 0; r < 5; ++r) {
    tf_samples.push_back(Sample(tf_run, tf_number));
    quiet();
    if (dense) {
      prepacked_samples.push_back(Sample(runs[winner], prepacked_number));
      quiet();
    }
    for (size_t i = 0; i < vendors.size(); ++i) {
      vendor_samples[i].push_back(Sample(vendors[i].run, vendor_numbers[i]));
      quiet();
    }
  }
  double flops = task.Flops();
  result.tf_gflops = flops / Median(tf_samples) / 1e9;
  for (size_t i = 0; i < vendors.size(); ++i) {
    const double g = flops / Median(vendor_samples[i]) / 1e9;
    result.vendors[vendors[i].name] = g;
    if (g > result.vendor_gflops) {
      result.vendor_gflops = g;
      result.vendor = vendors[i].name;
    }
  }
  // OpenBLAS on its best core type when that is not what it loaded with here.
  const std::string core = forced_core.empty() ? BestOpenBlasCore() : forced_core;
  if (OpenBlasHasIt(task) && (!forced_core.empty() || core != Blas().corename())) {
    quiet();
    ASSIGN_OR_RETURN(double g, OpenBlasInChild(task, threads, min_sample_s, core));
    const std::string name = "openblas " + core + " (child process)";
    result.vendors[name] = g;
    if (g > result.vendor_gflops) {
      result.vendor_gflops = g;
      result.vendor = name;
    }
  }
  if (dense) result.tf_prepacked_gflops = flops / Median(prepacked_samples) / 1e9;
  result.median_build_ms = Median(result.build_seconds) * 1e3;
  result.median_build_cpu_ms = Median(result.build_cpu_seconds) * 1e3;
  result.tune_seconds = Now() - start;
  return result;
}

}  // namespace

absl::StatusOr<VendorSpeed> StrongestVendor(const TuningTask& task, int threads, double min_sample_s) {
  ASSIGN_OR_RETURN(std::unique_ptr<CaseData> data, MakeCaseData(task));
  ASSIGN_OR_RETURN(std::vector<Vendor> vendors, VendorRuns(task, *data, threads));
  VendorSpeed out;
  for (const Vendor& v : vendors) RETURN_IF_ERROR(CheckOutput(v.run, *data, v.name, v.unpack));
  // As RunCase: calibrated samples, a quiet pause between them for OpenBLAS's spinners.
  for (const Vendor& v : vendors) {
    const int64_t number = Calibrate(v.run, min_sample_s);
    std::vector<double> samples;
    for (int r = 0; r < 5; ++r) {
      std::this_thread::sleep_for(std::chrono::milliseconds(100));
      samples.push_back(Sample(v.run, number));
    }
    const double g = task.Flops() / Median(samples) / 1e9;
    out.all.push_back({v.name, g});
    if (g > out.gflops) {
      out.gflops = g;
      out.name = v.name;
    }
  }
  return out;
}

namespace {

double GeoMean(const std::vector<double>& v) {
  double log_sum = 0;
  for (double x : v) log_sum += std::log(x);
  return v.empty() ? 0 : std::exp(log_sum / static_cast<double>(v.size()));
}

// `--openblas-only`: the child side of OpenBlasInChild. Times this process's OpenBLAS
// (as OPENBLAS_CORETYPE made it load) on the task and prints one JSON line.
absl::StatusOr<int> OpenBlasOnly(const TuningTask& task, int threads, double min_sample_s) {
  ASSIGN_OR_RETURN(std::unique_ptr<CaseData> data, MakeCaseData(task));
  std::string name;
  RunFn unpack;
  ASSIGN_OR_RETURN(RunFn run, OpenBlasRun(task, *data, threads, &name, &unpack));
  RETURN_IF_ERROR(CheckOutput(run, *data, name, unpack));
  const int64_t number = Calibrate(run, min_sample_s);
  std::vector<double> samples;
  for (int r = 0; r < 5; ++r) {
    samples.push_back(Sample(run, number));
    std::this_thread::sleep_for(std::chrono::milliseconds(300));
  }
  std::printf("%s\n", json{{"openblas_core", Blas().corename()},
                            {"gflops", task.Flops() / Median(samples) / 1e9}}
                          .dump()
                          .c_str());
  return 0;
}

}  // namespace

absl::StatusOr<int> BenchKernelsCommand(const std::vector<std::string>& args) {
  ASSIGN_OR_RETURN(Flags flags, Flags::Parse(args,
                                             {"suite", "task", "config", "target", "trials", "threads",
                                              "min-sample-ms", "seed", "openblas-core"},
                                             {"json", "help", "openblas-only"}));
  if (flags.Has("help")) {
    std::fputs(kBenchKernelsUsage, stdout);
    return 0;
  }
  if (!flags.positional().empty())
    return absl::InvalidArgumentError("unexpected argument '" + flags.positional()[0] + "'");
  std::string suite_name = flags.Get("suite", "quick");
  const Suite* suite = nullptr;
  for (const Suite& s : Suites())
    if (s.name == suite_name) suite = &s;
  if (suite == nullptr)
    return absl::InvalidArgumentError("unknown suite '" + suite_name +
                                      "' (known: smoke, quick, full, conv, depthwise, int8)");
  std::vector<std::string> task_texts = suite->tasks;
  if (flags.Has("task")) task_texts = {flags.Get("task")};
  ASSIGN_OR_RETURN(int64_t trials, flags.GetInt("trials", suite->trials, 0, 100000));
  ASSIGN_OR_RETURN(int64_t min_ms, flags.GetInt("min-sample-ms",
                                                static_cast<int64_t>(suite->min_sample_ms), 1,
                                                10000));
  ASSIGN_OR_RETURN(int64_t seed, flags.GetInt("seed", 1, 0, std::numeric_limits<int64_t>::max()));
  ASSIGN_OR_RETURN(std::vector<int> threads, ParseThreadList(flags.Get("threads", "1,2")));

  std::vector<TuningTask> tasks;
  for (const std::string& text : task_texts) {
    ASSIGN_OR_RETURN(TuningTask task, ParseTask(text));
    RETURN_IF_ERROR(FindTemplate(task).status());
    tasks.push_back(std::move(task));
  }
  if (flags.Has("openblas-only")) {
    if (tasks.size() != 1 || threads.size() != 1 || !OpenBlasHasIt(tasks[0])) {
      return absl::InvalidArgumentError("--openblas-only takes one GEMM --task and one --threads value");
    }
    return OpenBlasOnly(tasks[0], threads[0], static_cast<double>(min_ms) / 1e3);
  }
  const std::string forced_core = flags.Get("openblas-core");
  // --target: tune and build for another x86 target this host can run (e.g. AVX2 only).
  const Target host = DetectHostTarget("bench");
  Target base_target = host;
  if (flags.Has("target")) {
    ASSIGN_OR_RETURN(base_target, ParseTarget(flags.Get("target"), host));
    if (base_target.triple != host.triple)
      return absl::InvalidArgumentError("--target: bench kernels runs the kernels here, so the "
                                        "triple must be the host's (" + host.triple + "), not " +
                                        base_target.triple);
  }
  std::optional<Config> fixed_config;
  if (flags.Has("config")) {
    if (!flags.Has("task")) return absl::InvalidArgumentError("--config needs --task");
    ASSIGN_OR_RETURN(fixed_config, Config::FromJson(flags.Get("config")));
  }

  // The machine's float32 FMA peak per thread count, measured here.
  std::map<int, double> peak;
  for (int t : threads) peak[t] = MeasureFmaPeakGflops(t);

  std::vector<CaseResult> results;
  for (const TuningTask& task : tasks) {
    TF_LOG(Info) << "bench: " << task.CanonicalText() << ": computing the reference";
    ASSIGN_OR_RETURN(std::unique_ptr<CaseData> data, MakeCaseData(task));
    for (int t : threads) {
      TF_LOG(Info) << "bench: " << task.CanonicalText() << ", " << t << " thread(s): tuning";
      ASSIGN_OR_RETURN(CaseResult r, RunCase(task, *data, t, static_cast<int>(trials),
                                             static_cast<double>(min_ms) / 1e3,
                                             static_cast<uint64_t>(seed), forced_core,
                                             fixed_config, base_target));
      TF_LOG(Info) << "bench: " << r.task_text << " t" << t << ": tuneforge " << r.tf_gflops
                   << " GFLOP/s, " << r.vendor << " " << r.vendor_gflops << " GFLOP/s";
      results.push_back(std::move(r));
    }
  }

  // Geometric mean of the ratios per (op, threads).
  std::map<std::pair<std::string, int>, std::vector<double>> ratios;
  std::vector<double> all_builds, all_builds_cpu;
  for (const CaseResult& r : results) {
    ratios[{r.op, r.threads}].push_back(r.tf_gflops / r.vendor_gflops);
    all_builds.insert(all_builds.end(), r.build_seconds.begin(), r.build_seconds.end());
    all_builds_cpu.insert(all_builds_cpu.end(), r.build_cpu_seconds.begin(),
                          r.build_cpu_seconds.end());
  }
  double median_build_ms = Median(all_builds) * 1e3;
  double median_build_cpu_ms = Median(all_builds_cpu) * 1e3;
  // int8 over float32: each qmatmul case against the float32 matmul of its shape and
  // thread count, when the run has one.
  struct Int8OverFloat {
    std::string task;
    int threads;
    double ratio;
  };
  std::vector<Int8OverFloat> int8_over_float;
  std::map<int, std::vector<double>> int8_ratios;
  // The float32 task of an int8 task's shape: matmul for qmatmul, conv2d for qconv2d.
  auto float_twin = [](const TuningTask& q) {
    const std::string op = q.op() == "qconv2d" ? "conv2d" : q.op() == "qdepthwise_conv2d" ? "depthwise_conv2d" : "matmul";
    const std::vector<const char*> names =
        op == "conv2d"             ? std::vector<const char*>{"N", "C", "H", "W", "K", "R", "S", "stride", "pad"}
        : op == "depthwise_conv2d" ? std::vector<const char*>{"N", "C", "H", "W", "R", "S", "stride", "pad"}
                                   : std::vector<const char*>{"M", "N", "K"};
    std::vector<std::pair<std::string, int64_t>> params;
    for (const char* p : names) params.emplace_back(p, q.Param(p));
    return MakeTask(op, params, "float32")->CanonicalText();
  };
  for (const CaseResult& q : results) {
    if (q.op != "qmatmul" && q.op != "qconv2d" && q.op != "qdepthwise_conv2d") continue;
    const std::string twin = float_twin(*ParseTask(q.task_text));
    for (const CaseResult& f : results) {
      if (f.task_text != twin || f.threads != q.threads) continue;
      int8_over_float.push_back({q.task_text, q.threads, q.tf_gflops / f.tf_gflops});
      int8_ratios[q.threads].push_back(q.tf_gflops / f.tf_gflops);
    }
  }

  if (flags.Has("json")) {
    json out = {{"suite", flags.Has("task") ? "custom" : suite->name},
                {"target", base_target.ToString()},
                {"trials", trials},
                {"min_sample_ms", min_ms},
                {"median_build_ms", median_build_ms},
                {"median_build_cpu_ms", median_build_cpu_ms},
                {"fma_peak_gflops", peak},
                {"cases", json::array()},
                {"geomean", json::array()}};
    for (const CaseResult& r : results) {
      out["cases"].push_back({{"task", r.task_text},
                              {"op", r.op},
                              {"threads", r.threads},
                              {"vendor", r.vendor},
                              {"vendors", r.vendors},
                              {"share_of_peak", r.tf_gflops / peak.at(r.threads)},
                              {"tuneforge_gflops", r.tf_gflops},
                              {"vendor_gflops", r.vendor_gflops},
                              {"ratio", r.tf_gflops / r.vendor_gflops},
                              {"untimed", r.untimed},
                              {"policy", r.policy},
                              {"policy_failure", r.policy_failure},
                              {"best_config", json::parse(r.best_config)},
                              {"measured", r.measured},
                              {"failed", r.failed},
                              {"median_build_ms", r.median_build_ms},
                              {"median_build_cpu_ms", r.median_build_cpu_ms},
                              {"seconds", r.tune_seconds}});
      if (r.tf_prepacked_gflops > 0)
        out["cases"].back()["tuneforge_prepacked_gflops"] = r.tf_prepacked_gflops;
    }
    for (const auto& [key, v] : ratios)
      out["geomean"].push_back({{"op", key.first}, {"threads", key.second}, {"ratio", GeoMean(v)},
                                {"cases", v.size()}});
    if (!int8_over_float.empty()) {
      out["int8_over_float32"] = json::array();
      for (const Int8OverFloat& r : int8_over_float)
        out["int8_over_float32"].push_back({{"task", r.task}, {"threads", r.threads}, {"ratio", r.ratio}});
      for (const auto& [t, v] : int8_ratios)
        out["int8_over_float32_geomean"][std::to_string(t)] = GeoMean(v);
    }
    std::printf("%s\n", out.dump(2).c_str());
    return 0;
  }

  std::printf("target: %s\n", base_target.ToString().c_str());
  for (const auto& [t, g] : peak) std::printf("FMA peak (measured), %d thread(s): %.1f GFLOP/s\n", t, g);
  std::printf("%-44s %3s %10s %5s %10s %6s %9s %9s\n", "case", "thr", "tuneforge", "peak", "strongest",
              "ratio", "build ms", "build ms");
  std::printf("%-44s %3s %10s %5s %10s %6s %9s %9s\n", "", "", "GFLOP/s", "share", "GFLOP/s", "", "wall",
              "cpu");
  for (const CaseResult& r : results) {
    std::string text = r.task_text.substr(0, r.task_text.find(" dtype=float32"));
    std::string all;
    for (const auto& [name, g] : r.vendors) all += (all.empty() ? "" : ", ") + name + " " + absl::StrFormat("%.1f", g);
    std::printf("%-44s %3d %10.1f %4.0f%% %10.1f %6.2f %9.1f %9.1f  %s\n", text.c_str(), r.threads,
                r.tf_gflops, 100 * r.tf_gflops / peak.at(r.threads), r.vendor_gflops,
                r.tf_gflops / r.vendor_gflops, r.median_build_ms, r.median_build_cpu_ms, all.c_str());
  }
  std::set<std::string> notes;
  for (const CaseResult& r : results) {
    if (r.tf_prepacked_gflops > 0)
      std::printf("  %s t%d: with W packed once (untimed) %.1f GFLOP/s\n",
                  r.task_text.substr(0, r.task_text.find(" dtype=float32")).c_str(), r.threads,
                  r.tf_prepacked_gflops);
    if (!r.untimed.empty()) notes.insert(r.op + ": untimed: " + r.untimed);
    if (!r.policy_failure.empty()) notes.insert(r.op + ": WARNING: " + r.policy_failure);
  }
  for (const std::string& n : notes) std::printf("  %s\n", n.c_str());
  if (!results.empty()) std::printf("search: heuristics + policy %s\n", results[0].policy.c_str());
  std::printf("\ngeometric mean of tuneforge / the strongest vendor:\n");
  for (const auto& [key, v] : ratios)
    std::printf("  %-12s %d thread(s): %.2f  (%zu cases)\n", key.first.c_str(), key.second,
                GeoMean(v), v.size());
  if (!int8_over_float.empty()) {
    std::printf("\nint8 / our float32 on the same shape:\n");
    for (const Int8OverFloat& r : int8_over_float)
      std::printf("  %-60s t%d: %.2f\n", r.task.c_str(), r.threads, r.ratio);
    for (const auto& [t, v] : int8_ratios)
      std::printf("  geometric mean, %d thread(s): %.2f  (%zu cases)\n", t, GeoMean(v), v.size());
  }
  std::printf("median build per candidate (LLVM + link): %.1f ms wall, %.1f ms CPU (%zu builds);"
              " trials %lld + heuristics\n",
              median_build_ms, median_build_cpu_ms, all_builds.size(),
              static_cast<long long>(trials));
  return 0;
}

}  // namespace tuneforge::cli
