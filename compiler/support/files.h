// Small file and process helpers shared by the codegen linker and deploy.
#pragma once

#include <string>
#include <vector>

#include "absl/status/statusor.h"

namespace tuneforge {

// A mkdtemp directory (under $TMPDIR or /tmp) that removes itself and its contents.
class TempDir {
 public:
  static absl::StatusOr<TempDir> Create(const std::string& prefix);
  TempDir(TempDir&& other) noexcept : path_(std::move(other.path_)) { other.path_.clear(); }
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;
  ~TempDir();
  const std::string& path() const { return path_; }
  std::string File(const std::string& name) const { return path_ + "/" + name; }

 private:
  explicit TempDir(std::string path) : path_(std::move(path)) {}
  std::string path_;
};

absl::Status WriteFile(const std::string& path, const std::string& bytes);
absl::StatusOr<std::string> ReadFile(const std::string& path);

// Reads a secret (e.g. a token) from a file: surrounding whitespace removed; an empty
// or unreadable file is an error naming the path. Secrets never come from the command
// line, where `ps` shows them.
absl::StatusOr<std::string> ReadSecretFile(const std::string& path);

// Refuses a secret file (tokens, private keys) that its group or others may read or
// write, as ssh does with private keys: "`what` PATH is readable by group or others
// (mode 0644); chmod 600 PATH". A missing file is left to the reader's own error.
absl::Status CheckSecretFileMode(const std::string& path, const std::string& what);

// WriteFile for secrets: the file is created (or truncated) with mode 0600.
absl::Status WriteSecretFile(const std::string& path, const std::string& bytes);

// Runs argv (argv[0] looked up in PATH) with stdout and stderr redirected to
// `log_path`; returns the wait status. Errors only when the program cannot start.
// `input` (when not null) is written to the program's stdin through a pipe, which is
// then closed; else stdin is inherited.
absl::StatusOr<int> RunAndWait(std::vector<std::string> argv, const std::string& log_path,
                               const std::string* input = nullptr);

// Runs argv like RunAndWait and turns a non-zero exit into an Internal error that
// carries the program's output.
absl::Status RunChecked(std::vector<std::string> argv, const std::string& log_path);

// The path of the first of `names` that is an executable in PATH; empty if none is.
std::string FindProgram(const std::vector<std::string>& names);

}  // namespace tuneforge
