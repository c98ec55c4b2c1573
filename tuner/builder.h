// Builder: Candidates -> Artifacts on a pool of threads (LLVM codegen is the
// expensive, parallel part of a round). Build failures are data (BuildResult.error).
#pragma once

#include <memory>
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

// Thread-safe; Build may be called from several jobs at once (they share the pool's
// threads by each running its own batch with up to `threads` workers). Virtual so
// the server can wrap it (metrics) and benchmarks can inject a fake that does not
// run the compiler.
class Builder {
 public:
  explicit Builder(int threads);
  virtual ~Builder() = default;
  virtual std::vector<BuildResult> Build(const TuningTask& task, const Template& tmpl, const Target& target,
                                 const std::vector<Candidate>& candidates) const;
  int threads() const { return threads_; }

 private:
  int threads_;
};

}  // namespace tuneforge
