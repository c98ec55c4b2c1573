// DatabaseClient: the tuning log over the server's DatabaseService.
#include "server/database_client.h"

#include <grpcpp/grpcpp.h>

#include <chrono>
#include <utility>

#include "compiler/support/rpc_credentials.h"
#include "compiler/support/status.h"
#include "db/tuning_log_format.h"
#include "server/server.h"
#include "tuneforge/v1/database.grpc.pb.h"

namespace tuneforge {
namespace {

absl::Status FromGrpc(const std::string& address, const grpc::Status& s) {
  if (s.ok()) return absl::OkStatus();
  std::string message = "server " + address + ": " + s.error_message();
  switch (s.error_code()) {
    case grpc::StatusCode::INVALID_ARGUMENT:
      return absl::InvalidArgumentError(message);
    case grpc::StatusCode::NOT_FOUND:
      return absl::NotFoundError(message);
    case grpc::StatusCode::FAILED_PRECONDITION:
      return absl::FailedPreconditionError(message);
    case grpc::StatusCode::UNAVAILABLE:
      return absl::UnavailableError(message);
    case grpc::StatusCode::UNAUTHENTICATED:
      return absl::UnauthenticatedError(message);
    case grpc::StatusCode::PERMISSION_DENIED:
      return absl::PermissionDeniedError(message);
    case grpc::StatusCode::CANCELLED:
      return absl::CancelledError(message);
    case grpc::StatusCode::UNIMPLEMENTED:
      return absl::UnimplementedError(message);
    default:
      return absl::InternalError(message);
  }
}

TargetInfo FromProto(const std::string& key, const v1::Target& t) {
  return TargetInfo{key, t.triple(), t.cpu(), t.features(), t.num_threads(), t.device_key()};
}

absl::Status NotRemote(const char* what) {
  return absl::UnimplementedError(std::string(what) +
                                  " is not available over --server yet; run it with --db on "
                                  "the server's machine");
}

// Uploads go in slices well under the server's per-call limit.
constexpr int kUploadSlice = 5000;

// Thread-safe: gRPC stubs are.
class RemoteDatabase final : public Database {
 public:
  RemoteDatabase(RemoteDatabaseOptions options, std::shared_ptr<grpc::ChannelCredentials> credentials)
      : options_(std::move(options)) {
    grpc::ChannelArguments args;
    args.SetMaxReceiveMessageSize(256 << 20);
    args.SetMaxSendMessageSize(256 << 20);
    stub_ = v1::DatabaseService::NewStub(
        grpc::CreateCustomChannel(options_.address, credentials, args));
  }

  int SchemaVersion() const override { return 0; }  // the server's; see Stats

  absl::StatusOr<CommitResult> Insert(const std::vector<TuningRecord>& records) override {
    CommitResult result;
    for (size_t begin = 0; begin < records.size(); begin += kUploadSlice) {
      v1::UploadRequest req;
      req.set_format_version(kLogFormatVersion);
      size_t end = std::min(records.size(), begin + kUploadSlice);
      for (size_t i = begin; i < end; ++i) req.add_lines(RecordToLogLine(records[i]));
      ASSIGN_OR_RETURN(v1::UploadResponse resp, Upload(req));
      if (resp.rejected_size() > 0) {
        return absl::InvalidArgumentError("record " +
                                          std::to_string(begin + resp.rejected(0).line() - 1) +
                                          ": " + resp.rejected(0).reason());
      }
      result.inserted += resp.inserted();
      result.duplicates += resp.duplicates();
      result.compacted += resp.compacted();
    }
    return result;
  }

  absl::StatusOr<std::vector<RankedConfig>> TopK(const std::string& workload_key,
                                                 const std::string& target_key, int k) override {
    v1::TopKRequest req;
    req.set_workload_key(workload_key);
    req.set_target_key(target_key);
    req.set_k(k);
    v1::TopKResponse resp;
    grpc::ClientContext ctx;
    Prepare(&ctx, /*deadline=*/true);
    RETURN_IF_ERROR(FromGrpc(options_.address, stub_->TopK(&ctx, req, &resp)));
    std::vector<RankedConfig> out;
    for (const v1::RankedConfig& c : resp.configs()) {
      RankedConfig r;
      r.template_name = c.template_name();
      r.template_version = c.template_version();
      r.config_json = c.config_json();
      r.median_cost = c.median_cost();
      r.measurements = c.measurements();
      r.samples = c.samples();
      r.remeasured = r.measurements >= 2;
      absl::StatusOr<LogLine> line = ParseLogLine(c.record_line());
      if (!line.ok() || line->kind != LogLine::Kind::kRecord) {
        return absl::DataLossError("server " + options_.address + " sent a bad record line");
      }
      r.record = std::move(line->record);
      out.push_back(std::move(r));
    }
    return out;
  }

  absl::StatusOr<TuningRecord> Best(const std::string& workload_key,
                                    const std::string& target_key) override {
    ASSIGN_OR_RETURN(std::vector<RankedConfig> top, TopK(workload_key, target_key, 1));
    if (top.empty()) {
      return absl::NotFoundError("server " + options_.address + ": no successful record for " +
                                 "workload '" + workload_key + "' on target '" + target_key + "'");
    }
    return std::move(top.front().record);
  }

  absl::StatusOr<std::vector<TargetSummary>> TargetsOf(const std::string& workload_key) override {
    v1::TargetsOfRequest req;
    req.set_workload_key(workload_key);
    v1::TargetsOfResponse resp;
    grpc::ClientContext ctx;
    Prepare(&ctx, true);
    RETURN_IF_ERROR(FromGrpc(options_.address, stub_->TargetsOf(&ctx, req, &resp)));
    std::vector<TargetSummary> out;
    for (const v1::TargetRecords& t : resp.targets()) {
      TargetSummary s;
      s.target = FromProto(t.key(), t.target());
      s.records = t.records();
      out.push_back(std::move(s));
    }
    return out;
  }

  absl::Status Scan(const RecordFilter& filter,
                    const std::function<absl::Status(const TuningRecord&)>& fn) override {
    v1::DownloadRequest req;
    req.set_workload_key(filter.workload_key);
    req.set_target_key(filter.target_key);
    req.set_since_unix_us(filter.since_unix_us);
    req.set_until_unix_us(filter.until_unix_us);
    return Download(req, [&](const LogLine& line) {
      if (line.kind != LogLine::Kind::kRecord) return absl::OkStatus();
      return fn(line.record);
    });
  }

  absl::StatusOr<CommitResult> InsertForeign(const std::vector<ForeignRecord>& records) override {
    CommitResult result;
    for (size_t begin = 0; begin < records.size(); begin += kUploadSlice) {
      v1::UploadRequest req;
      req.set_format_version(kLogFormatVersion);
      size_t end = std::min(records.size(), begin + kUploadSlice);
      for (size_t i = begin; i < end; ++i) req.add_lines(ForeignToLogLine(records[i]));
      ASSIGN_OR_RETURN(v1::UploadResponse resp, Upload(req));
      if (resp.rejected_size() > 0) {
        return absl::InvalidArgumentError("foreign record: " + resp.rejected(0).reason());
      }
      result.inserted += resp.foreign_inserted();
      result.duplicates += resp.foreign_duplicates();
    }
    return result;
  }

  absl::Status ScanForeign(const std::function<absl::Status(const ForeignRecord&)>& fn) override {
    v1::DownloadRequest req;
    req.set_foreign(true);
    return Download(req, [&](const LogLine& line) {
      if (line.kind != LogLine::Kind::kForeign) return absl::OkStatus();
      return fn(line.foreign);
    });
  }

  absl::StatusOr<DatabaseStats> Stats() override {
    v1::StatsResponse resp;
    grpc::ClientContext ctx;
    Prepare(&ctx, true);
    RETURN_IF_ERROR(FromGrpc(options_.address, stub_->Stats(&ctx, v1::StatsRequest(), &resp)));
    DatabaseStats s;
    s.schema_version = resp.schema_version();
    s.records = resp.records();
    s.failed_records = resp.failed_records();
    s.workloads = resp.workloads();
    s.targets = resp.targets();
    s.configs = resp.configs();
    s.foreign_records = resp.foreign_records();
    s.jobs = resp.jobs();
    s.oldest_unix_us = resp.oldest_unix_us();
    s.newest_unix_us = resp.newest_unix_us();
    s.file_bytes = resp.file_bytes();
    s.free_bytes = resp.free_bytes();
    s.tombstones = resp.tombstones();
    s.cost_models = resp.cost_models();
    return s;
  }

  absl::StatusOr<std::vector<TuningRecord>> Records(const std::string&,
                                                    const std::string&) override {
    return NotRemote("reading all records");
  }
  absl::StatusOr<std::vector<WorkloadSummary>> List() override {
    grpc::ClientContext ctx;
    Prepare(&ctx, false);  // a stream: as long as the db is big
    std::unique_ptr<grpc::ClientReader<v1::ListResponse>> reader =
        stub_->List(&ctx, v1::ListRequest());
    std::vector<WorkloadSummary> out;
    v1::ListResponse chunk;
    absl::Status bad;
    while (reader->Read(&chunk)) {
      for (const v1::WorkloadTargetSummary& row : chunk.rows()) {
        WorkloadSummary w;
        w.workload = WorkloadInfo{row.workload().key(), row.workload().op(),
                                  row.workload().task_text(), row.workload().task_json(),
                                  row.workload().flops()};
        w.target = FromProto(row.target_key(), row.target());
        w.records = row.records();
        w.errors = row.errors();
        if (!row.best_record_line().empty()) {
          absl::StatusOr<LogLine> line = ParseLogLine(row.best_record_line());
          if (!line.ok() || line->kind != LogLine::Kind::kRecord) {
            bad = absl::DataLossError("server " + options_.address + " sent a bad record line");
            ctx.TryCancel();
            break;
          }
          w.best = std::move(line->record);
        }
        out.push_back(std::move(w));
      }
      if (!bad.ok()) break;
    }
    grpc::Status finished = reader->Finish();
    RETURN_IF_ERROR(bad);
    RETURN_IF_ERROR(FromGrpc(options_.address, finished));
    return out;
  }
  absl::StatusOr<std::vector<HistoryPoint>> History(const std::string& workload_key,
                                                    const std::string& target_key) override {
    v1::HistoryRequest req;
    req.set_workload_key(workload_key);
    req.set_target_key(target_key);
    v1::HistoryResponse resp;
    grpc::ClientContext ctx;
    Prepare(&ctx, true);
    RETURN_IF_ERROR(FromGrpc(options_.address, stub_->History(&ctx, req, &resp)));
    std::vector<HistoryPoint> out;
    for (const v1::HistoryPoint& p : resp.points()) {
      std::optional<MeasureErrorKind> kind = ParseMeasureErrorKind(p.error_kind());
      if (!kind) {
        return absl::DataLossError("server " + options_.address + " sent an unknown error kind '" +
                                   p.error_kind() + "'");
      }
      HistoryPoint h;
      h.record_id = p.record_id();
      h.start_unix_us = p.start_unix_us();
      h.error = *kind;
      h.median_cost = p.median_cost();
      h.best_so_far = p.best_so_far();
      h.improved = p.improved();
      out.push_back(h);
    }
    return out;
  }
  absl::StatusOr<std::vector<TargetStats>> TargetSummaries() override {
    v1::TargetSummariesResponse resp;
    grpc::ClientContext ctx;
    Prepare(&ctx, true);
    RETURN_IF_ERROR(FromGrpc(options_.address,
                             stub_->TargetSummaries(&ctx, v1::TargetSummariesRequest(), &resp)));
    std::vector<TargetStats> out;
    for (const v1::TargetStats& t : resp.targets()) {
      TargetStats s;
      s.target = FromProto(t.key(), t.target());
      s.workloads = t.workloads();
      s.records = t.records();
      s.errors = t.errors();
      s.first_unix_us = t.first_unix_us();
      s.last_unix_us = t.last_unix_us();
      out.push_back(std::move(s));
    }
    return out;
  }
  absl::StatusOr<std::vector<TemplateVersionSummary>> TemplateVersions(
      const std::string& workload_key, const std::string& target_key) override {
    v1::TemplateVersionsRequest req;
    req.set_workload_key(workload_key);
    req.set_target_key(target_key);
    v1::TemplateVersionsResponse resp;
    grpc::ClientContext ctx;
    Prepare(&ctx, true);
    RETURN_IF_ERROR(FromGrpc(options_.address, stub_->TemplateVersions(&ctx, req, &resp)));
    std::vector<TemplateVersionSummary> out;
    for (const v1::TemplateVersion& v : resp.templates()) {
      out.push_back(TemplateVersionSummary{v.template_name(), v.newest_version(), v.successes()});
    }
    return out;
  }
  absl::StatusOr<CompactResult> Compact(int keep) override {
    v1::CompactRequest req;
    req.set_keep(keep);
    v1::CompactResponse resp;
    grpc::ClientContext ctx;
    Prepare(&ctx, false);  // compaction and VACUUM of a big db take minutes
    RETURN_IF_ERROR(FromGrpc(options_.address, stub_->Compact(&ctx, req, &resp)));
    CompactResult r;
    r.records_before = resp.records_before();
    r.records_deleted = resp.records_deleted();
    r.bytes_before = resp.bytes_before();
    r.bytes_after = resp.bytes_after();
    return r;
  }
  absl::StatusOr<std::optional<std::string>> LoadModel(const std::string&) override {
    return NotRemote("reading cost models");
  }
  absl::Status SaveModel(const std::string&, const std::string&) override {
    return NotRemote("writing cost models");
  }
  absl::Status PutJob(const JobRow&) override { return NotRemote("writing jobs"); }
  absl::StatusOr<JobRow> GetJob(const std::string&) override { return NotRemote("reading jobs"); }
  absl::StatusOr<std::vector<JobRow>> ListJobs() override { return NotRemote("listing jobs"); }

 private:
  void Prepare(grpc::ClientContext* ctx, bool deadline) const {
    if (deadline) {
      ctx->set_deadline(std::chrono::system_clock::now() +
                        std::chrono::milliseconds(options_.timeout_ms));
    }
    if (!options_.token.empty()) ctx->AddMetadata("authorization", "Bearer " + options_.token);
  }

  absl::StatusOr<v1::UploadResponse> Upload(const v1::UploadRequest& req) {
    v1::UploadResponse resp;
    grpc::ClientContext ctx;
    Prepare(&ctx, true);
    RETURN_IF_ERROR(FromGrpc(options_.address, stub_->Upload(&ctx, req, &resp)));
    return resp;
  }

  absl::Status Download(const v1::DownloadRequest& req,
                        const std::function<absl::Status(const LogLine&)>& fn) {
    grpc::ClientContext ctx;
    Prepare(&ctx, /*deadline=*/false);
    std::unique_ptr<grpc::ClientReader<v1::DownloadChunk>> reader = stub_->Download(&ctx, req);
    v1::DownloadChunk chunk;
    absl::Status failed;
    while (failed.ok() && reader->Read(&chunk)) {
      if (chunk.format_version() > kLogFormatVersion) {
        failed = absl::FailedPreconditionError("server " + options_.address +
                                               " sends a newer log format; upgrade tuneforge");
        break;
      }
      for (const std::string& text : chunk.lines()) {
        absl::StatusOr<LogLine> line = ParseLogLine(text);
        if (!line.ok()) {
          failed = absl::DataLossError("server " + options_.address +
                                       " sent a bad line: " + std::string(line.status().message()));
          break;
        }
        failed = fn(*line);
        if (!failed.ok()) break;
      }
    }
    if (!failed.ok()) {
      ctx.TryCancel();
      reader->Finish();
      return failed;
    }
    return FromGrpc(options_.address, reader->Finish());
  }

  const RemoteDatabaseOptions options_;
  std::unique_ptr<v1::DatabaseService::Stub> stub_;
};

}  // namespace

absl::StatusOr<std::unique_ptr<Database>> ConnectRemoteDatabase(
    const RemoteDatabaseOptions& options) {
  RETURN_IF_ERROR(CheckAddress(options.address));
  RETURN_IF_ERROR(CheckTransport(options.address, options.tls_ca, options.insecure));
  ASSIGN_OR_RETURN(std::shared_ptr<grpc::ChannelCredentials> credentials,
                   ClientCredentials(options.tls_ca));
  return std::unique_ptr<Database>(new RemoteDatabase(options, std::move(credentials)));
}

}  // namespace tuneforge
