#include "tuner/builder.h"

#include <atomic>
#include <thread>

#include "compiler/support/log.h"

namespace tuneforge {

Builder::Builder(int threads) : threads_(std::max(1, threads)) {}

std::vector<BuildResult> Builder::Build(const TuningTask& task, const Template& tmpl,
                                        const Target& target,
                                        const std::vector<Candidate>& candidates) const {
  std::vector<BuildResult> results(candidates.size());
  std::atomic<size_t> next{0};
  auto work = [&] {
    for (size_t i = next++; i < candidates.size(); i = next++) {
      BuildResult& r = results[i];
      r.candidate = candidates[i];
      ScopedTimer timer("build");
      absl::StatusOr<ir::LoweredFunc> func = tmpl.Instantiate(task, target, r.candidate.config);
      if (!func.ok()) {
        r.error = MeasureErrorKind::kInvalidConfig;
        r.error_message = std::string(func.status().message());
        continue;
      }
      absl::StatusOr<Artifact> artifact = BuildArtifact(*func, target);
      r.build_seconds = timer.Seconds();
      if (!artifact.ok()) {
        r.error = MeasureErrorKind::kBuildError;
        r.error_message = std::string(artifact.status().message());
        TF_LOG(Warning) << "build failed for " << r.candidate.config.ToJson() << ": "
                        << r.error_message;
        continue;
      }
      r.artifact = std::make_shared<const Artifact>(*std::move(artifact));
    }
  };
  int n = std::min<int>(threads_, candidates.size());
  std::vector<std::thread> pool;
  for (int t = 1; t < n; ++t) pool.emplace_back(work);
  work();
  for (std::thread& t : pool) t.join();
  return results;
}

}  // namespace tuneforge
