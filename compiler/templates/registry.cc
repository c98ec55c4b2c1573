#include "compiler/support/hash.h"
#include "compiler/templates/conv2d_template.h"
#include "compiler/templates/dense_template.h"
#include "compiler/templates/matmul_template.h"
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
  return absl::NotFoundError("no template for op " + task.op());
}

std::string KernelSymbol(const TuningTask& task, const Template& tmpl, const Config& config) {
  return "tf_" + task.op() + "_" +
         HashHex(task.CanonicalText() + "|" + tmpl.name() + "|" + std::to_string(tmpl.version()) +
                 "|" + config.ToJson())
             .substr(0, 12);
}

}  // namespace tuneforge
