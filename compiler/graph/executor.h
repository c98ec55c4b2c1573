// The graph executor (issue 17): runs a whole imported model on kernels the compiler
// builds for this target. Each tuning task occurrence runs its template's kernel with
// the schedule the caller picks (the best record in the db, or the template's default
// schedule), followed by the epilogue kernel the template does not absorb yet; every
// other operator runs a generated kernel (compiler/graph/kernels.h). Reshapes share
// storage. Intermediate tensors live in one arena laid out ahead of time by their
// lifetimes (a static memory plan); constant-only prepacks (dense weights) run once
// at load.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "compiler/graph/graph.h"
#include "compiler/target/target.h"
#include "compiler/templates/conv2d_template.h"
#include "compiler/templates/template.h"

namespace tuneforge::graph {

// The schedule of one task: a config of `tmpl` (e.g. the db's best record), or
// nullopt for the template's default schedule.
using ScheduleFn =
    std::function<absl::StatusOr<std::optional<Config>>(const TuningTask& task, const Template& tmpl)>;

struct ExecutorOptions {
  ScheduleFn schedule;  // null: default schedules everywhere
  // Convolutions whose packed weights take at least this many bytes prefetch the next
  // output-channel block's weights as they compute (0: none).
  int64_t prefetch_weight_bytes = kStreamedWeightBytes;
  // The machine the executor's own kernels are built for when `target` is another
  // one (`deploy --model --target aarch64`): kernels are scheduled and laid out for
  // `target`, built for `run_on` and run here only to prepack the constants Export
  // writes; Export's kernels are then built for `target` by the caller. Unset: target.
  std::optional<Target> run_on;
  // Tests: every run first fills the memory plan's arena (intermediate tensors and
  // the steps' transient buffers) with NaN, so that a kernel reading what it did not
  // write in this run shows in the output.
  bool poison_arena = false;
};

// One kernel of the model, for reports.
struct ExecutorKernel {
  std::string name;    // entry symbol
  std::string source;  // "tuned <task>", "default <task>", or the node's operator
  int calls = 0;       // per inference
};

// A model input or output. int64 ones (token ids, attention masks, ArgMax's indices)
// are passed as float32 whole numbers, like every int64 tensor at run time (exact up
// to kMaxRunTimeInt); Run refuses an int64 input that is not one, or that is out of
// [-index_bound, index_bound) when it indexes a Gather (index_bound > 0).
struct TensorInfo {
  std::string name;
  std::vector<int64_t> shape;
  DType dtype = DType::kFloat32;
  int64_t index_bound = 0;
  int64_t NumElements() const;
};

// The largest magnitude an int64 value computed at run time may have: its float32
// storage holds every whole number up to 2^24 exactly.
constexpr int64_t kMaxRunTimeInt = int64_t{1} << 24;

// A compiled model as data, for a library that runs it without tuneforge (`deploy
// --model`): the distinct kernels as lowered functions, the steps with their
// arguments, and one blob holding every constant and step-owned buffer as it is after
// load (packed weights and zero borders included, so nothing is prepacked again).
struct ExportedArg {
  enum Kind { kNull, kArena, kBlob } kind = kNull;
  int64_t offset = 0;  // bytes into the arena or the blob (64-byte aligned)
};
struct ExportedStep {
  int kernel = 0;      // index into ExportedModel::kernels
  std::string source;  // as Executor::steps()
  std::vector<ExportedArg> args;
};
struct ExportedTensor {
  std::string name;
  std::vector<int64_t> shape;
  ExportedArg where;   // kNull: the model never reads this input
};
struct ExportedModel {
  std::vector<ir::LoweredFunc> kernels;
  std::vector<ExportedStep> steps;
  std::vector<ExportedTensor> inputs, outputs;
  int64_t arena_bytes = 0;
  std::string blob;
};

class Executor {
 public:
  // Compiles every kernel (in parallel over the target's threads) and loads them.
  static absl::StatusOr<std::unique_ptr<Executor>> Create(const Graph& graph, const Target& target,
                                                          const ExecutorOptions& options = {});
  ~Executor();
  Executor(const Executor&) = delete;
  Executor& operator=(const Executor&) = delete;

  const std::vector<TensorInfo>& inputs() const;
  const std::vector<TensorInfo>& outputs() const;
  // Runs one inference: `inputs` and `outputs` in the model's order, each of its
  // tensor's element count. Not thread-safe (one arena).
  absl::Status Run(const std::vector<const float*>& inputs, const std::vector<float*>& outputs);
  // Run, also timing each step (what the debug executor of TVM reports): adds each
  // step's milliseconds to `step_ms` (sized to steps()) .
  absl::Status RunProfiled(const std::vector<const float*>& inputs, const std::vector<float*>& outputs,
                           std::vector<double>* step_ms);
  // Step `s` alone, `reps` times back to back, after a Run: the median milliseconds
  // of one run with its data hot in cache (what a kernel measured alone sees). The
  // arena is left as the repeats leave it (a step that updates in place repeats its
  // update): Run again before reading outputs.
  absl::StatusOr<double> TimeStepHot(size_t s, int reps);
  // What each step runs: the kernel's source ("default conv2d ...", "Softmax", ...).
  std::vector<std::string> steps() const;

  int64_t arena_bytes() const;     // the memory plan's peak: intermediate tensors, transient buffers
  int64_t transient_bytes() const; // the steps' transient buffers placed in the arena (unplanned)
  int64_t unplanned_bytes() const; // what a buffer per tensor would take instead
  int64_t scratch_bytes() const;   // templates' internal buffers of their own (packed weights, ...)
  double compile_seconds() const;
  // The largest thread shortfall a run met: {threads a parallel loop asked for, threads
  // it got} when the system refused the pool more workers (the run is correct, slower);
  // {0, 0} when none. `model run` and `bench model` report it.
  std::pair<int, int> thread_shortfall() const;
  const std::vector<ExecutorKernel>& kernels() const;
  int tuned_tasks() const;         // task occurrences running a caller-given schedule
  int default_tasks() const;       // ... running the template's default schedule
  // Convolution pairs whose layout transforms cancel: the first writes the second's
  // blocked input directly (no NCHW tensor between them).
  int cancelled_layout_pairs() const;
  // Residuals a convolution's epilogue reads from another's blocked input (a ResNet
  // block's input, written once in the blocked layout).
  int blocked_residuals() const;
  // Of the handed-over inputs, those the producing kernel writes from its register
  // tile (no blocked output, no copy).
  int direct_writes() const;
  // Convolutions that compute the elementwise chain before them (DenseNet's
  // BatchNorm and ReLU) while copying their input into the blocked layout: the
  // chain's output is never written.
  int fused_prologues() const;
  // int8 layers that write their uint8 output straight into the next int8 layer's
  // padded input (no float32 tensor between them).
  int quantized_handovers() const;
  // Node kernels left out because nothing reads their results any more (a dynamic
  // quantization whose MatMuls quantize their input themselves).
  int dropped_steps() const;
  // The model as data (see ExportedModel). Call before any Run: kernels may write
  // their scratch buffers, which the blob would then carry along.
  absl::StatusOr<ExportedModel> Export() const;

 private:
  struct Impl;
  explicit Executor(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

// Buffers for Executor::Run: the inputs filled with seeded values uniform in [-1, 1),
// the outputs sized, and the pointer lists Run takes (what benchmarks and timing
// runs feed a model). The pointers stay valid when the struct is moved.
struct RunBuffers {
  std::vector<std::vector<float>> inputs, outputs;
  std::vector<const float*> input_ptrs;
  std::vector<float*> output_ptrs;
};
RunBuffers SeededRunBuffers(const Executor& exec, uint32_t seed);

// NumPy .npy files of float32 (little-endian, C order), as `model run` reads and writes;
// `dtype` kInt64 writes the (whole-number) values as int64. Reading also takes int64
// and int32 files (an int64 input's values), converted to float32 and refused when a
// value's magnitude exceeds kMaxRunTimeInt.
absl::Status WriteNpy(const std::string& path, const std::vector<int64_t>& shape,
                      const std::vector<float>& data, DType dtype = DType::kFloat32);
absl::StatusOr<std::vector<float>> ReadNpy(const std::string& path, std::vector<int64_t>* shape);
// The same from the file's bytes; `name` (the file) prefixes every error.
absl::StatusOr<std::vector<float>> ParseNpy(const std::string& all, const std::string& name,
                                            std::vector<int64_t>* shape);

}  // namespace tuneforge::graph
