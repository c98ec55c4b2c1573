// InProcessRunner: loads a kernel, checks it once against the reference, times it.
#include "bench/in_process_runner.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <list>
#include <string>

#include "compiler/runtime/module_loader.h"
#include "compiler/runtime/runtime.h"
#include "compiler/support/status.h"

namespace tuneforge::cli {

absl::Status InProcessRunner::Prepare(const Template& tmpl, const Target& target) {
  ASSIGN_OR_RETURN(ir::LoweredFunc naive,
                   tmpl.Instantiate(task_, target, tmpl.Naive(task_, target)));
  for (const ir::BufferParam& p : naive.params) {
    is_output_.push_back(p.is_output);
    if (p.is_internal) prepacked_sizes_[is_output_.size() - 1] = {ElementTypeOf(p), p.NumElements()};
  }
  inputs_ = MakeTypedInputs(task_, seed_);
  ASSIGN_OR_RETURN(expected_, TypedReferenceOutput(task_, inputs_));
  tolerance_ = ToleranceFor(task_);
  return absl::OkStatus();
}

std::vector<MeasureResult> InProcessRunner::Measure(const std::vector<MeasureInput>& inputs) {
  std::vector<MeasureResult> out;
  for (const MeasureInput& in : inputs) out.push_back(MeasureOne(in));
  return out;
}

MeasureResult InProcessRunner::MeasureOne(const MeasureInput& in) {
  MeasureResult r;
  std::string error;
  auto module =
      runtime::LoadedModule::Load(in.artifact->shared_object, in.artifact->entry_symbol, &error);
  if (!module) {
    r.error = MeasureErrorKind::kRuntimeError;
    r.error_message = error;
    return r;
  }
  HostBuffer output(expected_.type(), expected_.elements());
  runtime::PoisonBuffer(output.type(), output.data(), output.elements());
  std::vector<void*> buffers;  // entry-point order; MakeTypedInputs skips output and prepacked
  std::list<HostBuffer> prepacked;
  size_t next_input = 0;
  for (size_t i = 0; i < is_output_.size(); ++i) {
    auto internal = prepacked_sizes_.find(i);
    if (internal != prepacked_sizes_.end()) {
      // The config's own size (Winograd's transformed weights are larger).
      const std::vector<int64_t>& own = in.artifact->buffer_elements;
      prepacked.emplace_back(internal->second.first, i < own.size() ? own[i] : internal->second.second);
      buffers.push_back(prepacked.back().data());
    } else {
      buffers.push_back(is_output_[i] ? output.data() : inputs_[next_input++].data());
    }
  }
  if (module->Prepack(buffers.data()) != 0 || module->Run(buffers.data()) != 0 ||
      module->Unpack(buffers.data()) != 0) {
    r.error = MeasureErrorKind::kRuntimeError;
    r.error_message = "kernel returned non-zero";
    return r;
  }
  if (runtime::FirstMismatch(output.type(), output.data(), expected_.data(), expected_.elements(), tolerance_.atol,
                             tolerance_.rtol) >= 0) {
    r.error = MeasureErrorKind::kWrongAnswer;
    return r;
  }
  using Clock = std::chrono::steady_clock;
  auto time = [&](int number) {
    auto t0 = Clock::now();
    for (int i = 0; i < number; ++i) module->Run(buffers.data());
    return std::chrono::duration<double>(Clock::now() - t0).count();
  };
  const MeasureOptions& o = in.options;
  for (int i = 0; i < o.warmup; ++i) time(1);
  int number = std::max(1, o.number);
  while (time(number) * 1e3 < o.min_repeat_ms && number < (1 << 20)) number *= 2;
  for (int i = 0; i < o.repeat; ++i) r.costs.push_back(time(number) / number);
  return r;
}

}  // namespace tuneforge::cli
