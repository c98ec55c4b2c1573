// libFuzzer target: the task text parser (`--task`, tasks files, db rows).
#include <cstddef>
#include <cstdint>
#include <string>

#include "compiler/task/task.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string text(reinterpret_cast<const char*>(data), size);
  absl::StatusOr<tuneforge::TuningTask> task = tuneforge::ParseTask(text);
  if (task.ok()) {
    // A task that parses round-trips through its canonical text and has a FLOP count.
    absl::StatusOr<tuneforge::TuningTask> again = tuneforge::ParseTask(task->CanonicalText());
    if (!again.ok() || again->CanonicalText() != task->CanonicalText()) __builtin_trap();
    if (!(task->Flops() >= 0)) __builtin_trap();
    (void)task->WorkloadKey();
    (void)task->ToJson();
  }
  return 0;
}
