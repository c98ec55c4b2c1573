// Observability: the server's metrics (server/metrics) and its HTTP endpoint
// (server/http): `/metrics` in the Prometheus text format and `/healthz`.
//
// Most figures are read at scrape time from the components' own snapshots (agents
// and their states, jobs, the dispatch backlog), so their code paths stay untouched;
// the rest are pushed by two hooks: the AgentRegistry's DispatchObserver (leases,
// re-dispatches, results, lease-to-result time) and MeteredBuilder (build times,
// build errors).
//
// Thread-safe.
#pragma once

#include <atomic>
#include <functional>
#include <optional>
#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "db/database.h"
#include "server/agent_registry.h"
#include "server/dispatch_observer.h"
#include "server/http/http_server.h"
#include "server/job_manager.h"
#include "server/metrics/metrics.h"
#include "tuner/builder.h"

namespace tuneforge {

class Observability : public DispatchObserver {
 public:
  // `forward` (optional, not owned) also receives every dispatch event.
  explicit Observability(DispatchObserver* forward = nullptr);
  ~Observability() override;

  // Registers the pulled metrics over `registry`, `jobs` and `db` (not owned; they
  // must outlive this object or Stop() must be called first).
  void Attach(const AgentRegistry* registry, const JobManager* jobs, Database* db);
  // Answers a path when it is its own (the dashboard), nullopt for the rest.
  using Pages = std::function<std::optional<http::Response>(const http::Request&)>;
  // Serves /metrics and /healthz on `listen` (HOST:PORT), and `pages` (optional).
  absl::Status Listen(const std::string& listen, Pages pages = nullptr);
  int port() const { return http_ ? http_->port() : 0; }
  // /healthz says 200 only while serving (set once gRPC is up, cleared at shutdown).
  void SetServing(bool serving) { serving_ = serving; }
  void Stop();

  metrics::Registry& registry() { return metrics_; }
  // The /healthz answer: 200 "ok", or 503 with the reason.
  http::Response Health() const;

  // DispatchObserver.
  void OnLease(bool redispatch) override;
  void OnResult(v1::MeasureErrorKind error, double lease_seconds) override;

  // Counts a build outcome (MeteredBuilder).
  void OnBuild(const BuildResult& result);

 private:
  DispatchObserver* forward_;
  metrics::Registry metrics_;
  std::atomic<bool> serving_{false};
  Database* db_ = nullptr;
  metrics::Counter* leases_ = nullptr;
  metrics::Counter* redispatches_ = nullptr;
  metrics::Counter* measurements_ = nullptr;
  metrics::Histogram* lease_seconds_ = nullptr;
  metrics::Histogram* build_seconds_ = nullptr;
  // Error counters by kind: measure errors (from agents) and build errors.
  metrics::Counter* errors_[v1::MeasureErrorKind_ARRAYSIZE] = {};
  std::unique_ptr<http::Server> http_;
};

// A Builder that counts what another Builder does (build time, errors).
class MeteredBuilder : public Builder {
 public:
  MeteredBuilder(const Builder* inner, Observability* observability)
      : Builder(inner->threads()), inner_(inner), observability_(observability) {}
  std::vector<BuildResult> Build(const TuningTask& task, const Template& tmpl,
                                 const Target& target,
                                 const std::vector<Candidate>& candidates) const override;

 private:
  const Builder* inner_;
  Observability* observability_;
};

}  // namespace tuneforge
