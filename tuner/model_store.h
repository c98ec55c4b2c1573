// ModelStore: where the model-based policy keeps its trained cost model between jobs,
// one blob per (template, template version, target). The Database will hold these
// blobs once its interface has a place for them (the db's owner wires that up: a
// DatabaseModelStore implementing this interface); until then DirectoryModelStore
// keeps one file per key in a directory the caller chooses.
#pragma once

#include <optional>
#include <string>

#include "absl/status/statusor.h"

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

// "<template>/v<version>/<target key>": models are only reused on the same target.
std::string ModelKey(const std::string& template_name, int template_version,
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

}  // namespace tuneforge
