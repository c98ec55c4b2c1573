// `tuneforge tune`: submit a TuningJob and follow it. Without --server it runs the
// embedded default: an in-process Server on a free loopback port, one
// tuneforge-agent child process connected to it over gRPC, and a SQLite file. The
// CLI then talks to that server exactly as it would to a remote one.
#include <signal.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <csignal>
#include <filesystem>
#include <fstream>
#include <optional>
#include <set>
#include <sstream>
#include <thread>

#include "compiler/support/log.h"
#include "compiler/task/task.h"
#include "nlohmann/json.hpp"
#include "cli/commands.h"
#include "cli/client.h"
#include "bench/bench.h"
#include "cli/flags.h"
#include "server/job_json.h"
#include "cli/job_spec.h"
#include "compiler/task/task_list.h"
#include "cli/model_tuning.h"
#include "compiler/codegen/build.h"
#include "compiler/support/status.h"
#include "server/job_manager.h"
#include "server/server.h"
#include "tuner/runner.h"
#include "tuner/search_policy.h"
#include "tuneforge/v1/tuning.grpc.pb.h"

namespace tuneforge::cli {
namespace {

constexpr const char* kTuneUsage =
    "usage: tuneforge tune --task \"matmul M=512 N=512 K=512\" [--trials N] [--db PATH]\n"
    "                      [--server HOST:PORT] [--device-key KEY] [--seed S] [--json]\n"
    "                      [--target TEXT] [--batch N] [--timeout-ms MS] [--verbose]\n"
    "                      [--max-repeat N] [--max-spread-pct P] [--flush-cache]\n"
    "                      [--policy model|random|grid|ga] [--early-stop N]\n"
    "                      [--priority P] [--no-heuristics] [--model-early-batch N]\n"
    "       tuneforge tune --tasks FILE [--trials N] [--round-trials N] [options above]\n"
    "       tuneforge tune --model M.onnx [--dim NAME=N] [--shape INPUT=D0,...] [--trials N] [--round-trials N] [--flat-rounds N]\n"
    "                      [options above]\n"
    "  --task        the operator and shape (see docs: matmul M= N= K=)\n"
    "  --tasks       many tasks, one per line with an optional weight=W (how often it\n"
    "                runs); the budget is split across them by expected gain, in rounds\n"
    "                of --round-trials (default 32): one job whose rounds the server runs;\n"
    "                configs already in the db for a task count, as with --model\n"
    "  --model       an ONNX model, uploaded with one model job: its tasks share the\n"
    "                budget by expected gain (the server's gradient task scheduler),\n"
    "                rounds of --round-trials; configs already in the db for a task and\n"
    "                target count, so a second run with the same budget measures nothing\n"
    "                new. When the server's CPU is the target (the embedded default's is)\n"
    "                it also times the model: leftovers, in-run factors, the tuned model's\n"
    "                latency (docs/models.md)\n"
    "  --flat-rounds with --model: a task whose best improved by < 1% over N rounds\n"
    "                gets no more (default 3; 0 = never)\n"
    "  --scheduler   with --model: gradient (default) or round-robin (the ablation)\n"
    "  --trials      candidates to measure (default 200; with --tasks/--model: all tasks together)\n"
    "  --policy      search policy (default model: XGBoost cost model + simulated annealing)\n"
    "  --early-stop  stop a job after N trials without a new best (default 0: never)\n"
    "  --model-early-batch  the model policy's batch while a task is cold (no log model,\n"
    "                no records of other shapes) and has < 32 configs measured: it retrains\n"
    "                after every N (default 2); 0: full batches from the first trial, so\n"
    "                every agent of a farm is busy from the start\n"
    "  --no-heuristics  do not start with the template's heuristic configs (by default\n"
    "                up to a quarter of the trials measure them first)\n"
    "  --db          tuning-log SQLite file of the embedded server (default tuneforge.db)\n"
    "  --server      use a running tuneforge-server instead of the embedded default\n"
    "  --detach      with --server: submit one job and exit, printing its id (--json:\n"
    "                {\"job_id\": ...}); the server runs it to the end, a --model or --tasks\n"
    "                job as its own rounds of the task scheduler (with --flat-rounds and\n"
    "                --scheduler). Follow it with tuneforge jobs watch|show|cancel ID\n"
    "  --device-key  which agents measure (default local)\n"
    "  --seed        search and input seed (default 1)\n"
    "  --json        print one JSON object with the result on stdout\n"
    "  --vendor / --no-vendor  time the strongest vendor library on the same task on this\n"
    "                machine after tuning (OpenBLAS, oneDNN; matmul, batch_matmul, dense,\n"
    "                conv2d, depthwise_conv2d) and print it next to the result: on by\n"
    "                default for the embedded default's summary, off with --json\n"
    "  --target      \"llvm -mcpu=CPU -mattr=+f,... -threads=N\" (default: the server's CPU), or a\n"
    "                name: aarch64 (NEON), riscv64 (RVV), x86-64-v3 (AVX2 only); on the embedded\n"
    "                default aarch64 and riscv64 run on a device agent through qemu-user\n"
    "                (emulated: the timings are not a device's; docs/architecture.md)\n"
    "  --batch       candidates per round (default: 2 x agents, at least 8)\n"
    "  --timeout-ms  per-candidate measurement timeout (default 10000)\n"
    "  --max-repeat  samples per candidate at most (default 7, 1..100): after the first 3,\n"
    "                more while they disagree by more than --max-spread-pct; 1 or 3: no\n"
    "                extra samples\n"
    "  --max-spread-pct  how closely the samples must agree, in percent of their median\n"
    "                (default 5, 1..100; the fastest and slowest fifth left out)\n"
    "  --flush-cache time cold runs: the agent overwrites its caches before every\n"
    "                sample of one run, so weights and inputs come from memory as in a\n"
    "                model whose weights exceed the cache (suits --model; slower tuning)\n"
    "  --priority    1..10 (default 5): the job's share of the agents when jobs compete\n"
    "                for a device key (priority 2 gets twice the measurements of 1)\n"
    "  --token-file  file holding this user's token, for a server started with --tokens\n"
    "  --tls-ca      PEM certificate to verify a TLS server with (default: plaintext)\n";

std::atomic<bool> g_interrupted{false};
void OnInterrupt(int) { g_interrupted = true; }

void PrintBest(const char* label, const v1::BestResult& b) {
  std::printf("%s %.2f GFLOP/s (%.3f ms)\n", label, b.gflops(), b.seconds() * 1e3);
}

// The result of a --tasks job (one job of weighted tasks, run in rounds by the
// server's task scheduler). `db_path`: the embedded default's file ("" with --server).
void PrintTaskRounds(const v1::JobStatus& last, bool json, const std::string& db_path) {
  nlohmann::json out_tasks = nlohmann::json::array();
  int rounds = 0;
  for (const v1::TaskProgress& t : last.tasks()) {
    rounds += t.rounds();
    nlohmann::json j = {{"task", t.task()}, {"weight", t.weight()}, {"trials", t.trials()}};
    if (t.best().seconds() > 0) j["best"] = BestJson(t.best());
    out_tasks.push_back(j);
    if (!json)
      std::printf("%-50s weight %-4g %5d trials  %s\n", t.task().c_str(), t.weight(), t.trials(),
                  t.best().seconds() > 0 ? (std::to_string(t.best().gflops()) + " GFLOP/s").c_str() : "no result");
  }
  const double objective = last.estimated_seconds() > 0 ? last.estimated_seconds() : -1;
  if (json) {
    nlohmann::json out = {{"job_id", last.job_id()}, {"tasks", out_tasks}, {"trials", last.trials_done()},
                          {"rounds", rounds}, {"objective_seconds", objective}};
    if (!db_path.empty()) out["db"] = db_path;
    std::printf("%s\n", out.dump().c_str());
  } else {
    std::printf("objective:   %.4g ms (weighted sum of best latencies), %d trials in %d rounds\n", objective * 1e3,
                last.trials_done(), rounds);
  }
}

// The strongest vendor library on the job's task, timed on this machine (the vendor
// ops only); nullopt, with a warning on stderr, when it cannot be timed.
std::optional<VendorSpeed> VendorForJob(const v1::JobStatus& last, bool json) {
  static const std::set<std::string> kVendorOps = {"matmul", "batch_matmul", "dense", "conv2d",
                                                   "depthwise_conv2d"};
  if (last.best().seconds() <= 0) return std::nullopt;
  absl::StatusOr<TuningTask> task = ParseTask(last.task());
  if (!task.ok() || !kVendorOps.count(task->op())) return std::nullopt;
  if (!json) std::fprintf(stderr, "timing the vendor libraries on the same task...\n");
  absl::StatusOr<VendorSpeed> v = StrongestVendor(*task, last.target().num_threads());
  if (!v.ok()) {
    std::fprintf(stderr, "warning: could not time the vendor libraries: %s\n",
                 std::string(v.status().message()).c_str());
    return std::nullopt;
  }
  return *v;
}

// One job's result: JSON, or the summary lines. `db_path`: as PrintTaskRounds.
void PrintJobResult(const v1::JobStatus& last, const std::optional<VendorSpeed>& vendor, bool json,
                    const std::string& db_path) {
  const double speedup = last.has_baseline() && last.baseline().seconds() > 0
                             ? last.baseline().seconds() / last.best().seconds()
                             : 0;
  const double per_second = last.elapsed_seconds() > 0 ? last.trials_done() / last.elapsed_seconds() : 0;
  if (json) {
    nlohmann::json out = {
        {"job_id", last.job_id()},
        {"task", last.task()},
        {"target", {{"triple", last.target().triple()}, {"cpu", last.target().cpu()},
                    {"num_threads", last.target().num_threads()},
                    {"device_key", last.target().device_key()}}},
        {"trials", last.trials_done()},
        {"records", last.records()},
        {"errors", last.errors()},
        {"best", BestJson(last.best())},
        {"elapsed_seconds", last.elapsed_seconds()},
        {"trials_per_second", per_second},
        {"median_build_seconds", last.median_build_seconds()},
        {"warnings", std::vector<std::string>(last.warnings().begin(), last.warnings().end())},
        {"last_event", last.last_event()},  // e.g. how the finalists were re-measured
    };
    if (last.has_baseline()) out["baseline"] = BestJson(last.baseline());
    if (speedup > 0) out["speedup_over_baseline"] = speedup;
    if (vendor) {
      out["vendor"] = {{"name", vendor->name}, {"gflops", vendor->gflops},
                       {"tuned_over_vendor", last.best().gflops() / vendor->gflops},
                       {"all", nlohmann::json::object()}};
      for (const auto& [name, g] : vendor->all) out["vendor"]["all"][name] = g;
    }
    if (!db_path.empty()) out["db"] = db_path;
    std::printf("%s\n", out.dump().c_str());
    return;
  }
  std::printf("task:        %s\n", last.task().c_str());
  std::printf("target:      %s -mcpu=%s, %d threads, device key %s\n", last.target().triple().c_str(),
              last.target().cpu().c_str(), last.target().num_threads(), last.target().device_key().c_str());
  std::printf("best config: %s\n", last.best().config_json().c_str());
  PrintBest("best:       ", last.best());
  if (last.has_baseline()) {
    PrintBest("untuned:    ", last.baseline());
    std::printf("speedup:     %.1fx over the untuned loop nest\n", speedup);
  }
  if (vendor) {
    std::printf("vendor:      %.2f GFLOP/s, %s (the strongest of %zu, same machine, after tuning);"
                " tuned/vendor %.2fx\n",
                vendor->gflops, vendor->name.c_str(), vendor->all.size(), last.best().gflops() / vendor->gflops);
  }
  std::printf("trials:      %d (%d failed), %d records, %.1f s, %.2f trials/s, median build %.0f ms\n",
              last.trials_done(), last.errors(), last.records(), last.elapsed_seconds(), per_second,
              last.median_build_seconds() * 1e3);
  if (!db_path.empty()) std::printf("db:          %s\n", db_path.c_str());
  for (const std::string& w : last.warnings()) std::printf("warning:     %s\n", w.c_str());
}

// `tune --detach`: one job on the server, submitted and left to it. A model or a tasks
// file becomes a job of several weighted tasks, which the server's task scheduler
// runs in rounds; `tuneforge jobs watch|show|cancel` follow it.
absl::StatusOr<int> SubmitDetached(const Flags& flags, const v1::JobSpec& spec_flags,
                                   const std::optional<LoadedModel>& model, const std::vector<ScheduledTask>& tasks,
                                   bool multi, int64_t trials, int64_t round_trials, int64_t seed,
                                   const std::string& device_key, bool json) {
  if (!flags.Has("server")) {
    return absl::InvalidArgumentError("--detach needs --server HOST:PORT: the embedded server would stop "
                                      "with this process");
  }
  if (flags.Has("vendor")) {
    return absl::InvalidArgumentError("--vendor is not available with --detach (the vendor library is timed "
                                      "on this machine while the job runs)");
  }
  v1::JobSpec spec = spec_flags;
  spec.set_trials(static_cast<int>(trials));
  spec.set_device_key(device_key);
  spec.set_seed(static_cast<uint64_t>(seed));
  std::string target = flags.Get("target");
  if (IsTargetName(target)) {
    ASSIGN_OR_RETURN(NamedTarget named, FindNamedTarget(target));
    target = named.target;
  }
  spec.set_target(target);
  ASSIGN_OR_RETURN(std::string token, TokenFromFlag(flags.Get("token-file")));
  ASSIGN_OR_RETURN(std::unique_ptr<TuningClient> client,
                   TuningClient::Connect(flags.Get("server"), token, flags.Get("tls-ca")));
  if (model) {
    RETURN_IF_ERROR(AttachModel(flags, *model, client.get(), &spec, json));
  } else if (multi) {
    for (const ScheduledTask& t : tasks) {
      v1::WeightedTask* w = spec.add_tasks();
      w->set_task(t.task_text);
      w->set_weight(t.weight);
    }
  } else {
    spec.set_task(tasks[0].task_text);
  }
  if (spec.tasks_size() > 0 || model) spec.set_round_trials(static_cast<int>(round_trials));
  ASSIGN_OR_RETURN(const std::string job_id, client->Submit(spec));
  if (json) {
    std::printf("%s\n", nlohmann::json{{"job_id", job_id}}.dump().c_str());
  } else {
    std::printf("job %s submitted: %s, %lld trials\nfollow it:   tuneforge jobs watch %s --server %s\n",
                job_id.c_str(),
                model ? absl::StrCat(spec.model_name(), ", ", model->table.tasks.size(), " tasks").c_str()
                : spec.tasks_size() > 0 ? absl::StrCat(spec.tasks_size(), " tasks").c_str()
                                        : spec.task().c_str(),
                static_cast<long long>(trials), job_id.c_str(), flags.Get("server").c_str());
  }
  return 0;
}

}  // namespace

absl::StatusOr<int> TuneCommand(const std::vector<std::string>& args) {
  ASSIGN_OR_RETURN(Flags flags,
                   Flags::Parse(args,
                                {"task", "tasks", "model", "flat-rounds", "scheduler", "trials", "db", "server", "device-key", "seed",
                                 "target", "batch", "timeout-ms", "max-repeat", "max-spread-pct", "token-file", "tls-ca", "policy", "early-stop",
                                 "model-early-batch",
                                 "round-trials", "priority", "dim", "shape"},
                                {"json", "help", "verbose", "quiet", "no-heuristics", "vendor", "no-vendor",
                                 "flush-cache", "detach"},
                                {"dim", "shape"}));
  if (flags.Has("help")) {
    std::fputs(kTuneUsage, stdout);
    return 0;
  }
  if (!flags.positional().empty()) {
    return absl::InvalidArgumentError("unexpected argument '" + flags.positional()[0] + "'");
  }
  if (flags.Has("task") + flags.Has("tasks") + flags.Has("model") > 1)
    return absl::InvalidArgumentError("give one of --task, --tasks FILE or --model M.onnx");
  if (!flags.Has("tasks") && !flags.Has("model")) RETURN_IF_ERROR(flags.Require("task"));
  // Validate locally first, so a typo fails before any server or agent starts.
  std::vector<ScheduledTask> tasks;
  std::optional<LoadedModel> model;
  if (flags.Has("model")) {
    // An unsupported operator fails here, before any server, agent or measurement.
    ASSIGN_OR_RETURN(frontend::DimBindings dims, DimBindingsFromFlags(flags));
    ASSIGN_OR_RETURN(model, LoadOnnxModel(flags.Get("model"), dims));
  } else if (flags.Has("tasks")) {
    ASSIGN_OR_RETURN(tasks, ReadTasksFile(flags.Get("tasks")));
  } else {
    ASSIGN_OR_RETURN(TuningTask one, ParseTask(flags.Get("task")));
    tasks.push_back(ScheduledTask{one.CanonicalText(), 1});
  }
  const bool multi = flags.Has("tasks");
  ASSIGN_OR_RETURN(int64_t trials, flags.GetInt("trials", 200, 1, JobManager::kMaxTrials));
  ASSIGN_OR_RETURN(int64_t round_trials, flags.GetInt("round-trials", 32, 1, JobManager::kMaxTrials));
  ASSIGN_OR_RETURN(int64_t flat_rounds, flags.GetInt("flat-rounds", 3, 0, JobManager::kMaxFlatRounds));
  if (flags.Has("flat-rounds") && !model)
    return absl::InvalidArgumentError("--flat-rounds is for --model");
  const std::string scheduler_name = flags.Get("scheduler", "gradient");
  if (scheduler_name != "gradient" && scheduler_name != "round-robin")
    return absl::InvalidArgumentError("--scheduler must be gradient or round-robin, got '" + scheduler_name + "'");
  if (flags.Has("scheduler") && !model) return absl::InvalidArgumentError("--scheduler is for --model");
  // Everything of the jobs' spec but the task, trials, seed, device and target.
  ASSIGN_OR_RETURN(v1::JobSpec spec_flags, JobSpecFromFlags(flags));
  if (model) {  // a model job, attached or detached: early stop and the task scheduler
    spec_flags.set_flat_rounds(static_cast<int>(flat_rounds));
    spec_flags.set_scheduler(scheduler_name);
  }
  ASSIGN_OR_RETURN(int64_t seed, flags.GetInt("seed", 1, 0, INT64_MAX));
  bool json = flags.Has("json");
  bool verbose = flags.Has("verbose");
  std::string device_key = flags.Get("device-key", "local");
  if (device_key.empty()) return absl::InvalidArgumentError("--device-key must not be empty");
  SetLogLevel(verbose ? LogLevel::kDebug : LogLevel::kWarning);

  if (flags.Has("detach")) {
    return SubmitDetached(flags, spec_flags, model, tasks, multi, trials, round_trials, seed, device_key, json);
  }

  std::unique_ptr<EmbeddedFarm> farm;
  std::string address = flags.Get("server");
  std::string db_path = flags.Get("db", "tuneforge.db");
  // A named target (aarch64, riscv64, x86-64-v3) stands for its options; on the
  // embedded default, one of another architecture is reached through a device agent
  // (the cross-built runner under qemu-user) instead of the local one.
  std::string target_text = flags.Get("target");
  std::vector<std::string> agent_args;
  bool foreign_device = false;
  if (IsTargetName(target_text)) {
    ASSIGN_OR_RETURN(NamedTarget named, FindNamedTarget(target_text));
    target_text = named.target;
    foreign_device = !named.triple.empty();
    if (address.empty()) {
      ASSIGN_OR_RETURN(agent_args, DeviceAgentArgs(named));
    }
  }
  if (address.empty()) {
    ASSIGN_OR_RETURN(farm, EmbeddedFarm::Start(db_path, {device_key}, verbose, agent_args));
    address = farm->address();
    if (!json) {
      std::fprintf(stderr, "embedded default: server on %s, db %s, one local %s\n", address.c_str(),
                   db_path.c_str(), agent_args.empty() ? "agent" : "device agent (qemu-user: emulated timings)");
    }
  } else if (flags.Has("db")) {
    return absl::InvalidArgumentError("--db is the embedded server's file; with --server the "
                                      "server's own --db is used");
  }
  ASSIGN_OR_RETURN(std::string token, TokenFromFlag(flags.Get("token-file")));
  if (farm) token = farm->user_token();
  ASSIGN_OR_RETURN(std::unique_ptr<TuningClient> client, TuningClient::Connect(address, token, flags.Get("tls-ca")));
  const bool address_was_embedded = farm != nullptr;

  // Submits one job and follows it to its end.
  std::signal(SIGINT, OnInterrupt);
  // `on_status`: each status the watch delivers (quiet: instead of the progress lines).
  auto run_spec = [&](v1::JobSpec spec, bool quiet,
                      const std::function<void(const v1::JobStatus&)>& on_status = {}) -> absl::StatusOr<v1::JobStatus> {
    spec.set_device_key(device_key);
    spec.set_target(target_text);
    ASSIGN_OR_RETURN(const std::string job_id, client->Submit(spec));
    if (!json && !quiet)
      std::fprintf(stderr, "job %s: %s, %d trials, %s search\n", job_id.c_str(),
                   spec.tasks_size() > 0 ? absl::StrCat(spec.tasks_size(), " tasks in rounds").c_str()
                                         : spec.task().c_str(),
                   spec.trials(), spec.policy().c_str());

    std::atomic<bool> watching{true};
    std::thread canceller([&] {
      // Ctrl-C cancels the job on the server; the watch then ends with CANCELLED.
      while (watching) {
        // Kept until the server takes it (it may be restarting).
        if (g_interrupted.load() && client->Cancel(job_id).ok()) g_interrupted = false;
        std::this_thread::sleep_for(std::chrono::milliseconds(100));
      }
    });
    std::string printed;
    absl::StatusOr<v1::JobStatus> watched = client->Wait(job_id, [&](const v1::JobStatus& status) {
      if (on_status) on_status(status);
      if (!json && !quiet && status.last_event() != printed && !status.last_event().empty()) {
        printed = status.last_event();
        std::fprintf(stderr, "[%6.1fs] %s\n", status.elapsed_seconds(), printed.c_str());
      }
    });
    watching = false;
    canceller.join();
    if (!watched.ok()) return watched.status();
    const v1::JobStatus& last = *watched;
    if (last.state() == v1::CANCELLED) return absl::CancelledError("job " + job_id + " cancelled");
    if (last.state() != v1::SUCCEEDED) {
      return absl::InternalError("job " + job_id + " failed: " + last.message());
    }
    return last;
  };
  if (model) {
    // One model job: the server runs the task scheduler's rounds and, when its CPU is
    // the job's target (the embedded default's is), times the model.
    v1::JobSpec spec = spec_flags;
    RETURN_IF_ERROR(AttachModel(flags, *model, client.get(), &spec, json));
    spec.set_trials(static_cast<int>(trials));
    spec.set_round_trials(static_cast<int>(round_trials));
    spec.set_seed(static_cast<uint64_t>(seed));
    ModelJobPrinter printer(*model, flags.Get("model"), json);
    ASSIGN_OR_RETURN(v1::JobStatus last,
                     run_spec(spec, /*quiet=*/true, [&](const v1::JobStatus& s) { printer.OnStatus(s); }));
    farm.reset();  // stop the local agent and the embedded server
    printer.Finish(last);
    if (!json && address_was_embedded) {
      std::printf("db:          %s\nrun it:      tuneforge bench model %s --db %s\n", db_path.c_str(),
                  flags.Get("model").c_str(), db_path.c_str());
    }
    return 0;
  }

  if (multi) {
    // One job of weighted tasks: the server runs the task scheduler's rounds.
    v1::JobSpec spec = spec_flags;
    for (const ScheduledTask& t : tasks) {
      v1::WeightedTask* w = spec.add_tasks();
      w->set_task(t.task_text);
      w->set_weight(t.weight);
    }
    spec.set_trials(static_cast<int>(trials));
    spec.set_round_trials(static_cast<int>(round_trials));
    spec.set_seed(static_cast<uint64_t>(seed));
    ASSIGN_OR_RETURN(v1::JobStatus last, run_spec(spec, /*quiet=*/false));
    farm.reset();  // stop the local agent and the embedded server
    PrintTaskRounds(last, json, address_was_embedded ? db_path : "");
    return 0;
  }

  v1::JobSpec one = spec_flags;
  one.set_task(tasks[0].task_text);
  one.set_trials(static_cast<int>(trials));
  one.set_seed(static_cast<uint64_t>(seed));
  ASSIGN_OR_RETURN(v1::JobStatus last, run_spec(one, /*quiet=*/false));
  farm.reset();  // stop the local agent and the embedded server

  // The strongest vendor on the same task, timed here once the agent has stopped:
  // only for the embedded default, whose agent measured on this machine; not for
  // another architecture's device (the vendors run on this machine).
  const bool want_vendor = !foreign_device && (flags.Has("vendor") || (!json && !flags.Has("no-vendor")));
  if (want_vendor && !address_was_embedded && flags.Has("vendor"))
    std::fprintf(stderr, "note: --vendor times the vendor on this machine; with --server the agents are "
                         "elsewhere, so it is skipped\n");
  std::optional<VendorSpeed> vendor;
  if (want_vendor && address_was_embedded) vendor = VendorForJob(last, json);
  PrintJobResult(last, vendor, json, address_was_embedded ? db_path : "");
  return 0;
}

}  // namespace tuneforge::cli
