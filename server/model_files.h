// ModelFiles: the ONNX models uploaded to the server (TuningService.UploadModel), one
// file per model named by the SHA-256 of its bytes, in a folder beside the db. Each is
// checked by the same importer as `tuneforge model inspect` before it is kept, and a
// job that names one (JobSpec.model_hash) tunes its task table.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "compiler/graph/graph.h"
#include "tuneforge/v1/tuning.pb.h"

namespace tuneforge {

struct UploadedModel {
  std::string hash;                        // SHA-256 of the bytes, 64 hex digits
  int64_t bytes = 0;
  std::vector<v1::WeightedTask> tasks;     // the task table: task and occurrences
  int leftovers = 0;                       // operators that are no task
  graph::Graph graph;                      // the imported graph (what the server times)
};

// Thread-safe (files are written under a temporary name and renamed).
class ModelFiles {
 public:
  // `dir` is created when the first model is stored; `max_bytes` bounds one model.
  ModelFiles(std::string dir, int64_t max_bytes) : dir_(std::move(dir)), max_bytes_(max_bytes) {}

  // Imports the model with these dimension bindings (NAME=N, INPUT=D0,D1,...) and keeps
  // it when it imports: InvalidArgument naming what the importer refused (the bytes are
  // then not kept), ResourceExhausted over max_bytes. Storing the same bytes again is a
  // no-op. `name` is the client's file name, for messages.
  absl::StatusOr<UploadedModel> Put(const std::string& name, const std::string& bytes,
                                    const std::vector<std::string>& dims, const std::vector<std::string>& shapes);
  // The task table of a stored model with these bindings; NotFound for an unknown hash.
  absl::StatusOr<UploadedModel> Get(const std::string& hash, const std::vector<std::string>& dims,
                                    const std::vector<std::string>& shapes) const;

  int64_t max_bytes() const { return max_bytes_; }
  const std::string& dir() const { return dir_; }

 private:
  std::string Path(const std::string& hash) const { return dir_ + "/" + hash + ".onnx"; }

  const std::string dir_;
  const int64_t max_bytes_;
};

// 64 lowercase hex digits.
std::string Sha256Hex(const std::string& bytes);

}  // namespace tuneforge
