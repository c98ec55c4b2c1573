#include "deploy/inspect.h"

#include <dlfcn.h>

#include <algorithm>
#include <cstdlib>
#include <filesystem>
#include <memory>

#include "compiler/reference/reference.h"
#include "compiler/runtime/runtime.h"
#include "compiler/runtime/timing.h"
#include "compiler/support/status.h"
#include "compiler/task/task.h"
#include "nlohmann/json.hpp"

namespace tuneforge {
namespace {

// Mirrors the generated <name>_kernel_info (deploy.cc GenerateHeader).
struct KernelInfo {
  const char* function;
  const char* op;
  const char* task;
  int num_params;
  const int64_t* params;
  int (*run)(void** buffers);
  const char* const* param_names;
};

}  // namespace

absl::StatusOr<Inspection> InspectLibrary(const std::string& library, bool bench) {
  std::string file = std::filesystem::path(library).filename().string();
  if (file.rfind("lib", 0) != 0 || file.size() <= 6 || file.substr(file.size() - 3) != ".so") {
    return absl::InvalidArgumentError(library + " is not a lib<name>.so made by tuneforge deploy");
  }
  Inspection out;
  out.name = file.substr(3, file.size() - 6);
  // DEEPBIND: the library's kernels use the library's own runtime, as in a user's
  // program, not the copy inside this executable.
  void* handle = dlopen(std::filesystem::absolute(library).c_str(), RTLD_NOW | RTLD_LOCAL | RTLD_DEEPBIND);
  if (!handle) return absl::InvalidArgumentError(std::string("cannot load ") + dlerror());
  auto provenance = reinterpret_cast<const char* (*)()>(dlsym(handle, (out.name + "_provenance").c_str()));
  auto count = reinterpret_cast<int (*)()>(dlsym(handle, (out.name + "_num_kernels").c_str()));
  auto kernel = reinterpret_cast<const KernelInfo* (*)(int)>(dlsym(handle, (out.name + "_kernel").c_str()));
  if (!provenance || !count || !kernel) {
    dlclose(handle);
    return absl::InvalidArgumentError(library + " has no " + out.name +
                                      "_provenance/_num_kernels/_kernel: not made by tuneforge deploy");
  }
  out.provenance_json = provenance();
  if (!bench) {
    dlclose(handle);
    return out;
  }
  nlohmann::json prov = nlohmann::json::parse(out.provenance_json, nullptr, false);
  for (int i = 0; i < count(); ++i) {
    const KernelInfo* info = kernel(i);
    KernelCheck check;
    check.function = info->function;
    check.task = info->task;
    if (prov.is_object() && prov.contains("kernels") && prov["kernels"].size() > static_cast<size_t>(i))
      check.recorded_gflops = prov["kernels"][i].value("gflops", 0.0);
    ASSIGN_OR_RETURN(TuningTask task, ParseTask(info->task));
    std::vector<std::vector<float>> inputs = MakeInputs(task, 42);
    ASSIGN_OR_RETURN(std::vector<float> expected, ReferenceOutput(task, inputs));
    // 64-byte aligned copies, as the agent measures: AVX-512 loads that straddle cache
    // lines would otherwise make the comparison with the record unfair.
    std::vector<std::unique_ptr<float, decltype(&std::free)>> owned;
    std::vector<void*> buffers;
    auto aligned = [&](size_t n) {
      size_t bytes = (n * sizeof(float) + 63) / 64 * 64;
      owned.emplace_back(static_cast<float*>(std::aligned_alloc(64, bytes)), &std::free);
      buffers.push_back(owned.back().get());
      return owned.back().get();
    };
    for (const auto& in : inputs) std::copy(in.begin(), in.end(), aligned(in.size()));
    float* result = aligned(expected.size());
    std::fill(result, result + expected.size(), std::nanf(""));
    if (info->run(buffers.data()) != 0) return absl::InternalError(check.function + " returned an error");
    Tolerance tol = ToleranceFor(task);
    check.correct = runtime::FirstMismatch(result, expected.data(),
                                           static_cast<int64_t>(expected.size()), tol.atol, tol.rtol) < 0;
    runtime::TimingOptions timing;
    timing.warmup = 2;
    timing.repeat = 5;
    timing.min_repeat_ms = 100;
    ASSIGN_OR_RETURN(runtime::Timing t,
                     runtime::TimeKernel(reinterpret_cast<runtime::KernelEntry>(info->run),
                                         buffers.data(), timing));
    std::vector<double> costs = t.costs;
    std::sort(costs.begin(), costs.end());
    check.measured_gflops = task.Flops() / costs[costs.size() / 2] / 1e9;
    out.kernels.push_back(check);
  }
  dlclose(handle);
  return out;
}

}  // namespace tuneforge
