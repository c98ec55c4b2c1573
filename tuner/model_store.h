// ModelStore: where the model-based policy keeps its trained cost model between jobs,
// one blob per (template, template version, target). DatabaseModelStore keeps them in
// the tuning-log Database next to the records they were trained on (what the server
// and the embedded default use); DirectoryModelStore keeps one file per key in a
// directory the caller chooses.
#pragma once

#include <optional>
#include <string>

#include "absl/status/statusor.h"
#include "db/database.h"

namespace tuneforge {

// Implementations must be thread-safe for different keys.
class ModelStore {
 public:
  virtual ~ModelStore() = default;
  // The bytes saved under `key`, or nullopt when there are none.
  virtual absl::StatusOr<std::optional<std::string>> Load(const std::string& key) = 0;
  // Replaces what is stored under `key`.
  virtual absl::Status Save(const std::string& key, const std::string& bytes) = 0;
};

// "<template>/v<version>/f<feature version>/<target key>": models are only reused on
// the same target and with the same feature layout (costmodel::kFeatureVersion).
std::string ModelKey(const std::string& template_name, int template_version,
                     const std::string& target_key);

// "log/<ModelKey>": the model pre-trained on every record of
// the template and target in the shared log (tuner/log_model.h).
std::string LogModelKey(const std::string& template_name, int template_version,
                        const std::string& target_key);

// One file per key in `dir` (created on first Save), written to a temporary file and
// renamed, so a reader never sees half a model. Thread-safe.
class DirectoryModelStore : public ModelStore {
 public:
  explicit DirectoryModelStore(std::string dir) : dir_(std::move(dir)) {}
  absl::StatusOr<std::optional<std::string>> Load(const std::string& key) override;
  absl::Status Save(const std::string& key, const std::string& bytes) override;

 private:
  std::string PathOf(const std::string& key) const;
  std::string dir_;
};

// Models as blobs in a Database (Database::LoadModel / SaveModel), so they travel with
// the db and a second job on the same db starts from the model the first one trained.
// Thread-safe (Database is); `db` is not owned and must outlive the store.
class DatabaseModelStore : public ModelStore {
 public:
  explicit DatabaseModelStore(Database* db) : db_(db) {}
  absl::StatusOr<std::optional<std::string>> Load(const std::string& key) override {
    return db_->LoadModel(key);
  }
  absl::Status Save(const std::string& key, const std::string& bytes) override {
    return db_->SaveModel(key, bytes);
  }

 private:
  Database* db_;
};

}  // namespace tuneforge
