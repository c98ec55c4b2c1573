// Observability: the server's /metrics and /healthz listener.
#include "server/observability.h"

#include <algorithm>
#include <map>

#include "absl/strings/ascii.h"
#include "compiler/support/log.h"

namespace tuneforge {
namespace {

// Lease-to-result times: 1 ms .. ~2 min; build times: 1 ms .. ~65 s.
const std::vector<double> kLeaseBuckets = {0.001, 0.002, 0.005, 0.01, 0.02, 0.05, 0.1, 0.2, 0.5,
                                           1,     2,     5,     10,   30,   60,   120};
const std::vector<double> kBuildBuckets = metrics::ExponentialBuckets(0.001, 2, 17);

// Every state an agent can report, so each series exists (at 0) from the start.
const char* const kAgentStates[] = {"checking", "idle",        "busy",
                                    "draining", "quarantined", "lost"};
const char* const kJobStates[] = {"QUEUED", "RUNNING", "SUCCEEDED", "FAILED", "CANCELLED"};

v1::MeasureErrorKind ToProtoKind(MeasureErrorKind k) {
  switch (k) {
    case MeasureErrorKind::kNone: return v1::NONE;
    case MeasureErrorKind::kInvalidConfig: return v1::INVALID_CONFIG;
    case MeasureErrorKind::kBuildError: return v1::BUILD_ERROR;
    case MeasureErrorKind::kBuildTimeout: return v1::BUILD_TIMEOUT;
    case MeasureErrorKind::kRuntimeError: return v1::RUNTIME_ERROR;
    case MeasureErrorKind::kWrongAnswer: return v1::WRONG_ANSWER;
    case MeasureErrorKind::kRunTimeout: return v1::RUN_TIMEOUT;
    case MeasureErrorKind::kAgentLost: return v1::AGENT_LOST;
  }
  return v1::RUNTIME_ERROR;
}

}  // namespace

Observability::Observability(DispatchObserver* forward) : forward_(forward) {
  leases_ = metrics_.GetCounter("tuneforge_leases_total",
                                "MeasureRequests leased to an agent (re-dispatches included)");
  redispatches_ = metrics_.GetCounter(
      "tuneforge_redispatches_total",
      "MeasureRequests leased again to another agent after their agent was lost");
  measurements_ = metrics_.GetCounter(
      "tuneforge_measurements_total",
      "MeasureResults accepted from agents or given up as agent_lost; rate() is measurements/s");
  lease_seconds_ = metrics_.GetHistogram(
      "tuneforge_lease_seconds", "Time from leasing a MeasureRequest to its result, seconds",
      kLeaseBuckets);
  build_seconds_ = metrics_.GetHistogram("tuneforge_build_seconds",
                                         "Time to build one candidate into an artifact, seconds",
                                         kBuildBuckets);
  for (int k = v1::INVALID_CONFIG; k <= v1::AGENT_LOST; ++k) {
    std::string name = absl::AsciiStrToLower(v1::MeasureErrorKind_Name(k));
    errors_[k] = metrics_.GetCounter(
        "tuneforge_errors_total",
        "Failed candidates by error kind (build errors from the builder, the rest from agents)",
        {"kind"}, {name});
  }
}

Observability::~Observability() { Stop(); }

void Observability::Attach(const AgentRegistry* registry, const JobManager* jobs, Database* db) {
  db_ = db;
  metrics_.AddCollector("tuneforge_agents", "Agents by device key and state", "gauge",
                        {"device_key", "state"}, [registry] {
                          std::map<std::pair<std::string, std::string>, int> n;
                          for (const AgentInfo& a : registry->Agents()) {
                            for (const char* s : kAgentStates) n[{a.device_key, s}] += 0;
                            ++n[{a.device_key, a.State()}];
                          }
                          std::vector<metrics::Sample> out;
                          for (const auto& [k, v] : n) out.push_back({{k.first, k.second}, double(v)});
                          return out;
                        });
  metrics_.AddCollector(
      "tuneforge_queue_depth",
      "MeasureRequests waiting in the fair queue for a free agent worker", "gauge", {},
      [registry] { return std::vector<metrics::Sample>{{{}, double(registry->Stats().queued)}}; });
  metrics_.AddCollector(
      "tuneforge_leases_outstanding", "MeasureRequests sent to agents and awaiting a result",
      "gauge", {},
      [registry] { return std::vector<metrics::Sample>{{{}, double(registry->Stats().leased)}}; });
  metrics_.AddCollector("tuneforge_jobs", "Tuning jobs this server ran, by state", "gauge",
                        {"state"}, [jobs] {
                          std::map<std::string, int> n;
                          for (const char* s : kJobStates) n[s] = 0;
                          for (const v1::JobStatus& j : jobs->List()) ++n[v1::JobState_Name(j.state())];
                          std::vector<metrics::Sample> out;
                          for (const auto& [k, v] : n) out.push_back({{k}, double(v)});
                          return out;
                        });
}

absl::Status Observability::Listen(const std::string& listen, Pages pages) {
  absl::StatusOr<std::unique_ptr<http::Server>> server = http::Server::Start(
      http::ServerOptions{listen}, [this, pages = std::move(pages)](const http::Request& request) {
        if (pages) {
          std::optional<http::Response> page = pages(request);
          if (page) return std::move(*page);
        }
        const std::string& path = request.path;
        if (request.method == "POST") {
          return http::Response{405, "text/plain; charset=utf-8", "only GET and HEAD here\n"};
        }
        if (path == "/metrics") {
          return http::Response{200, metrics::Registry::kContentType, metrics_.Render()};
        }
        if (path == "/healthz") return Health();
        return http::Response{404, "text/plain; charset=utf-8",
                              "not found: try /, /metrics or /healthz\n"};
      });
  if (!server.ok()) {
    return absl::Status(server.status().code(),
                        "--metrics-listen: " + std::string(server.status().message()));
  }
  http_ = std::move(*server);
  return absl::OkStatus();
}

void Observability::Stop() {
  serving_ = false;
  if (http_) http_->Shutdown();
}

http::Response Observability::Health() const {
  const char* kText = "text/plain; charset=utf-8";
  if (!serving_) return {503, kText, "not serving: starting or shutting down\n"};
  if (!db_) return {503, kText, "no database\n"};
  // A point read through the db's connection: NotFound means it answers.
  absl::StatusOr<JobRow> probe = db_->GetJob("healthz-probe");
  if (!probe.ok() && !absl::IsNotFound(probe.status())) {
    return {503, kText, "database: " + std::string(probe.status().message()) + "\n"};
  }
  return {200, kText, "ok\n"};
}

void Observability::OnLease(bool redispatch) {
  leases_->Increment();
  if (redispatch) redispatches_->Increment();
  if (forward_) forward_->OnLease(redispatch);
}

void Observability::OnResult(v1::MeasureErrorKind error, double lease_seconds) {
  measurements_->Increment();
  lease_seconds_->Observe(lease_seconds);
  // Unknown kinds count as runtime errors, as FromProto reads them.
  if (error != v1::NONE) {
    errors_[error >= v1::INVALID_CONFIG && error <= v1::AGENT_LOST ? error : v1::RUNTIME_ERROR]
        ->Increment();
  }
  if (forward_) forward_->OnResult(error, lease_seconds);
}

void Observability::OnBuild(const BuildResult& r) {
  if (r.error == MeasureErrorKind::kNone) {
    build_seconds_->Observe(r.build_seconds);
  } else {
    errors_[ToProtoKind(r.error)]->Increment();
  }
}

std::vector<BuildResult> MeteredBuilder::Build(const TuningTask& task, const Template& tmpl,
                                               const Target& target,
                                               const std::vector<Candidate>& candidates) const {
  std::vector<BuildResult> results = inner_->Build(task, tmpl, target, candidates);
  for (const BuildResult& r : results) observability_->OnBuild(r);
  return results;
}

}  // namespace tuneforge
