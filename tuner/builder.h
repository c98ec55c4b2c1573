// Builder: Candidates -> Artifacts on a pool of threads (LLVM codegen is the
// expensive, parallel part of a round). Build failures are data (BuildResult.error).
#pragma once

#include <condition_variable>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "compiler/codegen/build.h"
#include "compiler/target/target.h"
#include "compiler/task/task.h"
#include "compiler/templates/template.h"
#include "db/record.h"

namespace tuneforge {

// One point to build and measure.
struct Candidate {
  Config config;
  bool is_baseline = false;  // the template's untuned schedule
};

struct BuildResult {
  Candidate candidate;
  std::shared_ptr<const Artifact> artifact;  // null when error != kNone
  MeasureErrorKind error = MeasureErrorKind::kNone;
  std::string error_message;
  double build_seconds = 0;
};

// A counting semaphore that serves waiters in arrival order (tickets), so that jobs
// sharing the builder take turns instead of one job's workers starving another's.
// Thread-safe.
class BuildSlots {
 public:
  explicit BuildSlots(int slots) : slots_(slots) {}
  void Acquire();
  void Release();
  // Acquire calls so far (those waiting included).
  int64_t tickets() const;

 private:
  const int slots_;
  mutable std::mutex mu_;
  std::condition_variable cv_;
  int64_t next_ticket_ = 0;  // GUARDED_BY(mu_)
  int64_t released_ = 0;     // GUARDED_BY(mu_)
};

// Thread-safe. One Builder is shared by every job of a server: at most `threads`
// candidates are built at once across all concurrent Build calls (each candidate's
// build holds one BuildSlots slot, first come first served). Virtual so the server can
// wrap it (metrics) and benchmarks can inject a fake that does not run the compiler.
class Builder {
 public:
  explicit Builder(int threads);
  virtual ~Builder() = default;
  virtual std::vector<BuildResult> Build(const TuningTask& task, const Template& tmpl, const Target& target,
                                 const std::vector<Candidate>& candidates) const;
  int threads() const { return threads_; }

 private:
  int threads_;
  std::unique_ptr<BuildSlots> slots_;
};

}  // namespace tuneforge
