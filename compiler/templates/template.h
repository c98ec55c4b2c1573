// Template: turns (TuningTask, Target, Config) into a lowered kernel. Each op has
// one or more templates; each has a name and a version that records carry, so a
// record made with an older template version can be told apart.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "compiler/ir/ir.h"
#include "compiler/target/target.h"
#include "compiler/task/task.h"
#include "compiler/templates/config_space.h"

namespace tuneforge {

// Thread-safe: templates are stateless.
class Template {
 public:
  virtual ~Template() = default;
  virtual std::string name() const = 0;
  virtual int version() const = 0;
  virtual ConfigSpace Space(const TuningTask& task, const Target& target) const = 0;
  // The untuned schedule (plain loop nest) that speedups are measured against.
  virtual Config Naive(const TuningTask& task, const Target& target) const = 0;
  // Hand-picked configs that are usually good on the target (register tiles sized
  // for its vector registers, cache tiles for L1/L2): a search may measure them first.
  // Every one is valid in Space(task, target). Empty by default.
  virtual std::vector<Config> Heuristics(const TuningTask& task, const Target& target) const {
    (void)task;
    (void)target;
    return {};
  }
  // True when the template's kernels have a prepack entry (LoweredFunc::prepack) that
  // fills buffers from constant inputs before the timed runs (dense's packed weights).
  virtual bool HasPrepack() const { return false; }
  // Floating-point operations the config's kernel performs, at least: the task's
  // (TuningTask::Flops) unless the config computes it by a cheaper algorithm
  // (Winograd). GFLOP/s figures stay the task's FLOPs over time ("effective"); this
  // is what bounds how fast a correct kernel can be at the machine's peak.
  virtual double Flops(const TuningTask& task, const Config& config) const {
    (void)config;
    return task.Flops();
  }
  // Checks the config against the space, schedules and lowers. InvalidArgument for
  // an invalid config.
  virtual absl::StatusOr<ir::LoweredFunc> Instantiate(const TuningTask& task, const Target& target,
                                                      const Config& config) const = 0;
  // What the cost model's features read: Instantiate's params and body. A template may
  // leave out the rest (prepack, unpack), which can be most of the lowering time
  // (Winograd's weight transform); the cost model lowers thousands of candidates a
  // second. Its name need not be the entry symbol (it is never compiled). By default,
  // Instantiate.
  virtual absl::StatusOr<ir::LoweredFunc> InstantiateKernel(const TuningTask& task, const Target& target,
                                                            const Config& config) const {
    return Instantiate(task, target, config);
  }
};

// The template for a task's op; NotFound when the op has none.
absl::StatusOr<const Template*> FindTemplate(const TuningTask& task);

// tmpl.Space(task, target), from a per-thread memo of the last space built: what
// Instantiate checks a config against. The cost model lowers thousands of candidates
// of one task a second, and building the space (divisor lists, knobs) each time took
// a tenth of a GEMM's lowering.
std::shared_ptr<const ConfigSpace> SpaceOf(const Template& tmpl, const TuningTask& task, const Target& target);

// Entry symbol for a kernel: unique per (task, template, config).
std::string KernelSymbol(const TuningTask& task, const Template& tmpl, const Config& config);

// The name InstantiateKernel gives its function: the cost model's kernels are never
// compiled, so the config need not be hashed into it (a tenth of a GEMM's lowering).
std::string CostModelKernelName(const TuningTask& task);

}  // namespace tuneforge
