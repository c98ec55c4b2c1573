// A whole model timed on this machine while it is tuned (see model_timing.h).
#include "tuner/model_timing.h"

#include <chrono>
#include <cmath>
#include <cstdio>
#include <map>
#include <optional>
#include <thread>

#include "compiler/codegen/build.h"
#include "compiler/support/stats.h"
#include "compiler/support/status.h"

namespace tuneforge {
namespace {

// A step of the executor that runs a task's kernel: "tuned <task>" / "default <task>",
// with "+<op>" when it also runs a fused operator (e.g. ResNet's stem "+MaxPool").
bool IsTaskStep(const std::string& source) {
  return source.rfind("tuned ", 0) == 0 || source.rfind("default ", 0) == 0;
}

std::string StepTask(const std::string& source) {
  std::string text = source.substr(source.find(' ') + 1);
  return text.substr(0, text.find('+'));
}

// At least 5 runs and about `seconds` (a shared host's slow spells last about a second).
bool Enough(size_t n, std::chrono::steady_clock::time_point start, std::chrono::milliseconds span) {
  return n >= 5 && (n >= 200 || std::chrono::steady_clock::now() - start >= span);
}

}  // namespace

absl::StatusOr<LoadedModel> LoadOnnxModel(const std::string& path, const frontend::DimBindings& dims) {
  LoadedModel m;
  ASSIGN_OR_RETURN(m.model, frontend::ReadOnnxModel(path));
  RETURN_IF_ERROR(frontend::BindDimensions(&m.model, dims));
  RETURN_IF_ERROR(frontend::CheckSupported(m.model));
  ASSIGN_OR_RETURN(m.graph, graph::ImportOnnx(m.model));
  ASSIGN_OR_RETURN(m.table, graph::ExtractTasks(m.graph));
  return m;
}

absl::StatusOr<std::unique_ptr<Database>> OpenDbReadOnly(const std::string& path) {
  DatabaseOptions options;
  options.path = path;
  options.create_if_missing = false;
  options.read_only = true;
  return Database::Open(options);
}

graph::ScheduleFn BestRecordSchedule(Database* db, const Target* target) {
  return [db, target](const TuningTask& task, const Template& tmpl) -> absl::StatusOr<std::optional<Config>> {
    absl::StatusOr<TuningRecord> best = db->Best(task.WorkloadKey(), target->Key());
    if (absl::IsNotFound(best.status())) return std::optional<Config>();
    if (!best.ok()) return best.status();
    ConfigSpace space = tmpl.Space(task, *target);
    absl::StatusOr<Config> config = Config::FromJson(best->config_json);
    if (best->template_name != tmpl.name() || best->template_version > tmpl.version() || !config.ok() ||
        !space.Check(space.WithDefaults(*config)).ok()) {
      std::fprintf(stderr,
                   "warning: the best record of %s (template %s v%d) does not fit %s v%d; "
                   "using the default schedule\n",
                   task.CanonicalText().c_str(), best->template_name.c_str(), best->template_version,
                   tmpl.name().c_str(), tmpl.version());
      return std::optional<Config>();
    }
    return std::optional<Config>(space.WithDefaults(*config));
  };
}

absl::StatusOr<LeftoverTime> MeasureLeftovers(const graph::Graph& graph, int threads) {
  Target target = DetectHostTarget("local");
  target.num_threads = threads;
  ASSIGN_OR_RETURN(std::unique_ptr<graph::Executor> exec, graph::Executor::Create(graph, target));
  graph::RunBuffers io = graph::SeededRunBuffers(*exec, 1);
  for (int i = 0; i < 2; ++i) RETURN_IF_ERROR(exec->Run(io.input_ptrs, io.output_ptrs));  // warm-up
  const std::vector<std::string> sources = exec->steps();
  LeftoverTime out;
  out.threads = threads;
  // Median of per-run sums, at least 5 runs and about half a second.
  std::vector<double> leftover_ms, total_ms;
  for (auto start = std::chrono::steady_clock::now();
       !Enough(leftover_ms.size(), start, std::chrono::milliseconds(500));) {
    std::vector<double> step_ms(sources.size(), 0.0);
    RETURN_IF_ERROR(exec->RunProfiled(io.input_ptrs, io.output_ptrs, &step_ms));
    double leftover = 0, total = 0;
    for (size_t i = 0; i < step_ms.size(); ++i) {
      total += step_ms[i];
      if (!IsTaskStep(sources[i])) leftover += step_ms[i];
    }
    leftover_ms.push_back(leftover);
    total_ms.push_back(total);
  }
  out.leftover_seconds = MedianOr(leftover_ms, 0) * 1e-3;
  out.untuned_seconds = MedianOr(total_ms, 0) * 1e-3;
  return out;
}

absl::StatusOr<InRunTime> MeasureInRun(const graph::Graph& graph, const std::vector<std::string>& tasks,
                                       Database* db, const Target& target) {
  if (!RunsHereAsOnDevice(target)) {
    return absl::FailedPreconditionError("the model's schedules are for " + target.ToString() +
                                         ", which is not this machine's CPU");
  }
  graph::ExecutorOptions eo;
  eo.schedule = BestRecordSchedule(db, &target);
  ASSIGN_OR_RETURN(std::unique_ptr<graph::Executor> exec, graph::Executor::Create(graph, target, eo));
  graph::RunBuffers io = graph::SeededRunBuffers(*exec, 1);
  for (int i = 0; i < 2; ++i) RETURN_IF_ERROR(exec->Run(io.input_ptrs, io.output_ptrs));  // warm-up

  InRunTime out;
  std::map<std::string, int> task_index;
  for (size_t i = 0; i < tasks.size(); ++i) task_index[tasks[i]] = static_cast<int>(i);
  std::vector<int> step_task;  // per step: its task's index, -1 for a leftover
  for (const std::string& source : exec->steps()) {
    int t = -1;
    if (IsTaskStep(source)) {
      auto it = task_index.find(StepTask(source));
      if (it != task_index.end()) t = it->second;
      else ++out.unmatched_task_steps;
    }
    step_task.push_back(t);
  }

  // Whole runs as `bench model` times them, then profiled runs for the split; each
  // at least 5 runs and about a second.
  out.compile_seconds = exec->compile_seconds();
  std::vector<double> whole_ms;
  for (auto start = std::chrono::steady_clock::now(); !Enough(whole_ms.size(), start, std::chrono::seconds(1));) {
    const auto t0 = std::chrono::steady_clock::now();
    RETURN_IF_ERROR(exec->Run(io.input_ptrs, io.output_ptrs));
    whole_ms.push_back(std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count());
  }
  std::vector<std::vector<double>> task_ms(tasks.size());
  std::vector<double> leftover_ms;
  for (auto start = std::chrono::steady_clock::now(); !Enough(leftover_ms.size(), start, std::chrono::seconds(1));) {
    std::vector<double> step_ms(step_task.size(), 0.0);
    RETURN_IF_ERROR(exec->RunProfiled(io.input_ptrs, io.output_ptrs, &step_ms));
    std::vector<double> per_task(tasks.size(), 0.0);
    double leftover = 0;
    for (size_t s = 0; s < step_ms.size(); ++s) (step_task[s] >= 0 ? per_task[step_task[s]] : leftover) += step_ms[s];
    for (size_t t = 0; t < tasks.size(); ++t) task_ms[t].push_back(per_task[t]);
    leftover_ms.push_back(leftover);
  }
  out.runs = static_cast<int>(whole_ms.size());
  out.model_seconds = MedianOr(whole_ms, 0) * 1e-3;
  out.leftover_seconds = MedianOr(leftover_ms, 0) * 1e-3;
  for (size_t t = 0; t < tasks.size(); ++t) out.task_seconds.push_back(MedianOr(task_ms[t], 0) * 1e-3);
  // The profiled runs give the split, the whole runs the total: timing every step
  // costs time of its own (BERT-base's encoder on an Intel Xeon: the profiled split
  // summed to 17% more than the whole run), so the split is scaled to the whole run's
  // median.
  out.profiled_seconds = out.leftover_seconds;
  for (double t : out.task_seconds) out.profiled_seconds += t;
  if (out.profiled_seconds > 0 && out.model_seconds > 0) {
    const double scale = out.model_seconds / out.profiled_seconds;
    out.leftover_seconds *= scale;
    for (double& t : out.task_seconds) t *= scale;
  }
  return out;
}

void CalibrateInRun(const InRunTime& run, TaskScheduler* scheduler) {
  for (size_t i = 0; i < run.task_seconds.size() && i < scheduler->best().size(); ++i) {
    const double alone = scheduler->weight(static_cast<int>(i)) * scheduler->best()[i];
    if (run.task_seconds[i] > 0 && std::isfinite(alone) && alone > 0)
      scheduler->SetInRunFactor(static_cast<int>(i), run.task_seconds[i] / alone);
  }
}

bool RunsHereAsOnDevice(const Target& target) {
  const Target host = DetectHostTarget(target.device_key);
  return target.triple == host.triple && target.cpu == host.cpu && target.features == host.features &&
         target.num_threads >= 1 && target.num_threads <= host.num_threads;
}

}  // namespace tuneforge
