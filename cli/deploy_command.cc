// `tuneforge deploy`: build a linkable library from the best records, and
// `tuneforge deploy inspect`: read a deployed library's provenance, optionally
// re-measuring its kernels against the recorded speed.
#include <cstdio>

#include "compiler/support/status.h"
#include "compiler/task/task_list.h"
#include "deploy/deploy.h"
#include "deploy/inspect.h"
#include "nlohmann/json.hpp"
#include "cli/commands.h"
#include "cli/flags.h"

namespace tuneforge::cli {
namespace {

constexpr const char* kDeployUsage =
    "usage: tuneforge deploy --db PATH (--task \"...\" | --tasks FILE) --out DIR\n"
    "                        [--name NAME] [--device-key KEY] [--target-key KEY]\n"
    "                        [--fallback default] [--json]\n"
    "       tuneforge deploy inspect DIR/libNAME.so [--bench] [--json]\n"
    "  Builds DIR/libNAME.so, DIR/libNAME.a and DIR/NAME.h with one C function per task,\n"
    "  from the best record of each task on one target. A task without a record is an\n"
    "  error unless --fallback default (untuned schedule, with a warning).\n"
    "  inspect prints the library's provenance; --bench re-measures each kernel and\n"
    "  compares it with the GFLOP/s recorded when it was tuned.\n"
    "  --name        library name, a C identifier (default tuneforge_kernels)\n"
    "  --tasks FILE  one task per line; '#' comments; an optional weight=W is ignored\n";

absl::StatusOr<int> Inspect(const Flags& flags) {
  if (flags.positional().size() != 2) {
    return absl::InvalidArgumentError("inspect needs the path of a lib<name>.so");
  }
  ASSIGN_OR_RETURN(Inspection in, InspectLibrary(flags.positional()[1], flags.Has("bench")));
  if (flags.Has("json")) {
    nlohmann::json out = {{"name", in.name},
                          {"provenance", nlohmann::json::parse(in.provenance_json, nullptr, false)}};
    for (const KernelCheck& k : in.kernels) {
      out["bench"].push_back({{"function", k.function}, {"task", k.task},
                              {"recorded_gflops", k.recorded_gflops},
                              {"measured_gflops", k.measured_gflops}, {"correct", k.correct}});
    }
    std::printf("%s\n", out.dump().c_str());
  } else {
    std::printf("%s\n", in.provenance_json.c_str());
    if (!in.kernels.empty()) {
      std::printf("\n%-40s %12s %12s %7s %s\n", "function", "recorded", "measured", "ratio", "check");
      for (const KernelCheck& k : in.kernels) {
        std::printf("%-40s %9.2f GF %9.2f GF %7.2f %s\n", k.function.c_str(), k.recorded_gflops,
                    k.measured_gflops, k.recorded_gflops > 0 ? k.measured_gflops / k.recorded_gflops : 0,
                    k.correct ? "correct" : "WRONG");
      }
    }
  }
  for (const KernelCheck& k : in.kernels)
    if (!k.correct) return absl::InternalError(k.function + " computes a wrong answer");
  return 0;
}

}  // namespace

absl::StatusOr<int> DeployCommand(const std::vector<std::string>& args) {
  ASSIGN_OR_RETURN(Flags flags, Flags::Parse(args,
                                             {"db", "task", "tasks", "out", "name", "device-key",
                                              "target-key", "fallback"},
                                             {"json", "help", "bench"}));
  if (flags.Has("help")) {
    std::fputs(kDeployUsage, stdout);
    return 0;
  }
  if (!flags.positional().empty() && flags.positional()[0] == "inspect") return Inspect(flags);
  if (!flags.positional().empty()) {
    return absl::InvalidArgumentError("unexpected argument '" + flags.positional()[0] + "'");
  }
  DeployOptions o;
  RETURN_IF_ERROR(flags.Require("db"));
  RETURN_IF_ERROR(flags.Require("out"));
  o.db_path = flags.Get("db");
  o.out_dir = flags.Get("out");
  o.name = flags.Get("name", o.name);
  o.device_key = flags.Get("device-key");
  o.target_key = flags.Get("target-key");
  o.tuneforge_version = TUNEFORGE_VERSION;
  if (flags.Has("fallback")) {
    if (flags.Get("fallback") != "default") {
      return absl::InvalidArgumentError("--fallback accepts only 'default'");
    }
    o.fallback_default = true;
  }
  if (flags.Has("task") == flags.Has("tasks")) {
    return absl::InvalidArgumentError("give exactly one of --task or --tasks");
  }
  if (flags.Has("task")) {
    o.tasks = {flags.Get("task")};
  } else {
    ASSIGN_OR_RETURN(std::vector<ScheduledTask> tasks, ReadTasksFile(flags.Get("tasks")));
    for (const ScheduledTask& t : tasks) o.tasks.push_back(t.task_text);  // weights unused
  }
  ASSIGN_OR_RETURN(DeployReport r, Deploy(o));
  for (const std::string& w : r.warnings) std::fprintf(stderr, "%s\n", w.c_str());
  if (flags.Has("json")) {
    nlohmann::json out = {{"shared_library", r.shared_library}, {"static_library", r.static_library},
                          {"header", r.header}, {"target_key", r.target_key}};
    for (const DeployedKernel& k : r.kernels) {
      out["kernels"].push_back({{"function", k.function}, {"task", k.task},
                                {"record_id", k.record_id}, {"gflops", k.gflops},
                                {"fallback", k.fallback}});
    }
    std::printf("%s\n", out.dump().c_str());
    return 0;
  }
  std::printf("target: %s\n", r.target_key.c_str());
  for (const DeployedKernel& k : r.kernels) {
    std::printf("  %-40s %-40s %s\n", k.function.c_str(), k.task.c_str(),
                k.fallback ? "UNTUNED fallback" : (std::to_string(k.gflops) + " GFLOP/s").c_str());
  }
  std::printf("wrote %s\n      %s\n      %s\n", r.shared_library.c_str(), r.static_library.c_str(),
              r.header.c_str());
  return 0;
}

}  // namespace tuneforge::cli
