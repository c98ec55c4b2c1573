// `tuneforge db export | import | merge`: move tuning logs between files, databases
// and servers. The formats and their guarantees are in db/tuning_log_format.h and docs/db.md.
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iostream>

#include "absl/strings/ascii.h"
#include "compiler/support/status.h"
#include "compiler/task/task.h"
#include "db/tuning_log_format.h"
#include "cli/db_command.h"
#include "tuner/record_identity.h"

namespace tuneforge::cli {

namespace {

// Prints what an import or merge did; every rejected line with its reason (up to a
// limit on the terminal, all of them in --json).
int PrintReport(const ImportReport& r, const Flags& flags) {
  if (flags.Has("json")) {
    nlohmann::json rejected = nlohmann::json::array();
    for (const auto& [line, reason] : r.rejected) {
      rejected.push_back({{"line", line}, {"reason", reason}});
    }
    nlohmann::json not_mapped = nlohmann::json::array();
    for (const auto& [reason, n] : r.not_mapped) {
      not_mapped.push_back({{"reason", reason}, {"records", n}});
    }
    std::printf("%s\n", nlohmann::json({{"lines", r.lines},
                                        {"inserted", r.inserted},
                                        {"duplicates", r.duplicates},
                                        {"compacted", r.compacted},
                                        {"foreign_inserted", r.foreign_inserted},
                                        {"foreign_duplicates", r.foreign_duplicates},
                                        {"not_mapped", not_mapped},
                                        {"rejected", rejected}})
                            .dump()
                            .c_str());
    return 0;
  }
  std::printf("%lld lines: %lld records added, %lld already present",
              static_cast<long long>(r.lines), static_cast<long long>(r.inserted),
              static_cast<long long>(r.duplicates));
  if (r.compacted > 0) {
    std::printf(", %lld skipped (deleted by an earlier compaction)",
                static_cast<long long>(r.compacted));
  }
  if (r.foreign_inserted + r.foreign_duplicates > 0) {
    std::printf(", %lld foreign records kept (%lld already present)",
                static_cast<long long>(r.foreign_inserted),
                static_cast<long long>(r.foreign_duplicates));
  }
  std::printf(", %zu rejected\n", r.rejected.size());
  for (const auto& [reason, n] : r.not_mapped) {
    std::printf("  not mapped to a tuneforge task (%lld records, kept as foreign): %s\n",
                static_cast<long long>(n), reason.c_str());
  }
  constexpr size_t kShow = 20;
  for (size_t i = 0; i < r.rejected.size() && i < kShow; ++i) {
    std::printf("  line %lld rejected: %s\n", static_cast<long long>(r.rejected[i].first),
                r.rejected[i].second.c_str());
  }
  if (r.rejected.size() > kShow) {
    std::printf("  ... and %zu more (all of them with --json)\n", r.rejected.size() - kShow);
  }
  return 0;
}

}  // namespace

absl::StatusOr<int> DbExport(const Flags& flags) {
  ExportOptions options;
  if (flags.Has("task")) {
    ASSIGN_OR_RETURN(TuningTask task, ParseTask(flags.Get("task")));
    options.filter.workload_key = task.WorkloadKey();
  }
  options.filter.target_key = flags.Get("target-key");
  ASSIGN_OR_RETURN(options.filter.since_unix_us, ParseDateFlag(flags, "since"));
  ASSIGN_OR_RETURN(options.filter.until_unix_us, ParseDateFlag(flags, "until"));
  ASSIGN_OR_RETURN(std::unique_ptr<Database> db, OpenDb(flags));
  if (!flags.Has("out") || flags.Get("out") == "-") {
    ASSIGN_OR_RETURN(int64_t n, ExportLog(*db, options, std::cout));
    std::fprintf(stderr, "exported %lld records\n", static_cast<long long>(n));
    return 0;
  }
  // Written to a temporary name and renamed at the end, so an interrupted export
  // never leaves a truncated file that looks complete.
  const std::string out_path = flags.Get("out");
  const std::string tmp = out_path + ".partial";
  int64_t n = 0;
  {
    std::ofstream out(tmp, std::ios::binary | std::ios::trunc);
    if (!out) return absl::PermissionDeniedError("cannot write " + tmp);
    absl::StatusOr<int64_t> written = ExportLog(*db, options, out);
    out.close();
    if (!written.ok() || !out) {
      std::filesystem::remove(tmp);
      if (!written.ok()) return written.status();
      return absl::ResourceExhaustedError("writing " + out_path + " failed (disk full?)");
    }
    n = *written;
  }
  std::error_code ec;
  std::filesystem::rename(tmp, out_path, ec);
  if (ec)
    return absl::InternalError("cannot rename " + tmp + " to " + out_path + ": " + ec.message());
  std::fprintf(stderr, "exported %lld records to %s\n", static_cast<long long>(n),
               out_path.c_str());
  return 0;
}

absl::StatusOr<int> DbImport(const Flags& flags) {
  if (flags.positional().size() != 2) {
    return absl::InvalidArgumentError("db import needs one FILE (see --help)");
  }
  const std::string file = flags.positional()[1];
  const std::string format = flags.Get("format", "tuneforge");
  if (format != "tuneforge" && format != "autotvm") {
    return absl::InvalidArgumentError("--format must be tuneforge or autotvm, got '" + format +
                                      "'");
  }
  std::ifstream in(file, std::ios::binary);
  if (!in) return absl::NotFoundError("cannot read " + file);
  if (std::filesystem::is_directory(file)) return absl::InvalidArgumentError(file + " is a directory");
  if (format == "tuneforge") {
    // The header before the db: a file that is not a log changes nothing, creates nothing.
    std::string first;
    while (std::getline(in, first)) {  // blank and '#' lines may come first, as ImportLog reads
      absl::string_view stripped = absl::StripAsciiWhitespace(first);
      if (!stripped.empty() && stripped[0] != '#') break;
    }
    absl::Status header = CheckLogHeader(first);
    if (!header.ok()) return absl::InvalidArgumentError(file + ": " + std::string(header.message()));
    in.clear();
    in.seekg(0);
  }
  // A local db this import creates is removed again when nothing came of it (a bad
  // file, or every line rejected): a failed import leaves no file behind.
  const std::string db_path = flags.Has("db") ? flags.Get("db") : "";
  const bool created = !db_path.empty() && !std::filesystem::exists(db_path);
  ASSIGN_OR_RETURN(std::unique_ptr<Database> db, OpenDb(flags, /*create_if_missing=*/true));
  absl::StatusOr<ImportReport> report =
      format == "autotvm" ? ImportAutoTvmLog(*db, in) : ImportLog(*db, in, 5000, CheckRecordIdentity);
  if (created && (!report.ok() || report->inserted + report->foreign_inserted == 0)) {
    db.reset();
    for (const char* suffix : {"", "-wal", "-shm", "-journal"}) std::filesystem::remove(db_path + suffix);
  }
  if (!report.ok()) {
    return absl::Status(report.status().code(),
                        file + ": " + std::string(report.status().message()));
  }
  return PrintReport(*report, flags);
}

absl::StatusOr<int> DbMerge(const Flags& flags) {
  if (flags.positional().size() != 3) {
    return absl::InvalidArgumentError("db merge needs two databases: A B (B is merged into A)");
  }
  // The source first: a missing or foreign source must not leave a new target db.
  DatabaseOptions from_options;
  from_options.path = flags.positional()[2];
  from_options.read_only = true;
  from_options.create_if_missing = false;
  ASSIGN_OR_RETURN(std::unique_ptr<Database> from, Database::Open(from_options));
  DatabaseOptions into_options;
  into_options.path = flags.positional()[1];
  ASSIGN_OR_RETURN(std::unique_ptr<Database> into, Database::Open(into_options));
  ASSIGN_OR_RETURN(ImportReport report, MergeDatabases(*into, *from, CheckRecordIdentity));
  return PrintReport(report, flags);
}

}  // namespace tuneforge::cli
