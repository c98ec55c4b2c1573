// `tuneforge deploy`: build a linkable library from the best records, and
// `tuneforge deploy inspect`: read a deployed library's provenance, optionally
// re-measuring its kernels against the recorded speed.
#include <cstdio>
#include <filesystem>
#include <map>

#include "absl/strings/str_join.h"
#include "tuner/model_timing.h"
#include "cli/client.h"
#include "cli/model_tuning.h"
#include "compiler/codegen/build.h"
#include "compiler/graph/executor.h"
#include "deploy/model_library.h"

#include "compiler/support/files.h"
#include "compiler/support/status.h"
#include "compiler/task/task_list.h"
#include "deploy/deploy.h"
#include "deploy/inspect.h"
#include "nlohmann/json.hpp"
#include "tuner/tuning_loop.h"
#include "cli/commands.h"
#include "cli/flags.h"

namespace tuneforge::cli {
namespace {

constexpr const char* kDeployUsage =
    "usage: tuneforge deploy --db PATH (--task \"...\" | --tasks FILE) --out DIR\n"
    "                        [--name NAME] [--device-key KEY] [--target-key KEY]\n"
    "                        [--target aarch64|riscv64|x86_64|CPU]\n"
    "                        [--fallback default] [--json]\n"
    "       tuneforge deploy --model M.onnx [--dim NAME=N] [--shape INPUT=D0,...] [--db PATH] -o|--out DIR [--name NAME]\n"
    "                        [--target aarch64|riscv64|x86-64-v3|...] [--threads N] [--json]\n"
    "       tuneforge deploy inspect DIR/libNAME.so [--bench] [--json]\n"
    "       tuneforge deploy inspect DIR   (a model library: its provenance and files)\n"
    "  Builds DIR/libNAME.so, DIR/libNAME.a and DIR/NAME.h with one C function per task,\n"
    "  from the best record of each task on one target. A task without a record is an\n"
    "  error unless --fallback default (untuned schedule, with a warning).\n"
    "  inspect prints the library's provenance; --bench re-measures each kernel and\n"
    "  compares it with the GFLOP/s recorded when it was tuned.\n"
    "  --model       the whole model as one library with a C API (tf_model_load,\n"
    "                tf_model_run, ...; DIR/NAME.h), its weights in DIR/NAME.weights and\n"
    "                DIR/provenance.json; every task with its best record in --db for\n"
    "                this machine, tasks without one on the default schedule (a warning)\n"
    "  --name        library name, a C identifier (default tuneforge_kernels; with\n"
    "                --model tuneforge_model)\n"
    "  --tasks FILE  one task per line; '#' comments; an optional weight=W is ignored\n"
    "  --target      use the records of this architecture (aarch64, riscv64, x86_64) or CPU\n"
    "                (x86-64-v3, znver5); another architecture's library is built with its\n"
    "                cross toolchain (scripts/install-deps installs aarch64's and riscv64's);\n"
    "                with --model and no records there: the named target's default schedules\n";

// A model library's directory: its provenance and files.
absl::StatusOr<int> InspectModelLibrary(const std::string& dir, bool json) {
  ASSIGN_OR_RETURN(std::string text, ReadFile(dir + "/provenance.json"));
  nlohmann::json p = nlohmann::json::parse(text, nullptr, false);
  if (p.is_discarded() || !p.contains("model")) {
    return absl::InvalidArgumentError(dir + "/provenance.json is not a model library's provenance");
  }
  if (json) {
    std::printf("%s\n", p.dump().c_str());
    return 0;
  }
  std::printf("model:     %s\n", p["model"]["path"].get<std::string>().c_str());
  std::printf("library:   %s (tuneforge %s)\n", p["library"].get<std::string>().c_str(),
              p["tuneforge_version"].get<std::string>().c_str());
  std::printf("target:    %s\n", p["target"]["key"].get<std::string>().c_str());
  std::printf("db:        %s\n", p["db"].get<std::string>().c_str());
  for (const nlohmann::json& t : p["tasks"]) {
    std::printf("  %-56s x%-3d %s\n", t["task"].get<std::string>().c_str(), t["weight"].get<int>(),
                t["schedule"] == "tuned"
                    ? ("record " + std::to_string(t["record_id"].get<int64_t>())).c_str()
                    : "DEFAULT schedule (untuned)");
  }
  std::printf("kernels:   %d in %d steps; weights %.1f KiB; intermediate tensors %.1f KiB\n",
              p["kernels"].get<int>(), p["steps"].get<int>(), p["weights_bytes"].get<double>() / 1024,
              p["arena_bytes"].get<double>() / 1024);
  for (const nlohmann::json& w : p["warnings"]) std::printf("warning:   %s\n", w.get<std::string>().c_str());
  return 0;
}

absl::StatusOr<int> Inspect(const Flags& flags) {
  if (flags.positional().size() != 2) {
    return absl::InvalidArgumentError("inspect needs the path of a lib<name>.so or a model library's directory");
  }
  if (std::filesystem::is_directory(flags.positional()[1])) {
    return InspectModelLibrary(flags.positional()[1], flags.Has("json"));
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

absl::StatusOr<int> DeployModelCommand(const Flags& flags) {
  for (const char* f : {"task", "tasks", "device-key", "target-key", "fallback"}) {
    if (flags.Has(f)) return absl::InvalidArgumentError(std::string("--") + f + " is not for --model");
  }
  RETURN_IF_ERROR(flags.Require("out"));
  const std::string path = flags.Get("model");
  ASSIGN_OR_RETURN(frontend::DimBindings dims, DimBindingsFromFlags(flags));
  ASSIGN_OR_RETURN(LoadedModel model, LoadOnnxModel(path, dims));
  std::unique_ptr<Database> db;
  if (flags.Has("db")) {
    ASSIGN_OR_RETURN(db, OpenDbReadOnly(flags.Get("db")));
  }
  const Target host = DetectHostTarget("local");
  Target target = host;
  graph::ExecutorOptions options;
  if (flags.Has("target")) {
    // The target the model's tasks were tuned for (their records), else the named one
    // with default schedules.
    const std::string name = flags.Get("target");
    std::optional<TargetInfo> tuned;
    if (db) {
      std::vector<TuningTask> tasks;
      for (const graph::ExtractedTask& t : model.table.tasks) {
        ASSIGN_OR_RETURN(TuningTask task, ParseTask(t.task));
        tasks.push_back(std::move(task));
      }
      ASSIGN_OR_RETURN(tuned, RecordTarget(db.get(), tasks, "", "", name));
    }
    if (tuned) {
      target = TargetOfRecord(*tuned);
    } else {
      absl::StatusOr<NamedTarget> named = FindNamedTarget(name);
      if (!named.ok())
        return absl::NotFoundError("no records of the model's tasks on target '" + name + "'" +
                                   (db ? " in " + flags.Get("db") : std::string(" (no --db)")) +
                                   ", and " + std::string(named.status().message()));
      ASSIGN_OR_RETURN(target, ParseTarget(named->target, host));
    }
    // Another architecture: the executor runs here only to prepack the weights.
    if (TripleArchitecture(target.triple) != TripleArchitecture(host.triple)) {
      options.run_on = host;
      options.run_on->num_threads = 1;
    }
  }
  ASSIGN_OR_RETURN(int64_t threads, flags.GetInt("threads", target.num_threads, 1, 256));
  target.num_threads = static_cast<int>(threads);

  // Each task's best record for this target, remembered for the provenance.
  std::map<std::string, TuningRecord> used;  // canonical task -> record
  if (db) {
    graph::ScheduleFn best = BestRecordSchedule(db.get(), &target);
    options.schedule = [&, best](const TuningTask& task, const Template& tmpl)
        -> absl::StatusOr<std::optional<Config>> {
      ASSIGN_OR_RETURN(std::optional<Config> config, best(task, tmpl));
      if (config) {
        ASSIGN_OR_RETURN(TuningRecord r, db->Best(task.WorkloadKey(), target.Key()));
        used[task.CanonicalText()] = r;
      }
      return config;
    };
  }
  ASSIGN_OR_RETURN(std::unique_ptr<graph::Executor> exec, graph::Executor::Create(model.graph, target, options));
  ASSIGN_OR_RETURN(graph::ExportedModel exported, exec->Export());

  ModelDeployOptions o;
  o.out_dir = flags.Get("out");
  o.name = flags.Get("name", o.name);
  o.tuneforge_version = TUNEFORGE_VERSION;
  std::error_code ec;
  const auto model_bytes = std::filesystem::file_size(path, ec);
  nlohmann::ordered_json p = {
      {"library", o.name},
      {"model", {{"path", path}, {"bytes", ec ? 0 : model_bytes}, {"bound_dims", dims.ToString()}}},
      {"tuneforge_version", o.tuneforge_version},
      {"target", {{"key", target.Key()}, {"triple", target.triple}, {"cpu", target.cpu},
                  {"features", target.features}, {"num_threads", target.num_threads}}},
      {"db", flags.Get("db")},
      {"tasks", nlohmann::ordered_json::array()},
      {"kernels", exported.kernels.size()},
      {"steps", exported.steps.size()},
      {"weights_bytes", exported.blob.size()},
      {"arena_bytes", exported.arena_bytes},
      {"warnings", nlohmann::ordered_json::array()}};
  std::vector<std::string> untuned;
  for (const graph::ExtractedTask& t : model.table.tasks) {
    nlohmann::ordered_json row = {{"task", t.task}, {"weight", t.weight}};
    auto it = used.find(t.task);
    if (it != used.end()) {
      row["schedule"] = "tuned";
      row["record_id"] = it->second.id;
      row["config"] = nlohmann::json::parse(it->second.config_json, nullptr, false);
      const double cost = it->second.result.MedianCost();
      row["gflops"] = cost > 0 ? t.flops / cost / 1e9 : 0.0;
    } else {
      row["schedule"] = "default";
      untuned.push_back(t.task);
    }
    p["tasks"].push_back(row);
  }
  if (!untuned.empty()) {
    p["warnings"].push_back(std::to_string(untuned.size()) + " of " + std::to_string(model.table.tasks.size()) +
                            " tasks have no record for " + target.Key() +
                            (flags.Has("db") ? " in " + flags.Get("db") : std::string(" (no --db)")) +
                            " and run the default (untuned) schedule: " + absl::StrJoin(untuned, "; "));
  }
  o.provenance_json = p.dump(2);
  ASSIGN_OR_RETURN(ModelDeployReport r, DeployModel(exported, target, o));
  for (const nlohmann::ordered_json& w : p["warnings"]) std::fprintf(stderr, "warning: %s\n", w.get<std::string>().c_str());
  if (flags.Has("json")) {
    nlohmann::json out = {{"shared_library", r.shared_library}, {"static_library", r.static_library},
                          {"header", r.header}, {"weights", r.weights}, {"provenance", r.provenance},
                          {"target_key", target.Key()}, {"kernels", r.kernels}, {"steps", r.steps},
                          {"tuned_tasks", model.table.tasks.size() - untuned.size()},
                          {"default_tasks", untuned.size()}};
    std::printf("%s\n", out.dump().c_str());
    return 0;
  }
  std::printf("model:   %s, %zu tasks (%zu tuned, %zu default schedule)\n", path.c_str(), model.table.tasks.size(),
              model.table.tasks.size() - untuned.size(), untuned.size());
  std::printf("target:  %s\n", target.Key().c_str());
  std::printf("kernels: %d in %d steps; weights %.1f KiB; intermediate tensors %.1f KiB\n", r.kernels, r.steps,
              r.weights_bytes / 1024.0, r.arena_bytes / 1024.0);
  std::printf("wrote %s\n      %s\n      %s\n      %s\n      %s\n", r.shared_library.c_str(),
              r.static_library.c_str(), r.header.c_str(), r.weights.c_str(), r.provenance.c_str());
  return 0;
}

}  // namespace

absl::StatusOr<int> DeployCommand(const std::vector<std::string>& args) {
  std::vector<std::string> rest;
  for (const std::string& a : args) rest.push_back(a == "-o" ? "--out" : a);  // -o: the short --out
  ASSIGN_OR_RETURN(Flags flags, Flags::Parse(rest,
                                             {"db", "task", "tasks", "out", "name", "device-key",
                                              "target-key", "target", "fallback", "model", "threads",
                                              "dim", "shape"},
                                             {"json", "help", "bench"}, {"dim", "shape"}));
  if (flags.Has("help")) {
    std::fputs(kDeployUsage, stdout);
    return 0;
  }
  if (!flags.positional().empty() && flags.positional()[0] == "inspect") return Inspect(flags);
  if (!flags.positional().empty()) {
    return absl::InvalidArgumentError("unexpected argument '" + flags.positional()[0] + "'");
  }
  if (flags.Has("model")) return DeployModelCommand(flags);
  if (flags.Has("threads")) return absl::InvalidArgumentError("--threads is for --model");
  DeployOptions o;
  RETURN_IF_ERROR(flags.Require("db"));
  RETURN_IF_ERROR(flags.Require("out"));
  o.db_path = flags.Get("db");
  o.out_dir = flags.Get("out");
  o.name = flags.Get("name", o.name);
  o.device_key = flags.Get("device-key");
  o.target_key = flags.Get("target-key");
  o.target_name = flags.Get("target");
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
