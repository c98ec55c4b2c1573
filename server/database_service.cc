// DatabaseService: the shared tuning log's gRPC handlers.
#include "server/database_service.h"

#include <string>
#include <vector>

#include "db/tuning_log_format.h"
#include "server/grpc_status.h"
#include "tuner/record_identity.h"

namespace tuneforge {

namespace {

void ToProto(const TargetInfo& t, v1::Target* out) {
  out->set_triple(t.triple);
  out->set_cpu(t.cpu);
  out->set_features(t.features);
  out->set_num_threads(t.num_threads);
  out->set_device_key(t.device_key);
}

}  // namespace

grpc::Status DatabaseServiceImpl::TopK(grpc::ServerContext* ctx, const v1::TopKRequest* req,
                                       v1::TopKResponse* resp) {
  if (grpc::Status s = Authorize(ctx); !s.ok()) return s;
  absl::StatusOr<std::vector<RankedConfig>> top =
      db_->TopK(req->workload_key(), req->target_key(), req->k());
  if (!top.ok()) return ToGrpc(top.status());
  for (const RankedConfig& c : *top) {
    v1::RankedConfig* out = resp->add_configs();
    out->set_template_name(c.template_name);
    out->set_template_version(c.template_version);
    out->set_config_json(c.config_json);
    out->set_median_cost(c.median_cost);
    out->set_measurements(c.measurements);
    out->set_samples(c.samples);
    out->set_record_line(RecordToLogLine(c.record));
  }
  return grpc::Status::OK;
}

grpc::Status DatabaseServiceImpl::TargetsOf(grpc::ServerContext* ctx,
                                            const v1::TargetsOfRequest* req,
                                            v1::TargetsOfResponse* resp) {
  if (grpc::Status s = Authorize(ctx); !s.ok()) return s;
  absl::StatusOr<std::vector<TargetSummary>> targets = db_->TargetsOf(req->workload_key());
  if (!targets.ok()) return ToGrpc(targets.status());
  for (const TargetSummary& t : *targets) {
    v1::TargetRecords* out = resp->add_targets();
    out->set_key(t.target.key);
    ToProto(t.target, out->mutable_target());
    out->set_records(t.records);
  }
  return grpc::Status::OK;
}

grpc::Status DatabaseServiceImpl::Upload(grpc::ServerContext* ctx, const v1::UploadRequest* req,
                                         v1::UploadResponse* resp) {
  DatabaseCaller caller;
  if (grpc::Status s = Authorize(ctx, DatabaseAccess::kWrite, &caller); !s.ok()) return s;
  if (req->format_version() < 1 || req->format_version() > kLogFormatVersion) {
    return grpc::Status(grpc::StatusCode::FAILED_PRECONDITION,
                        "upload is log format version " + std::to_string(req->format_version()) +
                            "; this server reads version " + std::to_string(kLogFormatVersion));
  }
  if (req->lines_size() > kMaxUploadLines) {
    return grpc::Status(grpc::StatusCode::INVALID_ARGUMENT,
                        "at most " + std::to_string(kMaxUploadLines) + " lines per upload");
  }
  std::vector<std::string> lines(req->lines().begin(), req->lines().end());
  ImportReport report;
  // Every uploaded record says who uploaded it; only admins' uploads are ranked (a
  // user's are re-measured by the farm before they can be best).
  const Uploader uploader{caller.name, caller.admin};
  absl::Status stored = StoreLogLines(*db_, lines, 1, &report, &uploader, CheckRecordIdentity);
  if (!stored.ok()) return ToGrpc(stored);
  resp->set_inserted(report.inserted);
  resp->set_duplicates(report.duplicates);
  resp->set_compacted(report.compacted);
  resp->set_foreign_inserted(report.foreign_inserted);
  resp->set_foreign_duplicates(report.foreign_duplicates);
  for (const auto& [line, reason] : report.rejected) {
    v1::RejectedLine* r = resp->add_rejected();
    r->set_line(line);
    r->set_reason(reason);
  }
  return grpc::Status::OK;
}

grpc::Status DatabaseServiceImpl::Download(grpc::ServerContext* ctx, const v1::DownloadRequest* req,
                                           grpc::ServerWriter<v1::DownloadChunk>* writer) {
  if (grpc::Status s = Authorize(ctx); !s.ok()) return s;
  v1::DownloadChunk chunk;
  chunk.set_format_version(kLogFormatVersion);
  auto flush = [&]() -> absl::Status {
    if (ctx->IsCancelled() || !writer->Write(chunk)) {
      return absl::CancelledError("client went away");
    }
    chunk.clear_lines();
    return absl::OkStatus();
  };
  absl::Status scanned;
  if (req->foreign()) {
    scanned = db_->ScanForeign([&](const ForeignRecord& f) {
      chunk.add_lines(ForeignToLogLine(f));
      return chunk.lines_size() >= kChunkLines ? flush() : absl::OkStatus();
    });
  } else {
    RecordFilter filter;
    filter.workload_key = req->workload_key();
    filter.target_key = req->target_key();
    filter.since_unix_us = req->since_unix_us();
    filter.until_unix_us = req->until_unix_us();
    scanned = db_->Scan(filter, [&](const TuningRecord& r) {
      chunk.add_lines(RecordToLogLine(r));
      return chunk.lines_size() >= kChunkLines ? flush() : absl::OkStatus();
    });
  }
  if (!scanned.ok()) return ToGrpc(scanned);
  if (chunk.lines_size() > 0) {
    if (absl::Status s = flush(); !s.ok()) return ToGrpc(s);
  }
  return grpc::Status::OK;
}

grpc::Status DatabaseServiceImpl::Stats(grpc::ServerContext* ctx, const v1::StatsRequest*,
                                        v1::StatsResponse* resp) {
  if (grpc::Status s = Authorize(ctx); !s.ok()) return s;
  absl::StatusOr<DatabaseStats> s = db_->Stats();
  if (!s.ok()) return ToGrpc(s.status());
  resp->set_schema_version(s->schema_version);
  resp->set_records(s->records);
  resp->set_failed_records(s->failed_records);
  resp->set_workloads(s->workloads);
  resp->set_targets(s->targets);
  resp->set_configs(s->configs);
  resp->set_foreign_records(s->foreign_records);
  resp->set_jobs(s->jobs);
  resp->set_oldest_unix_us(s->oldest_unix_us);
  resp->set_newest_unix_us(s->newest_unix_us);
  resp->set_file_bytes(s->file_bytes);
  resp->set_free_bytes(s->free_bytes);
  resp->set_tombstones(s->tombstones);
  resp->set_cost_models(s->cost_models);
  return grpc::Status::OK;
}

grpc::Status DatabaseServiceImpl::List(grpc::ServerContext* ctx, const v1::ListRequest*,
                                       grpc::ServerWriter<v1::ListResponse>* writer) {
  if (grpc::Status s = Authorize(ctx); !s.ok()) return s;
  absl::StatusOr<std::vector<WorkloadSummary>> rows = db_->List();
  if (!rows.ok()) return ToGrpc(rows.status());
  v1::ListResponse chunk;
  for (size_t i = 0; i < rows->size(); ++i) {
    const WorkloadSummary& w = (*rows)[i];
    v1::WorkloadTargetSummary* out = chunk.add_rows();
    out->mutable_workload()->set_key(w.workload.key);
    out->mutable_workload()->set_op(w.workload.op);
    out->mutable_workload()->set_task_text(w.workload.task_text);
    out->mutable_workload()->set_task_json(w.workload.task_json);
    out->mutable_workload()->set_flops(w.workload.flops);
    out->set_target_key(w.target.key);
    ToProto(w.target, out->mutable_target());
    out->set_records(w.records);
    out->set_errors(w.errors);
    if (w.best) out->set_best_record_line(RecordToLogLine(*w.best));
    if (chunk.rows_size() >= kChunkLines || i + 1 == rows->size()) {
      if (ctx->IsCancelled() || !writer->Write(chunk)) {
        return grpc::Status(grpc::StatusCode::CANCELLED, "client went away");
      }
      chunk.clear_rows();
    }
  }
  return grpc::Status::OK;
}

grpc::Status DatabaseServiceImpl::History(grpc::ServerContext* ctx, const v1::HistoryRequest* req,
                                          v1::HistoryResponse* resp) {
  if (grpc::Status s = Authorize(ctx); !s.ok()) return s;
  absl::StatusOr<std::vector<HistoryPoint>> points =
      db_->History(req->workload_key(), req->target_key());
  if (!points.ok()) return ToGrpc(points.status());
  for (const HistoryPoint& p : *points) {
    v1::HistoryPoint* out = resp->add_points();
    out->set_record_id(p.record_id);
    out->set_start_unix_us(p.start_unix_us);
    out->set_error_kind(MeasureErrorKindName(p.error));
    out->set_median_cost(p.median_cost);
    out->set_best_so_far(p.best_so_far);
    out->set_improved(p.improved);
  }
  return grpc::Status::OK;
}

grpc::Status DatabaseServiceImpl::TargetSummaries(grpc::ServerContext* ctx,
                                                  const v1::TargetSummariesRequest*,
                                                  v1::TargetSummariesResponse* resp) {
  if (grpc::Status s = Authorize(ctx); !s.ok()) return s;
  absl::StatusOr<std::vector<TargetStats>> targets = db_->TargetSummaries();
  if (!targets.ok()) return ToGrpc(targets.status());
  for (const TargetStats& t : *targets) {
    v1::TargetStats* out = resp->add_targets();
    out->set_key(t.target.key);
    ToProto(t.target, out->mutable_target());
    out->set_workloads(t.workloads);
    out->set_records(t.records);
    out->set_errors(t.errors);
    out->set_first_unix_us(t.first_unix_us);
    out->set_last_unix_us(t.last_unix_us);
  }
  return grpc::Status::OK;
}

grpc::Status DatabaseServiceImpl::TemplateVersions(grpc::ServerContext* ctx,
                                                   const v1::TemplateVersionsRequest* req,
                                                   v1::TemplateVersionsResponse* resp) {
  if (grpc::Status s = Authorize(ctx); !s.ok()) return s;
  absl::StatusOr<std::vector<TemplateVersionSummary>> versions =
      db_->TemplateVersions(req->workload_key(), req->target_key());
  if (!versions.ok()) return ToGrpc(versions.status());
  for (const TemplateVersionSummary& v : *versions) {
    v1::TemplateVersion* out = resp->add_templates();
    out->set_template_name(v.template_name);
    out->set_newest_version(v.newest_version);
    out->set_successes(v.successes);
  }
  return grpc::Status::OK;
}

grpc::Status DatabaseServiceImpl::Compact(grpc::ServerContext* ctx, const v1::CompactRequest* req,
                                          v1::CompactResponse* resp) {
  if (grpc::Status s = Authorize(ctx, DatabaseAccess::kDelete); !s.ok()) return s;
  absl::StatusOr<CompactResult> r = db_->Compact(req->keep());  // checks keep >= 1
  if (!r.ok()) return ToGrpc(r.status());
  resp->set_records_before(r->records_before);
  resp->set_records_deleted(r->records_deleted);
  resp->set_bytes_before(r->bytes_before);
  resp->set_bytes_after(r->bytes_after);
  return grpc::Status::OK;
}

}  // namespace tuneforge
