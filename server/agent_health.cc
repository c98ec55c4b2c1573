// AgentHealth: golden-kernel checks and quarantine of agents.
#include "server/agent_health.h"

#include <algorithm>
#include <chrono>

#include "compiler/codegen/build.h"
#include "compiler/support/log.h"
#include "compiler/support/stats.h"
#include "compiler/support/status.h"
#include "compiler/task/task.h"
#include "compiler/templates/template.h"
#include "server/agent_runner.h"
#include "tuner/tuning_loop.h"

namespace tuneforge {
namespace {

// "x86_64-pc-linux-gnu" -> "x86_64".
std::string Arch(const std::string& triple) { return triple.substr(0, triple.find('-')); }

}  // namespace

struct AgentHealth::Golden {
  v1::MeasureRequest request;  // without request id
  // The same peak bound as every job's results: a golden result faster than the
  // kernel's target allows is a lie that would make honest peers look slow.
  double min_plausible_seconds = 0;
};

absl::Status HealthOptions::Validate() const {
  if (interval_s < 0 || interval_s > 7 * 24 * 3600) {
    return absl::InvalidArgumentError("golden-kernel interval must be 0..604800 s, got " +
                                      std::to_string(interval_s));
  }
  if (!(slow_factor >= 1.5 && slow_factor <= 1000)) {
    return absl::InvalidArgumentError("golden-kernel slow factor must be 1.5..1000, got " +
                                      std::to_string(slow_factor));
  }
  return absl::OkStatus();
}

AgentHealth::AgentHealth(AgentRegistry* registry, const Builder* builder, HealthOptions options)
    : registry_(registry), builder_(builder), options_(options) {
  absl::Status valid = options_.Validate();
  TF_CHECK(valid.ok(), valid.ToString());
  if (options_.interval_s > 0) {
    periodic_ = std::thread([this] {
      std::unique_lock<std::mutex> lock(mu_);
      while (!cv_.wait_for(lock, std::chrono::seconds(options_.interval_s), [this] { return stop_; })) {
        lock.unlock();
        for (const AgentInfo& a : registry_->Agents()) {
          if (a.State() == "idle" || a.State() == "busy") CheckAgent(a.id);
        }
        lock.lock();
      }
    });
  }
}

AgentHealth::~AgentHealth() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stop_ = true;
  }
  cv_.notify_all();
  if (periodic_.joinable()) periodic_.join();
}

absl::StatusOr<std::shared_ptr<const AgentHealth::Golden>> AgentHealth::GoldenFor(
    const std::string& arch) {
  std::lock_guard<std::mutex> build_lock(build_mu_);
  {
    std::lock_guard<std::mutex> lock(mu_);
    auto it = golden_.find(arch);
    if (it != golden_.end()) return it->second;
  }
  Target target = DetectHostTarget("golden");
  if (Arch(target.triple) != arch) {
    return absl::UnimplementedError("the server builds for " + Arch(target.triple) + ", not " +
                                    arch);
  }
  // The architecture's baseline CPU: any agent of it can run the code.
  target.cpu = arch == "x86_64" ? "x86-64" : "generic";
  target.features = "";
  target.num_threads = 1;
  ASSIGN_OR_RETURN(TuningTask task, ParseTask(kGoldenTask));
  ASSIGN_OR_RETURN(const Template* tmpl, FindTemplate(task));
  std::vector<BuildResult> built =
      builder_->Build(task, *tmpl, target, {Candidate{tmpl->Naive(task, target), true}});
  if (built[0].error != MeasureErrorKind::kNone) {
    return absl::InternalError("golden kernel does not build: " + built[0].error_message);
  }
  ASSIGN_OR_RETURN(ir::LoweredFunc func, tmpl->Instantiate(task, target, built[0].candidate.config));
  ASSIGN_OR_RETURN(std::shared_ptr<const ExpectedOutput> expected,
                   MakeExpectedOutputFor(task, func, 20240601));
  MeasureOptions measure;
  measure.warmup = 1;
  measure.repeat = 3;
  measure.min_repeat_ms = 10;
  measure.timeout_ms = 10000;
  auto golden = std::make_shared<Golden>();
  golden->min_plausible_seconds = task.Flops() / (target.PlausiblePeakGflops() * 1e9);
  golden->request = MeasureRequestFor(
      MeasureInput{task.CanonicalText(), built[0].candidate.config.ToJson(), built[0].artifact,
                   expected, measure},
      "");
  std::lock_guard<std::mutex> lock(mu_);
  golden_[arch] = golden;
  TF_LOG(Info) << "golden kernel for " << arch << " built (" << kGoldenTask << ")";
  return std::shared_ptr<const Golden>(golden);
}

void AgentHealth::CheckAgent(const std::string& agent_id) {
  std::optional<AgentInfo> info = registry_->Find(agent_id);
  if (!info || !info->connected) return;
  absl::StatusOr<std::shared_ptr<const Golden>> golden = GoldenFor(Arch(info->capabilities.triple()));
  if (!golden.ok()) {
    TF_LOG(Warning) << "agent " << agent_id << " is not health-checked: " << golden.status();
    registry_->PassCheck(agent_id);
    return;
  }
  v1::MeasureRequest request = (*golden)->request;
  const double min_seconds = (*golden)->min_plausible_seconds;
  {
    std::lock_guard<std::mutex> lock(mu_);
    request.set_request_id("golden/" + agent_id + "/" + std::to_string(next_request_++));
  }
  registry_->DispatchTo(
      agent_id, std::move(request),
      [this, agent_id](const v1::MeasureResult& r) { OnResult(agent_id, r); }, min_seconds);
}

void AgentHealth::OnResult(const std::string& agent_id, const v1::MeasureResult& result) {
  if (result.error() == v1::AGENT_LOST) return;  // it went away; nothing to judge
  if (result.error() != v1::NONE || result.costs().empty()) {
    registry_->Quarantine(agent_id, "golden kernel: " + v1::MeasureErrorKind_Name(result.error()) +
                                        ": " + result.error_message());
    return;
  }
  // The best sample: noise on a shared machine only ever makes a run slower.
  double seconds = *std::min_element(result.costs().begin(), result.costs().end());
  registry_->SetGoldenSeconds(agent_id, seconds);
  {
    std::lock_guard<std::mutex> lock(mu_);
    verdicts_[agent_id].fresh = true;
  }
  std::optional<AgentInfo> info = registry_->Find(agent_id);
  if (!info) return;
  CompareWithPeers(info->device_key);
}

void AgentHealth::CompareWithPeers(const std::string& device_key) {
  std::vector<AgentInfo> timed;
  for (const AgentInfo& a : registry_->Agents()) {
    if (a.device_key == device_key && a.connected && !a.quarantined && a.golden_seconds > 0)
      timed.push_back(a);
  }
  std::vector<std::string> pass, rerun;
  std::vector<std::pair<std::string, std::string>> quarantine;
  {
    std::lock_guard<std::mutex> lock(mu_);
    for (const AgentInfo& a : timed) {
      std::vector<double> peers;
      for (const AgentInfo& p : timed)
        if (p.id != a.id) peers.push_back(p.golden_seconds);
      double median = MedianOr(peers, 0);
      Verdict& v = verdicts_[a.id];
      const bool fresh = v.fresh;
      v.fresh = false;
      if (peers.empty() || a.golden_seconds <= options_.slow_factor * median) {
        v = Verdict();
        if (a.checking) pass.push_back(a.id);
        continue;
      }
      // Slow. A strike needs a result of its own: re-run the golden kernel once; if
      // that fresh result is slow again, quarantine.
      if (fresh && v.strikes >= 1) {
        verdicts_.erase(a.id);
        char why[200];
        std::snprintf(why, sizeof(why),
                      "golden kernel %.3f ms, more than %.1fx the median %.3f ms of %zu "
                      "peer(s) of device key '%s' (twice)",
                      a.golden_seconds * 1e3, options_.slow_factor, median * 1e3, peers.size(),
                      device_key.c_str());
        quarantine.emplace_back(a.id, why);
      } else if (!v.rerun_pending) {
        v.strikes = 1;
        v.rerun_pending = true;
        rerun.push_back(a.id);
      }
    }
  }
  for (const auto& [id, why] : quarantine) registry_->Quarantine(id, why);
  for (const std::string& id : rerun) {
    TF_LOG(Warning) << "agent " << id << ": golden kernel slower than its peers; re-running it";
    CheckAgent(id);
  }
  for (const std::string& id : pass) registry_->PassCheck(id);
}

}  // namespace tuneforge
