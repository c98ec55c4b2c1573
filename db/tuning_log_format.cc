// The tuning log's JSON-lines reader and writer (tuneforge and AutoTVM formats).
#include "db/tuning_log_format.h"

#include <cmath>
#include <condition_variable>
#include <deque>
#include <map>
#include <mutex>
#include <string>
#include <thread>
#include <utility>

#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "compiler/support/status.h"
#include "nlohmann/json.hpp"

namespace tuneforge {

namespace {

using nlohmann::json;

constexpr char kFormatName[] = "tuneforge-log";
constexpr char kAutoTvmSource[] = "autotvm-v0.2";

absl::Status Bad(const std::string& why) { return absl::InvalidArgumentError(why); }

// Typed field access with one-line reasons; the JSON library's exceptions never
// escape (its parse runs with exceptions off and every access is checked first).
absl::Status GetString(const json& o, const char* key, std::string* out) {
  auto it = o.find(key);
  if (it == o.end() || !it->is_string()) return Bad(absl::StrCat("\"", key, "\" must be a string"));
  *out = it->get<std::string>();
  return absl::OkStatus();
}

absl::Status GetInt(const json& o, const char* key, int64_t* out) {
  auto it = o.find(key);
  if (it == o.end() || !it->is_number_integer()) {
    return Bad(absl::StrCat("\"", key, "\" must be an integer"));
  }
  *out = it->get<int64_t>();
  return absl::OkStatus();
}

absl::Status GetDouble(const json& o, const char* key, double* out) {
  auto it = o.find(key);
  if (it == o.end() || !it->is_number()) return Bad(absl::StrCat("\"", key, "\" must be a number"));
  *out = it->get<double>();
  return absl::OkStatus();
}

absl::Status GetObject(const json& o, const char* key, const json** out) {
  auto it = o.find(key);
  if (it == o.end() || !it->is_object())
    return Bad(absl::StrCat("\"", key, "\" must be an object"));
  *out = &*it;
  return absl::OkStatus();
}

absl::Status GetCosts(const json& o, const char* key, std::vector<double>* out) {
  auto it = o.find(key);
  if (it == o.end() || !it->is_array()) return Bad(absl::StrCat("\"", key, "\" must be an array"));
  for (const json& c : *it) {
    if (!c.is_number() || !std::isfinite(c.get<double>()) || c.get<double>() < 0) {
      return Bad(absl::StrCat("\"", key, "\" must hold finite non-negative numbers"));
    }
    out->push_back(c.get<double>());
  }
  return absl::OkStatus();
}

absl::StatusOr<json> ParseObject(const std::string& line) {
  json j = json::parse(line, nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded()) return Bad("not valid JSON");
  if (!j.is_object()) return Bad("not a JSON object");
  return j;
}

bool SkippableLine(const std::string& line) {
  absl::string_view s = absl::StripAsciiWhitespace(line);
  return s.empty() || s[0] == '#';
}

absl::StatusOr<TuningRecord> RecordFromJson(const json& j) {
  TuningRecord r;
  const json* w = nullptr;
  const json* t = nullptr;
  RETURN_IF_ERROR(GetObject(j, "workload", &w));
  RETURN_IF_ERROR(GetString(*w, "key", &r.workload.key));
  RETURN_IF_ERROR(GetString(*w, "op", &r.workload.op));
  RETURN_IF_ERROR(GetString(*w, "task", &r.workload.task_text));
  RETURN_IF_ERROR(GetString(*w, "task_json", &r.workload.task_json));
  RETURN_IF_ERROR(GetDouble(*w, "flops", &r.workload.flops));
  RETURN_IF_ERROR(GetObject(j, "target", &t));
  RETURN_IF_ERROR(GetString(*t, "key", &r.target.key));
  RETURN_IF_ERROR(GetString(*t, "triple", &r.target.triple));
  RETURN_IF_ERROR(GetString(*t, "cpu", &r.target.cpu));
  RETURN_IF_ERROR(GetString(*t, "features", &r.target.features));
  int64_t threads = 0;
  RETURN_IF_ERROR(GetInt(*t, "num_threads", &threads));
  r.target.num_threads = static_cast<int>(threads);
  RETURN_IF_ERROR(GetString(*t, "device_key", &r.target.device_key));
  RETURN_IF_ERROR(GetString(j, "template", &r.template_name));
  int64_t version = 0;
  RETURN_IF_ERROR(GetInt(j, "template_version", &version));
  r.template_version = static_cast<int>(version);
  RETURN_IF_ERROR(GetString(j, "config", &r.config_json));
  RETURN_IF_ERROR(GetCosts(j, "costs", &r.result.costs));
  std::string error;
  RETURN_IF_ERROR(GetString(j, "error", &error));
  std::optional<MeasureErrorKind> kind = ParseMeasureErrorKind(error);
  if (!kind) return Bad(absl::StrCat("unknown error kind '", error, "'"));
  r.result.error = *kind;
  RETURN_IF_ERROR(GetString(j, "error_message", &r.result.error_message));
  RETURN_IF_ERROR(GetDouble(j, "build_seconds", &r.result.build_seconds));
  RETURN_IF_ERROR(GetInt(j, "start_unix_us", &r.result.start_unix_us));
  RETURN_IF_ERROR(GetInt(j, "end_unix_us", &r.result.end_unix_us));
  RETURN_IF_ERROR(GetString(j, "agent", &r.result.agent_id));
  RETURN_IF_ERROR(GetString(j, "environment", &r.result.environment_json));
  RETURN_IF_ERROR(GetString(j, "job_id", &r.job_id));
  // Optional: logs written before schema v4 do not carry it.
  if (j.contains("proposed_by")) RETURN_IF_ERROR(GetString(j, "proposed_by", &r.proposed_by));
  if (j.contains("uploaded_by")) RETURN_IF_ERROR(GetString(j, "uploaded_by", &r.uploaded_by));
  if (j.contains("upload_trusted")) {
    auto it = j.find("upload_trusted");
    if (!it->is_boolean()) return Bad("\"upload_trusted\" must be true or false");
    r.upload_trusted = it->get<bool>();
  }
  RETURN_IF_ERROR(GetString(j, "content_id", &r.content_id));
  if (r.content_id != ContentId(r)) {
    return Bad("content_id does not match the record's fields (edited or damaged line)");
  }
  return r;
}

absl::StatusOr<ForeignRecord> ForeignFromJson(const json& j) {
  ForeignRecord f;
  RETURN_IF_ERROR(GetString(j, "source", &f.source));
  RETURN_IF_ERROR(GetString(j, "target", &f.target_text));
  RETURN_IF_ERROR(GetString(j, "task_name", &f.task_name));
  RETURN_IF_ERROR(GetString(j, "workload", &f.workload_json));
  RETURN_IF_ERROR(GetString(j, "config", &f.config_json));
  RETURN_IF_ERROR(GetCosts(j, "costs", &f.costs));
  int64_t error_no = 0;
  RETURN_IF_ERROR(GetInt(j, "error_no", &error_no));
  f.error_no = static_cast<int>(error_no);
  RETURN_IF_ERROR(GetInt(j, "timestamp_unix_us", &f.timestamp_unix_us));
  RETURN_IF_ERROR(GetString(j, "reason", &f.reason));
  RETURN_IF_ERROR(GetString(j, "raw", &f.raw));
  RETURN_IF_ERROR(GetString(j, "content_id", &f.content_id));
  if (f.content_id != ForeignContentId(f.source, f.raw)) {
    return Bad("content_id does not match the foreign record (edited or damaged line)");
  }
  return f;
}

// Stores parsed records; when a batch is refused as a whole for a bad record (e.g.
// a workload key that names another task), retries it one record at a time so only
// the bad lines are rejected. Other errors (disk full, I/O) stop the import.
absl::Status StoreRecords(Database& db, const std::vector<TuningRecord>& records,
                          const std::vector<int64_t>& line_numbers, ImportReport* report) {
  if (records.empty()) return absl::OkStatus();
  absl::StatusOr<CommitResult> r = db.Insert(records);
  if (r.ok()) {
    report->inserted += r->inserted;
    report->duplicates += r->duplicates;
    report->compacted += r->compacted;
    return absl::OkStatus();
  }
  if (!absl::IsInvalidArgument(r.status())) return r.status();
  for (size_t i = 0; i < records.size(); ++i) {
    absl::StatusOr<CommitResult> one = db.Insert({records[i]});
    if (one.ok()) {
      report->inserted += one->inserted;
      report->duplicates += one->duplicates;
      report->compacted += one->compacted;
    } else if (absl::IsInvalidArgument(one.status())) {
      report->rejected.emplace_back(line_numbers[i], std::string(one.status().message()));
    } else {
      return one.status();
    }
  }
  return absl::OkStatus();
}

absl::Status StoreForeign(Database& db, const std::vector<ForeignRecord>& records,
                          ImportReport* report) {
  if (records.empty()) return absl::OkStatus();
  ASSIGN_OR_RETURN(CommitResult r, db.InsertForeign(records));
  report->foreign_inserted += r.inserted;
  report->foreign_duplicates += r.duplicates;
  std::map<std::string, int64_t> by_reason;
  for (const auto& [reason, n] : report->not_mapped) by_reason[reason] = n;
  for (const ForeignRecord& f : records) by_reason[f.reason] += 1;
  report->not_mapped.assign(by_reason.begin(), by_reason.end());
  return absl::OkStatus();
}

}  // namespace

std::string LogHeaderLine() {
  return json{{"format", kFormatName}, {"version", kLogFormatVersion}}.dump();
}

std::string RecordToLogLine(const TuningRecord& r) {
  json j = {
      {"kind", "record"},
      {"content_id", r.content_id.empty() ? ContentId(r) : r.content_id},
      {"workload",
       {{"key", r.workload.key},
        {"op", r.workload.op},
        {"task", r.workload.task_text},
        {"task_json", r.workload.task_json},
        {"flops", r.workload.flops}}},
      {"target",
       {{"key", r.target.key},
        {"triple", r.target.triple},
        {"cpu", r.target.cpu},
        {"features", r.target.features},
        {"num_threads", r.target.num_threads},
        {"device_key", r.target.device_key}}},
      {"template", r.template_name},
      {"template_version", r.template_version},
      {"config", r.config_json},
      {"costs", r.result.costs},
      {"error", MeasureErrorKindName(r.result.error)},
      {"error_message", r.result.error_message},
      {"build_seconds", r.result.build_seconds},
      {"start_unix_us", r.result.start_unix_us},
      {"end_unix_us", r.result.end_unix_us},
      {"agent", r.result.agent_id},
      {"environment", r.result.environment_json},
      {"job_id", r.job_id},
      {"proposed_by", r.proposed_by},
  };
  if (!r.uploaded_by.empty()) {
    j["uploaded_by"] = r.uploaded_by;
    j["upload_trusted"] = r.upload_trusted;
  }
  // Invalid UTF-8 (never produced by tuneforge) is replaced rather than thrown on.
  return j.dump(-1, ' ', false, json::error_handler_t::replace);
}

std::string ForeignToLogLine(const ForeignRecord& f) {
  json j = {{"kind", "foreign"},
            {"content_id", f.content_id.empty() ? ForeignContentId(f.source, f.raw) : f.content_id},
            {"source", f.source},
            {"target", f.target_text},
            {"task_name", f.task_name},
            {"workload", f.workload_json},
            {"config", f.config_json},
            {"costs", f.costs},
            {"error_no", f.error_no},
            {"timestamp_unix_us", f.timestamp_unix_us},
            {"reason", f.reason},
            {"raw", f.raw}};
  return j.dump(-1, ' ', false, json::error_handler_t::replace);
}

absl::Status CheckLogHeader(const std::string& line) {
  absl::StatusOr<json> j = ParseObject(line);
  std::string format;
  if (!j.ok() || !GetString(*j, "format", &format).ok() || format != kFormatName) {
    return Bad(absl::StrCat("the first line is not a tuneforge log header (", LogHeaderLine(),
                            "); for AutoTVM logs use --format autotvm"));
  }
  int64_t version = 0;
  if (!GetInt(*j, "version", &version).ok() || version < 1) {
    return Bad("the log header has no valid \"version\"");
  }
  if (version > kLogFormatVersion) {
    return absl::FailedPreconditionError(
        absl::StrCat("the log is format version ", version, ", written by a newer tuneforge; ",
                     "this build reads version ", kLogFormatVersion));
  }
  return absl::OkStatus();
}

absl::StatusOr<LogLine> ParseLogLine(const std::string& line) {
  ASSIGN_OR_RETURN(json j, ParseObject(line));
  std::string kind;
  RETURN_IF_ERROR(GetString(j, "kind", &kind));
  LogLine out;
  if (kind == "record") {
    out.kind = LogLine::Kind::kRecord;
    ASSIGN_OR_RETURN(out.record, RecordFromJson(j));
  } else if (kind == "foreign") {
    out.kind = LogLine::Kind::kForeign;
    ASSIGN_OR_RETURN(out.foreign, ForeignFromJson(j));
  } else {
    return Bad(absl::StrCat("unknown \"kind\" '", kind, "'"));
  }
  return out;
}

absl::StatusOr<int64_t> ExportLog(Database& db, const ExportOptions& options, std::ostream& out) {
  out << LogHeaderLine() << '\n';
  int64_t lines = 0;
  RETURN_IF_ERROR(db.Scan(options.filter, [&](const TuningRecord& r) {
    out << RecordToLogLine(r) << '\n';
    ++lines;
    return out ? absl::OkStatus() : absl::InternalError("write error on the export stream");
  }));
  const RecordFilter& f = options.filter;
  bool unfiltered = f.workload_key.empty() && f.target_key.empty() && f.since_unix_us == 0 &&
                    f.until_unix_us == 0;
  if (options.include_foreign && unfiltered) {
    RETURN_IF_ERROR(db.ScanForeign([&](const ForeignRecord& fr) {
      out << ForeignToLogLine(fr) << '\n';
      ++lines;
      return out ? absl::OkStatus() : absl::InternalError("write error on the export stream");
    }));
  }
  out.flush();
  if (!out) return absl::InternalError("write error on the export stream (disk full?)");
  return lines;
}

namespace {

// Lines of a log body parsed, not yet stored: the unit the import pipeline passes from
// its reading thread to the storing one.
struct ParsedBatch {
  int64_t lines = 0;  // non-skippable lines
  std::vector<TuningRecord> records;
  std::vector<int64_t> line_numbers;  // of records
  std::vector<ForeignRecord> foreign;
  std::vector<std::pair<int64_t, std::string>> rejected;
};

ParsedBatch ParseLines(const std::vector<std::string>& lines, int64_t first_line,
                       const RecordCheck& check) {
  ParsedBatch b;
  for (size_t i = 0; i < lines.size(); ++i) {
    if (SkippableLine(lines[i])) continue;
    ++b.lines;
    int64_t number = first_line + static_cast<int64_t>(i);
    absl::StatusOr<LogLine> parsed = ParseLogLine(lines[i]);
    if (!parsed.ok()) {
      b.rejected.emplace_back(number, std::string(parsed.status().message()));
      continue;
    }
    if (parsed->kind == LogLine::Kind::kRecord) {
      if (check) {
        if (absl::Status ok = check(parsed->record); !ok.ok()) {
          b.rejected.emplace_back(number, std::string(ok.message()));
          continue;
        }
      }
      b.records.push_back(std::move(parsed->record));
      b.line_numbers.push_back(number);
    } else {
      b.foreign.push_back(std::move(parsed->foreign));
    }
  }
  return b;
}

absl::Status StoreParsed(Database& db, ParsedBatch& b, ImportReport* report) {
  report->lines += b.lines;
  for (auto& r : b.rejected) report->rejected.push_back(std::move(r));
  RETURN_IF_ERROR(StoreRecords(db, b.records, b.line_numbers, report));
  return StoreForeign(db, b.foreign, report);
}

}  // namespace

absl::Status StoreLogLines(Database& db, const std::vector<std::string>& lines, int64_t first_line,
                           ImportReport* report, const Uploader* uploader,
                           const RecordCheck& check) {
  ParsedBatch b = ParseLines(lines, first_line, check);
  if (uploader) {
    for (TuningRecord& r : b.records) {
      r.uploaded_by = uploader->name.empty() ? "anonymous" : uploader->name;
      r.upload_trusted = uploader->trusted;
    }
  }
  return StoreParsed(db, b, report);
}

absl::StatusOr<ImportReport> ImportLog(Database& db, std::istream& in, size_t batch_size,
                                       const RecordCheck& check) {
  // Two stages on two threads: a reader reads and parses batches (JSON parsing and the
  // content-id check are about half of an import's CPU time) while this thread stores
  // the batch before. At most two parsed batches wait, so memory stays bounded, and
  // batches are stored in file order: the report is the one a one-thread import gives.
  std::mutex mu;
  std::condition_variable changed;
  std::deque<ParsedBatch> ready;  // guarded by mu
  bool reader_done = false;       // guarded by mu
  bool stop = false;              // guarded by mu: storing failed, read no further
  absl::Status reader_status;     // written by the reader, read after join
  int64_t header_lines = 0;       // likewise
  std::thread reader([&] {
    auto hand_over = [&](ParsedBatch b) {
      std::unique_lock<std::mutex> lock(mu);
      changed.wait(lock, [&] { return ready.size() < 2 || stop; });
      if (stop) return false;
      ready.push_back(std::move(b));
      changed.notify_all();
      return true;
    };
    std::string line;
    int64_t number = 0;
    bool header_seen = false;
    std::vector<std::string> batch;
    int64_t batch_first = 0;
    bool stopped = false;
    while (!stopped && std::getline(in, line)) {
      ++number;
      if (!header_seen) {
        if (SkippableLine(line)) continue;
        reader_status = CheckLogHeader(line);
        if (!reader_status.ok()) break;
        header_seen = true;
        ++header_lines;
        continue;
      }
      if (batch.empty()) batch_first = number;
      batch.push_back(std::move(line));
      if (batch.size() >= batch_size) {
        stopped = !hand_over(ParseLines(batch, batch_first, check));
        batch.clear();
      }
    }
    if (reader_status.ok() && !stopped) {
      if (in.bad()) {
        reader_status = absl::InternalError("read error on the import stream");
      } else if (!header_seen) {
        reader_status = Bad("the log is empty (no header line)");
      } else if (!batch.empty()) {
        hand_over(ParseLines(batch, batch_first, check));
      }
    }
    std::lock_guard<std::mutex> lock(mu);
    reader_done = true;
    changed.notify_all();
  });

  ImportReport report;
  absl::Status stored;
  while (true) {
    ParsedBatch b;
    {
      std::unique_lock<std::mutex> lock(mu);
      changed.wait(lock, [&] { return !ready.empty() || reader_done; });
      if (ready.empty()) break;
      b = std::move(ready.front());
      ready.pop_front();
      changed.notify_all();
    }
    if (!stored.ok()) continue;  // draining after a failure
    stored = StoreParsed(db, b, &report);
    if (!stored.ok()) {
      std::lock_guard<std::mutex> lock(mu);
      stop = true;
      changed.notify_all();
    }
  }
  reader.join();
  RETURN_IF_ERROR(stored);
  RETURN_IF_ERROR(reader_status);
  report.lines += header_lines;
  return report;
}

// ---------------------------------------------------------------------------------
// AutoTVM.

namespace {

// Why an AutoTVM task has no exact tuneforge equivalent. tuneforge's ops today are
// `matmul M N K` (float32, row-major, C = A·B; template matmul_cpu) and `batch_matmul
// B M N K` (C[b] = A[b]·B[b], B[b] stored [K, N]; template batch_matmul_cpu); an
// AutoTVM record could only map if both the computation and the config knobs mean
// exactly the same thing.
std::string NotMappedReason(const std::string& task_name) {
  auto starts = [&](const char* prefix) { return task_name.rfind(prefix, 0) == 0; };
  if (starts("dense")) {
    return "AutoTVM dense computes data x weight^T (weight is [out, in]), not tuneforge's "
           "row-major C = A·B, and its tile_y/tile_x/tile_k knobs are not matmul_cpu's";
  }
  if (starts("batch_matmul")) {
    return "AutoTVM batch_matmul computes x x y^T per batch (y is [batch, N, K]), not "
           "tuneforge's batch_matmul A[b]·B[b] with B[b] as [K, N], and its knobs are not "
           "batch_matmul_cpu's";
  }
  if (starts("conv2d") || starts("depthwise_conv2d") || starts("group_conv2d")) {
    return "tuneforge has no conv2d op yet";
  }
  return "no tuneforge op for AutoTVM task '" + task_name + "'";
}

}  // namespace

absl::StatusOr<ForeignRecord> ParseAutoTvmLine(const std::string& line) {
  ASSIGN_OR_RETURN(json j, ParseObject(line));
  if (j.contains("i") && j.contains("r")) {
    return Bad("AutoTVM log format v0.1 is not supported (only v0.2)");
  }
  auto version = j.find("version");
  if (version == j.end() || !version->is_number() ||
      std::abs(version->get<double>() - 0.2) > 1e-9) {
    return Bad("not an AutoTVM v0.2 record (\"version\" must be 0.2)");
  }
  auto input = j.find("input");
  if (input == j.end() || !input->is_array() || input->size() < 3 || !(*input)[0].is_string() ||
      !(*input)[1].is_string() || !(*input)[2].is_array()) {
    return Bad("\"input\" must be [target, task name, args, ...]");
  }
  auto config = j.find("config");
  if (config == j.end() || !config->is_object() || !config->contains("entity")) {
    return Bad("\"config\" must be an object with an \"entity\"");
  }
  auto result = j.find("result");
  if (result == j.end() || !result->is_array() || result->size() < 4 || !(*result)[0].is_array() ||
      !(*result)[1].is_number_integer() || !(*result)[3].is_number()) {
    return Bad("\"result\" must be [costs, error_no, all_cost, timestamp]");
  }
  ForeignRecord f;
  f.source = kAutoTvmSource;
  f.target_text = (*input)[0].get<std::string>();
  f.task_name = (*input)[1].get<std::string>();
  f.workload_json = (*input)[2].dump();
  f.config_json = (*config)["entity"].dump();
  f.error_no = (*result)[1].get<int>();
  for (const json& c : (*result)[0]) {
    // Failed AutoTVM measurements carry error objects or strings instead of times.
    if (c.is_number() && std::isfinite(c.get<double>()) && c.get<double>() >= 0) {
      f.costs.push_back(c.get<double>());
    }
  }
  double ts = (*result)[3].get<double>();
  if (!std::isfinite(ts) || ts < 0 || ts > 1e11) return Bad("timestamp out of range");
  f.timestamp_unix_us = static_cast<int64_t>(std::llround(ts * 1e6));
  f.reason = NotMappedReason(f.task_name);
  f.raw = std::string(absl::StripAsciiWhitespace(line));
  f.content_id = ForeignContentId(f.source, f.raw);
  return f;
}

absl::StatusOr<ImportReport> ImportAutoTvmLog(Database& db, std::istream& in) {
  ImportReport report;
  std::string line;
  int64_t number = 0;
  std::vector<ForeignRecord> batch;
  while (std::getline(in, line)) {
    ++number;
    if (SkippableLine(line)) continue;
    ++report.lines;
    absl::StatusOr<ForeignRecord> f = ParseAutoTvmLine(line);
    if (!f.ok()) {
      report.rejected.emplace_back(number, std::string(f.status().message()));
      continue;
    }
    batch.push_back(std::move(*f));
    if (batch.size() >= 5000) {
      RETURN_IF_ERROR(StoreForeign(db, batch, &report));
      batch.clear();
    }
  }
  if (in.bad()) return absl::InternalError("read error on the import stream");
  RETURN_IF_ERROR(StoreForeign(db, batch, &report));
  return report;
}

absl::StatusOr<ImportReport> MergeDatabases(Database& into, Database& from, const RecordCheck& check) {
  ImportReport report;
  std::vector<TuningRecord> batch;
  std::vector<int64_t> ids;
  auto flush = [&]() -> absl::Status {
    absl::Status s = StoreRecords(into, batch, ids, &report);
    batch.clear();
    ids.clear();
    return s;
  };
  RETURN_IF_ERROR(from.Scan(RecordFilter(), [&](const TuningRecord& r) -> absl::Status {
    ++report.lines;
    if (check) {
      if (absl::Status ok = check(r); !ok.ok()) {
        report.rejected.emplace_back(r.id, std::string(ok.message()));
        return absl::OkStatus();
      }
    }
    batch.push_back(r);
    ids.push_back(r.id);  // "line" numbers of a merge are the source's record ids
    if (batch.size() >= 5000) return flush();
    return absl::OkStatus();
  }));
  RETURN_IF_ERROR(flush());
  std::vector<ForeignRecord> foreign;
  RETURN_IF_ERROR(from.ScanForeign([&](const ForeignRecord& f) -> absl::Status {
    ++report.lines;
    foreign.push_back(f);
    if (foreign.size() >= 5000) {
      absl::Status s = StoreForeign(into, foreign, &report);
      foreign.clear();
      return s;
    }
    return absl::OkStatus();
  }));
  RETURN_IF_ERROR(StoreForeign(into, foreign, &report));
  return report;
}

}  // namespace tuneforge
