// dense_cpu: the fully connected template (packed weights, fused epilogues).
#include "compiler/templates/dense_template.h"

#include <algorithm>

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
  const ConfigSpace space = Space(task, target);
  std::vector<Config> out = GemmHeuristics(space, target, kPackKnob, task.Param("M"), task.Param("N"), 0);
  // With AVX2's 16 registers and a block of rows (a transformer's tokens): one
  // 16-column strip of packed W per parallel work item (jik), 32 rows of 4-row
  // register tiles down it, a 128-deep k slice. The best config of short tuning runs
  // of BERT's 128 x 3072 x 768 and 128 x 768 x 3072 on a Zen 3 (5.0 and 5.9 ms against
  // 6.8 and 7.6 ms for GemmHeuristics' first).
  if (target.VectorRegisters() < 32 && task.Param("M") >= 32 && target.MaxF32Lanes() == 8) {
    Config strip(nlohmann::json{{"tile_i_reg", 4}, {"vec_lanes", 8}, {"tile_j_vecs", 2}, {"tile_i_blocks", 8},
                                {"tile_j_blocks", 1}, {"tile_k", 128}, {"unroll_k", 1}, {"loop_order", "jik"},
                                {"parallel", target.num_threads > 1 ? 1 : 0}, {"accumulate", "registers"},
                                {kPackKnob, 1}});
    if (space.Check(strip).ok()) {
      out.erase(std::remove(out.begin(), out.end(), strip), out.end());
      out.insert(out.begin(), strip);
    }
  }
  return out;
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
