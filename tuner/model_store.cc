// ModelStore: trained cost models kept between jobs (directory or db).
#include "tuner/model_store.h"

#include <unistd.h>

#include <atomic>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "compiler/support/hash.h"
#include "costmodel/features.h"

namespace tuneforge {

std::string ModelKey(const std::string& template_name, int template_version,
                     const std::string& target_key) {
  return template_name + "/v" + std::to_string(template_version) + "/f" +
         std::to_string(costmodel::kFeatureVersion) + "/" + target_key;
}

std::string LogModelKey(const std::string& template_name, int template_version,
                        const std::string& target_key) {
  return "log/" + ModelKey(template_name, template_version, target_key);
}

std::string DirectoryModelStore::PathOf(const std::string& key) const {
  // Keys contain '/' and other characters unfit for file names: keep a readable
  // prefix and make the name unique with the key's hash.
  std::string readable;
  for (char c : key) readable += (std::isalnum(static_cast<unsigned char>(c)) ? c : '_');
  if (readable.size() > 80) readable.resize(80);
  return (std::filesystem::path(dir_) / (readable + "-" + HashHex(key) + ".xgbmodel")).string();
}

absl::StatusOr<std::optional<std::string>> DirectoryModelStore::Load(const std::string& key) {
  std::string path = PathOf(key);
  std::error_code ec;
  if (!std::filesystem::exists(path, ec)) return std::optional<std::string>();
  std::ifstream in(path, std::ios::binary);
  if (!in) return absl::UnavailableError("cannot read cost model " + path);
  std::ostringstream s;
  s << in.rdbuf();
  return std::optional<std::string>(s.str());
}

absl::Status DirectoryModelStore::Save(const std::string& key, const std::string& bytes) {
  std::error_code ec;
  std::filesystem::create_directories(dir_, ec);
  if (ec)
    return absl::UnavailableError("cannot create model directory " + dir_ + ": " + ec.message());
  static std::atomic<int> counter{0};
  std::string path = PathOf(key);
  std::string tmp = path + ".tmp" + std::to_string(getpid()) + "-" + std::to_string(counter++);
  {
    std::ofstream out(tmp, std::ios::binary | std::ios::trunc);
    out.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
    if (!out) return absl::UnavailableError("cannot write cost model " + tmp);
  }
  std::filesystem::rename(tmp, path, ec);
  if (ec)
    return absl::UnavailableError("cannot rename cost model to " + path + ": " + ec.message());
  return absl::OkStatus();
}

}  // namespace tuneforge
