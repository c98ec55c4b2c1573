// Builder: candidates compiled to artifacts on a thread pool.
#include "tuner/builder.h"

#include <atomic>
#include <thread>

#include "compiler/support/log.h"

namespace tuneforge {

void BuildSlots::Acquire() {
  std::unique_lock<std::mutex> lock(mu_);
  const int64_t ticket = next_ticket_++;
  cv_.wait(lock, [&] { return ticket < released_ + slots_; });
}

void BuildSlots::Release() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    ++released_;
  }
  cv_.notify_all();
}

int64_t BuildSlots::tickets() const {
  std::lock_guard<std::mutex> lock(mu_);
  return next_ticket_;
}

Builder::Builder(int threads)
    : threads_(std::max(1, threads)), slots_(std::make_unique<BuildSlots>(threads_)) {}

std::vector<BuildResult> Builder::Build(const TuningTask& task, const Template& tmpl,
                                        const Target& target,
                                        const std::vector<Candidate>& candidates) const {
  std::vector<BuildResult> results(candidates.size());
  std::atomic<size_t> next{0};
  auto work = [&] {
    for (size_t i = next++; i < candidates.size(); i = next++) {
      BuildResult& r = results[i];
      r.candidate = candidates[i];
      slots_->Acquire();
      struct SlotReleaser {
        BuildSlots* slots;
        ~SlotReleaser() { slots->Release(); }
      } releaser{slots_.get()};
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
