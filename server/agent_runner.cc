// AgentRunner: MeasureInputs -> MeasureRequests dispatched to agents, results back.
#include "server/agent_runner.h"

#include <chrono>
#include <condition_variable>
#include <mutex>
#include <optional>

#include "compiler/runtime/runtime.h"
#include "compiler/support/status.h"
#include "compiler/task/task.h"
#include "compiler/templates/template.h"


namespace tuneforge {

MeasureResult FromProto(const v1::MeasureResult& r) {
  MeasureResult m;
  m.costs.assign(r.costs().begin(), r.costs().end());
  switch (r.error()) {
    case v1::NONE: m.error = MeasureErrorKind::kNone; break;
    case v1::INVALID_CONFIG: m.error = MeasureErrorKind::kInvalidConfig; break;
    case v1::BUILD_ERROR: m.error = MeasureErrorKind::kBuildError; break;
    case v1::BUILD_TIMEOUT: m.error = MeasureErrorKind::kBuildTimeout; break;
    case v1::WRONG_ANSWER: m.error = MeasureErrorKind::kWrongAnswer; break;
    case v1::RUN_TIMEOUT: m.error = MeasureErrorKind::kRunTimeout; break;
    case v1::AGENT_LOST: m.error = MeasureErrorKind::kAgentLost; break;
    default: m.error = MeasureErrorKind::kRuntimeError; break;
  }
  // A "success" without costs cannot be ranked: treat it as an agent error.
  if (m.error == MeasureErrorKind::kNone && m.costs.empty()) {
    m.error = MeasureErrorKind::kRuntimeError;
    m.error_message = "agent reported success without costs";
  } else {
    m.error_message = r.error_message();
  }
  m.start_unix_us = r.start_unix_us();
  m.end_unix_us = r.end_unix_us();
  m.agent_id = r.agent_id();
  m.environment_json = r.environment_json();
  return m;
}

AgentRunner::AgentRunner(AgentRegistry* registry, std::string device_key,
                         std::string request_prefix, StatusCallback on_wait,
                         const std::atomic<bool>* cancel, int weight, double peak_gflops,
                         JobCpuShare* cpu_share)
    : registry_(registry),
      device_key_(std::move(device_key)),
      request_prefix_(std::move(request_prefix)),
      on_wait_(std::move(on_wait)),
      cancel_(cancel),
      weight_(weight),
      peak_gflops_(peak_gflops),
      cpu_share_(cpu_share) {}

AgentRunner::~AgentRunner() { registry_->ForgetJob(request_prefix_); }

int AgentRunner::Parallelism() const { return std::max(1, registry_->ConnectedAgents(device_key_)); }

v1::MeasureRequest MeasureRequestFor(const MeasureInput& in, const std::string& id) {
  v1::MeasureRequest r;
  r.set_request_id(id);
  r.set_task(in.task_text);
  r.set_config_json(in.config_json);
  r.set_artifact(in.artifact->shared_object);
  r.set_artifact_hash(in.artifact->hash);
  r.set_entry_symbol(in.artifact->entry_symbol);
  r.set_prepack_symbol(in.artifact->prepack_symbol);
  r.set_unpack_symbol(in.artifact->unpack_symbol);
  const ExpectedOutput& e = *in.expected;
  for (size_t i = 0; i < e.buffer_sizes.size(); ++i) {
    v1::BufferSpec* b = r.add_buffers();
    b->set_name("arg" + std::to_string(i));
    const bool internal = i < e.internal.size() && e.internal[i];
    // An internal buffer is as large as this config's kernel needs.
    const std::vector<int64_t>& own = in.artifact->buffer_elements;
    b->set_num_elements(internal && i < own.size() ? own[i] : e.buffer_sizes[i]);
    b->set_role(static_cast<int>(i) == e.output_index ? v1::OUTPUT
                : internal                            ? v1::INTERNAL
                                                      : v1::INPUT);
    if (i < e.fills.size()) {
      const runtime::FillSpec& fill = e.fills[i];
      b->set_element_type(static_cast<v1::ElementType>(fill.type));
      const runtime::FillSpec plain = runtime::DefaultFill(fill.type);
      if (b->role() == v1::INPUT && (fill.low != plain.low || fill.high != plain.high)) {
        b->set_fill_low(fill.low);
        b->set_fill_high(fill.high);
      }
    }
  }
  r.set_seed(e.seed);
  r.set_expected_output(e.values);
  if (!e.alternate_values.empty()) {
    r.set_alternate_seed(e.alternate_seed);
    r.set_alternate_expected_output(e.alternate_values);
  }
  r.set_atol(e.atol);
  r.set_rtol(e.rtol);
  v1::MeasureOptions* o = r.mutable_options();
  o->set_warmup(in.options.warmup);
  o->set_number(in.options.number);
  o->set_repeat(in.options.repeat);
  o->set_min_repeat_ms(in.options.min_repeat_ms);
  o->set_flush_cache(in.options.flush_cache);
  o->set_timeout_ms(in.options.timeout_ms);
  o->set_max_repeat(in.options.max_repeat);
  o->set_max_spread(in.options.max_spread);
  return r;
}

absl::StatusOr<double> AgentRunner::MinPlausibleSeconds(const MeasureInput& in) {
  if (peak_gflops_ <= 0) return 0.0;
  if (in.task_text != bound_task_) {  // a job measures one task: parsed once
    bound_parsed_ = ParseTask(in.task_text);
    bound_task_ = in.task_text;
  }
  if (!bound_parsed_.ok()) return bound_parsed_.status();
  ASSIGN_OR_RETURN(const Template* tmpl, FindTemplate(*bound_parsed_));
  ASSIGN_OR_RETURN(Config config, Config::FromJson(in.config_json));
  return PlausibleFloorSeconds(*bound_parsed_, (*tmpl).Flops(*bound_parsed_, config), peak_gflops_);
}

double PlausibleFloorSeconds(const TuningTask& task, double flops, double peak_gflops) {
  const double peak = task.IsQuantized() ? peak_gflops * Target::kInt8PlausibleFactor : peak_gflops;
  return flops / (peak * 1e9);
}

std::vector<MeasureResult> AgentRunner::Measure(const std::vector<MeasureInput>& inputs) {
  struct Shared {
    std::mutex mu;
    std::condition_variable cv;
    std::vector<std::optional<v1::MeasureResult>> results;
    size_t done = 0;
  };
  auto shared = std::make_shared<Shared>();
  shared->results.resize(inputs.size());

  std::vector<std::string> ids;
  for (size_t i = 0; i < inputs.size(); ++i) {
    std::string id = request_prefix_ + "/r" + std::to_string(next_request_++);
    ids.push_back(id);
    v1::MeasureRequest request = MeasureRequestFor(inputs[i], id);
    auto done = [shared, i](const v1::MeasureResult& r) {
      std::lock_guard<std::mutex> lock(shared->mu);
      if (!shared->results[i]) {
        shared->results[i] = r;
        // The job waits for the whole batch: wake it once, not once per result.
        if (++shared->done == shared->results.size()) shared->cv.notify_all();
      }
    };
    absl::StatusOr<double> min_seconds = MinPlausibleSeconds(inputs[i]);
    if (!min_seconds.ok()) {
      v1::MeasureResult refused;
      refused.set_request_id(id);
      refused.set_error(v1::INVALID_CONFIG);
      refused.set_error_message("not measured: the server cannot bound its plausible speed: " +
                                std::string(min_seconds.status().message()));
      done(refused);
      continue;
    }
    bool waited = false;
    while (!registry_->Dispatch(device_key_, request, done, request_prefix_, weight_,
                                *min_seconds)) {
      if (cancel_ && cancel_->load()) {
        v1::MeasureResult lost;
        lost.set_request_id(id);
        lost.set_error(v1::AGENT_LOST);
        lost.set_error_message("job cancelled before an agent was available");
        done(lost);
        break;
      }
      if (!waited && on_wait_) on_wait_("waiting for an agent with device key '" + device_key_ + "'");
      waited = true;
      JobCpuShare::Pause pause(cpu_share_);
      registry_->WaitForAgent(device_key_, 1000);
    }
  }

  // Every accepted request ends with one result (measured, re-dispatched until
  // measured, or agent_lost), so this wait ends. While the key has no usable agent the
  // queued requests wait for one, and the job says so.
  {
    JobCpuShare::Pause pause(cpu_share_);  // taken again after `lock` is released
    std::unique_lock<std::mutex> lock(shared->mu);
    bool waiting = false;
    bool abandoned = false;
    while (shared->done < inputs.size()) {
      if (cancel_ && cancel_->load() && !abandoned) {
        // Cancelled: the requests still queued (no agent may ever come) or in flight
        // end now as agent_lost; a result that arrives later is dropped.
        abandoned = true;
        std::vector<std::string> open;
        for (size_t i = 0; i < ids.size(); ++i)
          if (!shared->results[i]) open.push_back(ids[i]);
        lock.unlock();
        for (const std::string& id : open) registry_->Abandon(id, "job cancelled");
        lock.lock();
        continue;
      }
      if (shared->cv.wait_for(lock, std::chrono::milliseconds(200)) == std::cv_status::timeout) {
        bool none = registry_->ConnectedAgents(device_key_) == 0;
        if (none && !waiting && on_wait_) {
          lock.unlock();
          on_wait_("waiting for an agent with device key '" + device_key_ + "'");
          lock.lock();
        }
        waiting = none;
      }
    }
  }
  std::vector<MeasureResult> out;
  for (auto& r : shared->results) out.push_back(FromProto(*r));
  return out;
}

}  // namespace tuneforge
