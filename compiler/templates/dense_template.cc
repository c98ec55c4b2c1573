#include "compiler/templates/dense_template.h"

#include "compiler/schedule/schedule.h"
#include "compiler/support/status.h"
#include "compiler/templates/matmul_template.h"

namespace tuneforge {
namespace {

const GemmBuffers kDenseBuffers{"X", "W", "W.packed", "Y"};
constexpr const char* kPackKnob = "pack_w";

}  // namespace

ConfigSpace DenseTemplate::Space(const TuningTask& task, const Target& target) const {
  return GemmSpace(task.Param("M"), task.Param("N"), task.Param("K"), target,
                   {kPackKnob, {0, 1},
                    "copy W into contiguous panels of the register tile's width once, in the "
                    "prepack entry outside the timed region (width must divide N)"});
}

Config DenseTemplate::Naive(const TuningTask& task, const Target& target) const {
  (void)target;
  return GemmNaive(task.Param("K"), kPackKnob);
}

std::vector<Config> DenseTemplate::Heuristics(const TuningTask& task, const Target& target) const {
  return GemmHeuristics(Space(task, target), target, kPackKnob, task.Param("M"), task.Param("N"), 0);
}

absl::StatusOr<ir::LoweredFunc> DenseTemplate::Instantiate(const TuningTask& task,
                                                           const Target& target,
                                                           const Config& config) const {
  return Build(task, target, config, DenseEpilogue{}, /*kernel_only=*/false);
}

absl::StatusOr<ir::LoweredFunc> DenseTemplate::InstantiateKernel(const TuningTask& task,
                                                                 const Target& target,
                                                                 const Config& config) const {
  return Build(task, target, config, DenseEpilogue{}, /*kernel_only=*/true);
}

absl::StatusOr<ir::LoweredFunc> DenseTemplate::InstantiateWithEpilogue(const TuningTask& task,
                                                                       const Target& target,
                                                                       const Config& config,
                                                                       const DenseEpilogue& extra) const {
  return Build(task, target, config, extra, /*kernel_only=*/false);
}

absl::StatusOr<ir::LoweredFunc> DenseTemplate::Build(const TuningTask& task, const Target& target,
                                                     const Config& config, const DenseEpilogue& extra,
                                                     bool kernel_only) const {
  using namespace ir;  // NOLINT: the expression builders read like math here.
  if (task.op() != "dense") return absl::InvalidArgumentError(name() + " template got " + task.op());
  const std::shared_ptr<const ConfigSpace> space = SpaceOf(*this, task, target);
  RETURN_IF_ERROR(space->Check(config));
  const Config c = space->WithDefaults(config);
  int64_t m = task.Param("M"), n = task.Param("N"), k = task.Param("K");
  const bool bias = task.Param("bias") == 1, relu = task.Param("relu") == 1;
  int64_t lanes = c.Int("vec_lanes"), vecs = c.Int("tile_j_vecs");
  const bool pack = c.Int(kPackKnob) == 1;
  const int64_t panel = pack ? lanes * vecs : 0;

  ComputeDef def = GemmCompute("dense", kDenseBuffers, 0, m, n, k, panel);
  // Entry point: X, W, [bias], W.packed, Y — inputs first in MakeInputs' order.
  BufferParam w_packed{"W.packed", DType::kFloat32,
                       pack ? std::vector<int64_t>{n / panel, k, panel} : std::vector<int64_t>{k, n},
                       false};
  w_packed.is_internal = true;
  std::vector<BufferParam> params = {def.params[0], BufferParam{"W", DType::kFloat32, {k, n}, false}};
  if (bias) params.push_back(BufferParam{"bias", DType::kFloat32, {n}, false});
  params.push_back(w_packed);
  params.insert(params.end(), extra.inputs.begin(), extra.inputs.end());
  params.push_back(def.params[2]);
  def.params = params;

  Expr j = pack ? Add(Mul(Var("jp"), IntImm(panel)), Var("jr")) : Var("j");
  Expr out = ReducedValue();
  if (bias) out = Add(out, Load("bias", DType::kFloat32, j));
  if (relu) out = Max(out, FloatImm(0.0));
  if (extra.fn) out = extra.fn(out, Var("i"), j);
  if (bias || relu || extra.fn) def.epilogue = out;

  Schedule s(std::move(def));
  RETURN_IF_ERROR(ScheduleGemm(&s, c, pack, /*batch=*/0, task.Param("M"), task.Param("N"),
                               target));
  ASSIGN_OR_RETURN(LoweredFunc func,
                   Lower(s, kernel_only ? CostModelKernelName(task) : KernelSymbol(task, *this, config)));
  func.body = AddGemmPrefetch(func.body, pack ? kDenseBuffers.b_packed : kDenseBuffers.b,
                              c.Int("prefetch_k", 0));
  // The copy is done once per set of weights, so it need not be fast: serial.
  if (pack && !kernel_only) func.prepack = PackBNest(kDenseBuffers, 1, n, k, lanes, vecs, /*parallel=*/false);
  return func;
}

}  // namespace tuneforge
