// The template registry: which template serves which task.
#include "compiler/support/hash.h"
#include "compiler/templates/conv2d_template.h"
#include "compiler/templates/dense_template.h"
#include "compiler/templates/matmul_template.h"
#include "compiler/templates/quantized_conv2d.h"
#include "compiler/templates/quantized_matmul.h"
#include "compiler/templates/template.h"

namespace tuneforge {

absl::StatusOr<const Template*> FindTemplate(const TuningTask& task) {
  static const MatmulTemplate* matmul = new MatmulTemplate();
  static const MatmulTemplate* batch_matmul = new MatmulTemplate(/*batched=*/true);
  if (task.op() == "matmul") return matmul;
  if (task.op() == "batch_matmul") return batch_matmul;
  static const DenseTemplate* dense = new DenseTemplate();
  if (task.op() == "dense") return dense;
  static const Conv2dTemplate* conv2d = new Conv2dTemplate(/*depthwise=*/false);
  static const Conv2dTemplate* depthwise = new Conv2dTemplate(/*depthwise=*/true);
  if (task.op() == "conv2d") return conv2d;
  if (task.op() == "depthwise_conv2d") return depthwise;
  static const QuantizedMatmulTemplate* qmatmul = new QuantizedMatmulTemplate();
  if (task.op() == "qmatmul") return qmatmul;
  static const QuantizedConv2dTemplate* qconv2d = new QuantizedConv2dTemplate();
  if (task.op() == "qconv2d") return qconv2d;
  static const QuantizedDepthwiseTemplate* qdepthwise = new QuantizedDepthwiseTemplate();
  if (task.op() == "qdepthwise_conv2d") return qdepthwise;
  return absl::NotFoundError("no template for op " + task.op());
}

std::shared_ptr<const ConfigSpace> SpaceOf(const Template& tmpl, const TuningTask& task, const Target& target) {
  // Keyed by everything a space depends on: the template (its name and version too, in
  // case another template is later built at the same address), the task and the target.
  struct Memo {
    const Template* tmpl = nullptr;
    std::string name;
    int version = 0;
    std::string op;
    std::string dtype;  // qmatmul's space depends on its output type
    std::vector<std::pair<std::string, int64_t>> params;
    Target target;
    std::shared_ptr<const ConfigSpace> space;
  };
  thread_local Memo memo;
  const Target& t = memo.target;
  if (memo.space && memo.tmpl == &tmpl && memo.name == tmpl.name() && memo.version == tmpl.version() &&
      memo.op == task.op() && memo.dtype == task.dtype() && memo.params == task.params() && t.triple == target.triple && t.cpu == target.cpu &&
      t.features == target.features && t.num_threads == target.num_threads && t.device_key == target.device_key)
    return memo.space;
  memo = Memo{&tmpl, tmpl.name(), tmpl.version(), task.op(), task.dtype(), task.params(), target,
              std::make_shared<const ConfigSpace>(tmpl.Space(task, target))};
  return memo.space;
}

std::string CostModelKernelName(const TuningTask& task) { return "tf_" + task.op() + "_kernel"; }

std::string KernelSymbol(const TuningTask& task, const Template& tmpl, const Config& config) {
  return "tf_" + task.op() + "_" +
         HashHex(task.CanonicalText() + "|" + tmpl.name() + "|" + std::to_string(tmpl.version()) +
                 "|" + config.ToJson())
             .substr(0, 12);
}

}  // namespace tuneforge
