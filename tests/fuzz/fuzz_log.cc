// libFuzzer target: the tuning-log import (`db import`, DatabaseService.Upload): the
// JSON-lines record and foreign-record lines, the header, and AutoTVM lines, then the
// identity check every import runs.
#include <cstddef>
#include <cstdint>
#include <string>

#include "db/tuning_log_format.h"
#include "tuner/record_identity.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string line(reinterpret_cast<const char*>(data), size);
  (void)tuneforge::CheckLogHeader(line);
  absl::StatusOr<tuneforge::LogLine> parsed = tuneforge::ParseLogLine(line);
  if (parsed.ok() && parsed->kind == tuneforge::LogLine::Kind::kRecord) {
    (void)tuneforge::CheckRecordIdentity(parsed->record);
    (void)tuneforge::RecordToLogLine(parsed->record);
  }
  (void)tuneforge::ParseAutoTvmLine(line);
  return 0;
}
