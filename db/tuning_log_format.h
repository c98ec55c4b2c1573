// Moving tuning logs in and out of a Database: tuneforge's own JSON-lines log
// (export, import, and the wire format of DatabaseService), AutoTVM v0.2 logs, and
// merging one database into another. docs/db.md describes both formats.
//
// tuneforge log, format version 1: the first line is the header
//   {"format":"tuneforge-log","version":1}
// then one JSON object per line, "kind":"record" (a TuningRecord, with its content
// id) or "kind":"foreign" (a ForeignRecord). Config, task and environment JSON travel
// as strings, byte for byte, because the content id hashes their exact text.
#pragma once

#include <cstdint>
#include <functional>
#include <istream>
#include <ostream>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "db/database.h"

namespace tuneforge {

inline constexpr int kLogFormatVersion = 1;

std::string LogHeaderLine();
std::string RecordToLogLine(const TuningRecord& r);
std::string ForeignToLogLine(const ForeignRecord& f);

// One parsed line of a tuneforge log body.
struct LogLine {
  enum class Kind { kRecord, kForeign };
  Kind kind = Kind::kRecord;
  TuningRecord record;
  ForeignRecord foreign;
};
// InvalidArgument with the reason when the line is not a valid record; a record whose
// content_id does not match its fields (edited or damaged) is refused too.
absl::StatusOr<LogLine> ParseLogLine(const std::string& line);
// Checks a header line: InvalidArgument when it is not one, FailedPrecondition when
// the version is newer than this build reads.
absl::Status CheckLogHeader(const std::string& line);

struct ImportReport {
  int64_t lines = 0;             // non-empty, non-comment lines read (header included)
  int64_t inserted = 0;          // new records
  int64_t duplicates = 0;        // records already stored (same content id)
  int64_t compacted = 0;         // records skipped: `compact` deleted them from this db
  int64_t foreign_inserted = 0;  // stored as foreign records (no exact mapping)
  int64_t foreign_duplicates = 0;
  // (line number, reason) of each line not stored, in file order.
  std::vector<std::pair<int64_t, std::string>> rejected;
  // Foreign records by reason, for the summary: (reason, count).
  std::vector<std::pair<std::string, int64_t>> not_mapped;
};

struct ExportOptions {
  RecordFilter filter;
  bool include_foreign = true;  // only when the filter is empty
};

// Writes a header and every matching record; returns the number of lines after the
// header.
absl::StatusOr<int64_t> ExportLog(Database& db, const ExportOptions& options, std::ostream& out);

// Checks one parsed record before it is stored; a failure rejects its line with the
// message. db/ knows no tasks: the importers pass tuner's CheckRecordIdentity.
using RecordCheck = std::function<absl::Status(const TuningRecord&)>;

// Reads a tuneforge log. Bad lines are rejected one by one with a reason; an I/O or
// database error stops the import (batches already committed stay, and importing
// the file again completes it without duplicates).
absl::StatusOr<ImportReport> ImportLog(Database& db, std::istream& in, size_t batch_size = 5000,
                                       const RecordCheck& check = nullptr);

// Who uploads records over the server (DatabaseService.Upload): every record stored
// is marked with the name, whatever its line says (TuningRecord::uploaded_by).
struct Uploader {
  std::string name;
  bool trusted = false;  // the db's policy: admins' uploads are ranked, users' are not
};

// Parses body lines (no header) and stores them: the import step shared by ImportLog
// and DatabaseService.Upload. `first_line` numbers the lines in the report.
// `uploader` (optional) marks every record as uploaded by it.
absl::Status StoreLogLines(Database& db, const std::vector<std::string>& lines, int64_t first_line,
                           ImportReport* report, const Uploader* uploader = nullptr,
                           const RecordCheck& check = nullptr);

// AutoTVM v0.2 lines (`#` comments and blank lines skipped). No AutoTVM task maps
// exactly to a tuneforge template today (see docs/db.md), so valid lines are stored
// as foreign records with the reason; malformed lines are rejected with theirs.
absl::StatusOr<ImportReport> ImportAutoTvmLog(Database& db, std::istream& in);
// One AutoTVM line -> a foreign record (reason filled in), or InvalidArgument.
absl::StatusOr<ForeignRecord> ParseAutoTvmLine(const std::string& line);

// Copies every record and foreign record of `from` into `into`; idempotent.
// `check` as for ImportLog ("line" numbers are the source's record ids).
absl::StatusOr<ImportReport> MergeDatabases(Database& into, Database& from,
                                            const RecordCheck& check = nullptr);

}  // namespace tuneforge
