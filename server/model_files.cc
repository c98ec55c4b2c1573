// ModelFiles: uploaded ONNX models by content hash, checked by the importer.
#include "server/model_files.h"

#include <openssl/evp.h>

#include <filesystem>

#include "absl/strings/str_cat.h"
#include "compiler/frontend/onnx_reader.h"
#include "compiler/graph/graph.h"
#include "compiler/graph/tasks.h"
#include "compiler/support/files.h"
#include "compiler/support/hash.h"
#include "compiler/support/status.h"

namespace tuneforge {
namespace {

// The importer's verdict on a model's bytes: its task table, or what it refused.
absl::StatusOr<UploadedModel> Import(const std::string& bytes, const std::string& name,
                                     const std::vector<std::string>& dims, const std::vector<std::string>& shapes) {
  frontend::DimBindings bindings;
  for (const std::string& d : dims) RETURN_IF_ERROR(frontend::ParseDimBinding(d, &bindings));
  for (const std::string& s : shapes) RETURN_IF_ERROR(frontend::ParseShapeBinding(s, &bindings));
  ASSIGN_OR_RETURN(frontend::OnnxModel model, frontend::ParseOnnxModel(bytes, name));
  RETURN_IF_ERROR(frontend::BindDimensions(&model, bindings));
  RETURN_IF_ERROR(frontend::CheckSupported(model));
  ASSIGN_OR_RETURN(graph::Graph g, graph::ImportOnnx(model));
  ASSIGN_OR_RETURN(graph::TaskTable table, graph::ExtractTasks(g));
  if (table.tasks.empty()) {
    return absl::InvalidArgumentError(absl::StrCat(name, " has no tunable task (", table.leftovers.size(),
                                                   " operators, none a conv, matmul or dense)"));
  }
  UploadedModel out;
  out.bytes = static_cast<int64_t>(bytes.size());
  out.leftovers = static_cast<int>(table.leftovers.size());
  for (const graph::ExtractedTask& t : table.tasks) {
    v1::WeightedTask w;
    w.set_task(t.task);
    w.set_weight(t.weight);
    out.tasks.push_back(w);
  }
  out.graph = std::move(g);
  return out;
}

}  // namespace

std::string Sha256Hex(const std::string& bytes) {
  unsigned char digest[EVP_MAX_MD_SIZE];
  unsigned int n = 0;
  EVP_Digest(bytes.data(), bytes.size(), digest, &n, EVP_sha256(), nullptr);
  static const char* kHex = "0123456789abcdef";
  std::string out;
  for (unsigned int i = 0; i < n; ++i) {
    out.push_back(kHex[digest[i] >> 4]);
    out.push_back(kHex[digest[i] & 15]);
  }
  return out;
}

absl::StatusOr<UploadedModel> ModelFiles::Put(const std::string& name, const std::string& bytes,
                                              const std::vector<std::string>& dims,
                                              const std::vector<std::string>& shapes) {
  if (static_cast<int64_t>(bytes.size()) > max_bytes_) {
    return absl::ResourceExhaustedError(absl::StrCat(name, ": ", bytes.size(), " bytes, more than this server's limit of ",
                                                     max_bytes_, " (tuneforge-server --max-model-bytes)"));
  }
  ASSIGN_OR_RETURN(UploadedModel model, Import(bytes, name, dims, shapes));
  model.hash = Sha256Hex(bytes);
  const std::string path = Path(model.hash);
  if (!std::filesystem::exists(path)) {
    std::error_code ec;
    std::filesystem::create_directories(dir_, ec);
    if (ec) return absl::InternalError("cannot make the models folder " + dir_ + ": " + ec.message());
    const std::string temp = path + ".part-" + RandomToken();
    RETURN_IF_ERROR(WriteFile(temp, bytes));
    std::filesystem::rename(temp, path, ec);
    if (ec) {
      std::filesystem::remove(temp);
      return absl::InternalError("cannot store the model as " + path + ": " + ec.message());
    }
  }
  return model;
}

absl::StatusOr<UploadedModel> ModelFiles::Get(const std::string& hash, const std::vector<std::string>& dims,
                                              const std::vector<std::string>& shapes) const {
  if (hash.size() != 64 || hash.find_first_not_of("0123456789abcdef") != std::string::npos) {
    return absl::InvalidArgumentError("model_hash must be the 64 hex digits UploadModel returned, got '" + hash + "'");
  }
  absl::StatusOr<std::string> bytes = ReadFile(Path(hash));
  if (!bytes.ok()) return absl::NotFoundError("no uploaded model " + hash + " on this server (upload it first)");
  ASSIGN_OR_RETURN(UploadedModel model, Import(*bytes, hash + ".onnx", dims, shapes));
  model.hash = hash;
  return model;
}

}  // namespace tuneforge
