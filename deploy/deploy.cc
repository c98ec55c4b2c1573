// `deploy`: the db's best schedules built into a kernel library with provenance.
#include "deploy/deploy.h"

#include <cctype>
#include <filesystem>
#include <fstream>
#include <map>
#include <set>
#include <sstream>

#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "compiler/codegen/build.h"
#include "compiler/support/files.h"
#include "compiler/support/log.h"
#include "compiler/support/status.h"
#include "compiler/task/task.h"
#include "compiler/templates/template.h"
#include "db/database.h"
#include "deploy/library_build.h"
#include "nlohmann/json.hpp"

namespace tuneforge {
namespace {

Target ToTarget(const TargetInfo& t) {
  return Target{t.triple, t.cpu, t.features, t.num_threads, t.device_key};
}

// What one task becomes in the library.
struct Planned {
  TuningTask task;
  std::string function;
  Config config;
  DeployedKernel kernel;
  std::string entry_symbol;
  std::vector<ir::BufferParam> buffers;  // the entry point's, in order
  bool prepack = false, unpack = false;  // <entry>_prepack / <entry>_unpack exist
};

// The C parameter name of a buffer ("W.packed" would not be one).
std::string CName(const std::string& buffer) {
  std::string out;
  for (char c : buffer) out += std::isalnum(static_cast<unsigned char>(c)) ? c : '_';
  return out;
}

// The C element type of a buffer.
std::string CType(const ir::BufferParam& b) {
  switch (b.dtype) {
    case ir::DType::kUInt8:
      return "uint8_t";
    case ir::DType::kInt8:
      return "int8_t";
    case ir::DType::kInt32:
      return "int32_t";
    default:
      return "float";
  }
}

// "const float* X, const float* W, float* Y": the caller's buffers, in entry order.
std::string TypedParams(const Planned& p) {
  std::vector<std::string> out;
  for (const ir::BufferParam& b : p.buffers) {
    if (b.is_internal) continue;
    out.push_back((b.is_output ? "" : "const ") + CType(b) + "* " + CName(b.name));
  }
  return absl::StrJoin(out, ", ");
}

// "mylib_matmul_512x512x512", "mylib_qmatmul_u8s8u8_64x64x64x128"
std::string FunctionName(const std::string& lib, const TuningTask& task) {
  std::vector<std::string> values;
  for (const auto& [k, v] : task.params()) values.push_back(std::to_string(v));
  // The dtype where the op has several: qmatmul's s32, f32 and u8 outputs.
  const std::string dtype = task.dtype() == "float32" ? "" : task.dtype() + "_";
  return lib + "_" + task.op() + "_" + dtype + absl::StrJoin(values, "x");
}

std::string OpDoc(const TuningTask& task) {
  const std::string& op = task.op();
  if (op == "matmul") return "C[M][N] = A[M][K] * B[K][N]; float32, row-major, dense arrays";
  if (op == "batch_matmul") {
    return "C[b][M][N] = A[b][M][K] * B[b][K][N] for b < B; float32, row-major, the B\n"
           "// matrices of each operand stored one after the other";
  }
  if (op == "dense") {
    return std::string("Y[M][N] = X[M][K] * W[K][N]") + (task.Param("bias") ? " + bias[N]" : "") +
           (task.Param("relu") ? ", then max(0, .)" : "") +
           "; float32, row-major. W is packed into\n"
           "// the kernel's panel layout inside every call (a scratch buffer)";
  }
  if (op == "conv2d") {
    if (task.Param("groups") > 1) {
      return "O[N][K][OH][OW] = sum over c < C/G, r, s of I[N][g*C/G + c][H][W] (zero-padded by pad,\n"
             "// stride) * F[K][C/G][R][S], g = k / (K/G) the output channel's group; float32, NCHW /\n"
             "// OIHW. The blocked layouts the kernel computes in are made (and the output\n"
             "// unblocked) inside every call, in scratch buffers";
    }
    return "O[N][K][OH][OW] = sum over c, r, s of I[N][C][H][W] (zero-padded by pad, stride)\n"
           "// * F[K][C][R][S]; float32, NCHW / OIHW. The blocked layouts the kernel computes\n"
           "// in are made (and the output unblocked) inside every call, in scratch buffers";
  }
  if (op == "depthwise_conv2d") {
    return "O[N][C][OH][OW] = sum over r, s of I[N][C][H][W] (zero-padded by pad, stride)\n"
           "// * F[C][R][S]; float32, NCHW. The blocked layouts the kernel computes in are made\n"
           "// (and the output unblocked) inside every call, in scratch buffers";
  }
  if (op == "qmatmul" || op == "qconv2d" || op == "qdepthwise_conv2d") {
    const bool conv = op != "qmatmul", depthwise = op == "qdepthwise_conv2d";
    const std::string zero = std::to_string(task.Param("a_zero"));
    std::string doc =
        depthwise ? "acc[N][C][OH][OW] = sum over r, s of (I[N][C][H][W] - " + zero + ") * F[C][R][S]" +
                        (task.Param("bias") ? " + bias[C]" : "") + "\n// in int32 (padded by pad with " + zero +
                        ", stride); I uint8 NCHW, F int8.\n// O = "
        : conv ? "acc[N][K][OH][OW] = sum over c, r, s of (I[N][C][H][W] - " + zero +
                   ") * F[K][C][R][S]" + (task.Param("bias") ? " + bias[K]" : "") +
                   "\n// in int32 (padded by pad with " + zero + ", stride); I uint8 NCHW, F int8 OIHW.\n// O = "
             : "acc[M][N] = sum over k of (A[M][K] - " + zero + ") * B[K][N]" +
                   (task.Param("bias") ? " + bias[N]" : "") + " in int32; A uint8, B int8, row-major.\n// C = ";
    const std::string scale = task.Param("per_channel") ? (conv ? "scale[k]" : "scale[N]") : "scale[0]";
    const std::string out = task.QuantizedOutput();
    if (out == "s32") doc += "acc (int32)";
    if (out == "f32") doc += "float(acc) * " + scale + " (float32)";
    if (out == "u8") {
      doc += "uint8(round_half_even(float(acc) * " + scale + ") + " + std::to_string(task.Param("out_zero")) +
             ", saturated)";
    }
    return doc + (conv ? ". The NHWC layouts the kernel computes in are made (and the\n"
                         "// output unblocked) inside every call, in scratch buffers"
                       : ". B is packed (and its column sums taken)\n// inside every call, in scratch buffers");
  }
  return op;
}

// Picks the single target every kernel of the library is built for.
absl::StatusOr<TargetInfo> ChooseTarget(Database* db, const std::vector<TuningTask>& tasks,
                                        const DeployOptions& o) {
  ASSIGN_OR_RETURN(std::optional<TargetInfo> found,
                   RecordTarget(db, tasks, o.device_key, o.target_key, o.target_name));
  if (found) return *found;
  if (!o.fallback_default) {
    return absl::NotFoundError("no records for any of the tasks on the requested target in " +
                               o.db_path + " (tune them first, or use --fallback default)");
  }
  // No record anywhere: the fallback builds for this machine.
  Target host = DetectHostTarget(o.device_key.empty() ? "local" : o.device_key);
  return TargetInfo{host.Key(), host.triple, host.cpu, host.features, host.num_threads,
                    host.device_key};
}

std::string GenerateHeader(const DeployOptions& o, const TargetInfo& target,
                           const std::vector<Planned>& plan) {
  const std::string& n = o.name;
  std::ostringstream h;
  h << "// " << n << ".h: generated by tuneforge " << o.tuneforge_version
    << " (tuneforge deploy). Do not edit.\n"
    << "// Target: " << deploy::CommentText(target.key) << "\n"
    << "//   " << deploy::CommentText(target.triple) << " -mcpu=" << deploy::CommentText(target.cpu) << ", "
    << target.num_threads
    << " threads\n"
    << "// Every function returns 0 on success. Functions are thread-safe; parallel kernels\n"
    << "// share one internal thread pool and run one at a time.\n"
    << "#ifndef " << n << "_H_\n#define " << n << "_H_\n\n#include <stdint.h>\n\n"
    << "#ifdef __cplusplus\nextern \"C\" {\n#endif\n\n";
  for (const Planned& p : plan) {
    h << "// " << deploy::CommentText(p.kernel.task) << (p.kernel.fallback ? "  (UNTUNED fallback schedule)" : "")
      << "\n// ";
    // OpDoc's lines after the first start with "// " themselves.
    std::vector<std::string> doc_lines;
    for (absl::string_view line : absl::StrSplit(OpDoc(p.task), '\n')) doc_lines.push_back(deploy::CommentText(std::string(line)));
    h << absl::StrJoin(doc_lines, "\n") << "\n";
    h << "int " << p.function << "(" << TypedParams(p) << ");\n\n";
  }
  h << "// Generic access: every kernel with its task and a void** entry taking the\n"
    << "// buffers in the order of its typed function's parameters.\n"
    << "// A function returns -1 when it cannot allocate its scratch buffers.\n"
    << "typedef struct {\n  const char* function;\n  const char* op;\n  const char* task;\n"
    << "  int num_params;\n  const int64_t* params;  // the task's parameters in canonical order\n"
    << "  int (*run)(void** buffers);\n"
    << "  const char* const* param_names;  // names of `params`, e.g. \"M\", \"N\", \"K\"\n} "
    << n << "_kernel_info;\n\n"
    << "int " << n << "_num_kernels(void);\n"
    << "const " << n << "_kernel_info* " << n << "_kernel(int index);\n\n"
    << "// JSON: tuneforge version, target, and per kernel its task, config, record id and\n"
    << "// the GFLOP/s measured when it was tuned.\n"
    << "const char* " << n << "_provenance(void);\n\n"
    << "#ifdef __cplusplus\n}  // extern \"C\"\n#endif\n\n#endif  // " << n << "_H_\n";
  return h.str();
}

std::string GenerateGlue(const DeployOptions& o, const std::string& provenance,
                         const std::vector<Planned>& plan) {
  const std::string& n = o.name;
  std::ostringstream c;
  c << "// Generated by tuneforge deploy. Do not edit.\n#include \"" << n << ".h\"\n\n"
    << "#include <stdlib.h>\n\n";
  for (const Planned& p : plan) {
    c << "extern \"C\" int32_t " << p.entry_symbol << "(void**);\n";
    if (p.prepack) c << "extern \"C\" int32_t " << p.entry_symbol << "_prepack(void**);\n";
    if (p.unpack) c << "extern \"C\" int32_t " << p.entry_symbol << "_unpack(void**);\n";
  }
  c << "\n";
  for (size_t i = 0; i < plan.size(); ++i) {
    const Planned& p = plan[i];
    // The typed function: the caller's buffers in entry order; scratch buffers for the
    // kernel's internal layouts (64-byte aligned, as measured), then prepack, the
    // kernel, unpack.
    c << "extern \"C\" int " << p.function << "(" << TypedParams(p) << ") {\n"
      << "  void* b[" << p.buffers.size() << "] = {};\n";
    std::vector<size_t> internal;
    for (size_t j = 0; j < p.buffers.size(); ++j) {
      const ir::BufferParam& buf = p.buffers[j];
      if (buf.is_internal) {
        internal.push_back(j);
        const int64_t bytes = (buf.NumElements() * ir::DTypeBytes(buf.dtype) + 63) / 64 * 64;
        c << "  b[" << j << "] = aligned_alloc(64, " << bytes << ");  // " << buf.name << "\n";
      } else {
        c << "  b[" << j << "] = const_cast<" << CType(buf) << "*>(" << CName(buf.name) << ");\n";
      }
    }
    c << "  int rc = 0;\n";
    for (size_t j : internal) c << "  if (!b[" << j << "]) rc = -1;\n";
    if (p.prepack) c << "  if (rc == 0) rc = " << p.entry_symbol << "_prepack(b);\n";
    c << "  if (rc == 0) rc = " << p.entry_symbol << "(b);\n";
    if (p.unpack) c << "  if (rc == 0) rc = " << p.entry_symbol << "_unpack(b);\n";
    for (size_t j : internal) c << "  free(b[" << j << "]);\n";
    c << "  return rc;\n}\n";
    // The generic entry: the caller's buffers only, in the same order.
    std::vector<std::string> args;
    int k = 0;
    for (const ir::BufferParam& buf : p.buffers) {
      if (buf.is_internal) continue;
      args.push_back("(" + std::string(buf.is_output ? "" : "const ") + CType(buf) + "*)buffers[" +
                     std::to_string(k++) + "]");
    }
    c << "static int run_" << i << "(void** buffers) { return " << p.function << "("
      << absl::StrJoin(args, ", ") << "); }\n";
    std::vector<std::string> values, names;
    for (const auto& [name, v] : p.task.params()) {
      values.push_back(std::to_string(v));
      names.push_back("\"" + name + "\"");
    }
    c << "static const int64_t params_" << i << "[] = {" << absl::StrJoin(values, ", ") << "};\n"
      << "static const char* const param_names_" << i << "[] = {" << absl::StrJoin(names, ", ")
      << "};\n\n";
  }
  c << "static const " << n << "_kernel_info kKernels[] = {\n";
  for (size_t i = 0; i < plan.size(); ++i) {
    const Planned& p = plan[i];
    c << "  {\"" << p.function << "\", \"" << p.task.op() << "\", " << deploy::CStringLiteral(p.kernel.task) << ", "
      << p.task.params().size() << ", params_" << i << ", run_" << i << ", param_names_" << i
      << "},\n";
  }
  c << "};\n\n"
    << "extern \"C\" int " << n << "_num_kernels(void) { return " << plan.size() << "; }\n"
    << "extern \"C\" const " << n << "_kernel_info* " << n << "_kernel(int index) {\n"
    << "  return index >= 0 && index < " << plan.size() << " ? &kKernels[index] : nullptr;\n}\n"
    << deploy::ProvenanceDefinition(n + "_provenance", provenance);
  return c.str();
}

}  // namespace

absl::StatusOr<DeployReport> Deploy(const DeployOptions& o) {
  if (!deploy::IsCIdentifier(o.name)) {
    return absl::InvalidArgumentError("library name '" + o.name +
                                      "' must be a C identifier (letters, digits, _)");
  }
  if (o.tasks.empty()) return absl::InvalidArgumentError("no task to deploy");
  if (o.out_dir.empty()) return absl::InvalidArgumentError("missing --out directory");
  std::filesystem::path out(o.out_dir);
  std::filesystem::path parent = std::filesystem::absolute(out).parent_path();
  if (!std::filesystem::is_directory(parent)) {
    return absl::NotFoundError("directory " + parent.string() + " (parent of --out) does not exist");
  }

  std::vector<TuningTask> tasks;
  std::set<std::string> seen;
  for (const std::string& text : o.tasks) {
    ASSIGN_OR_RETURN(TuningTask task, ParseTask(text));
    if (seen.insert(task.CanonicalText()).second) tasks.push_back(task);
  }

  DatabaseOptions db_options;
  db_options.path = o.db_path;
  db_options.create_if_missing = false;
  db_options.read_only = true;
  ASSIGN_OR_RETURN(std::unique_ptr<Database> db, Database::Open(db_options));
  ASSIGN_OR_RETURN(TargetInfo target_info, ChooseTarget(db.get(), tasks, o));
  Target target = ToTarget(target_info);

  DeployReport report;
  report.target_key = target_info.key;
  std::vector<Planned> plan;
  std::vector<std::string> missing;
  for (const TuningTask& task : tasks) {
    ASSIGN_OR_RETURN(const Template* tmpl, FindTemplate(task));
    Planned p{task, FunctionName(o.name, task), Config(), DeployedKernel(), "", {}, false, false};
    p.kernel.function = p.function;
    p.kernel.task = task.CanonicalText();
    absl::StatusOr<TuningRecord> best = db->Best(task.WorkloadKey(), target_info.key);
    if (best.ok()) {
      // A record of an older version of the same template still deploys when its
      // config (with new knobs at their defaults) is valid today: it then compiles to
      // the schedule that was measured. Anything else must be re-tuned.
      ConfigSpace space = tmpl->Space(task, target);
      absl::StatusOr<Config> config = Config::FromJson(best->config_json);
      absl::Status valid = config.ok() ? space.Check(space.WithDefaults(*config)) : config.status();
      if (best->template_name != tmpl->name() || best->template_version > tmpl->version() ||
          !valid.ok()) {
        return absl::FailedPreconditionError(
            "best record of " + task.CanonicalText() + " was made with template " +
            best->template_name + " v" + std::to_string(best->template_version) +
            "; this build has " + tmpl->name() + " v" + std::to_string(tmpl->version()) +
            " and cannot rebuild it (re-tune the task)");
      }
      p.config = space.WithDefaults(*config);
      p.kernel.record_id = best->id;
      p.kernel.gflops = task.Flops() / best->result.MedianCost() / 1e9;
    } else if (absl::IsNotFound(best.status())) {
      if (!o.fallback_default) {
        missing.push_back(task.CanonicalText());
        continue;
      }
      p.config = tmpl->Naive(task, target);
      p.kernel.fallback = true;
      report.warnings.push_back("WARNING: no record for " + task.CanonicalText() + " on " +
                                target_info.key + "; using the UNTUNED default schedule");
    } else {
      return best.status();
    }
    p.kernel.config_json = p.config.ToJson();
    plan.push_back(std::move(p));
  }
  if (!missing.empty()) {
    return absl::NotFoundError("no record on " + target_info.key + " for " +
                               std::to_string(missing.size()) + " task(s): " +
                               absl::StrJoin(missing, "; ") +
                               " (tune them first, or use --fallback default)");
  }

  // Build every kernel object, then the glue, then link; write outputs last so a
  // failure leaves no half-made library behind.
  ASSIGN_OR_RETURN(TempDir work, TempDir::Create("tuneforge-deploy"));
  std::vector<std::string> objects;
  for (size_t i = 0; i < plan.size(); ++i) {
    Planned& p = plan[i];
    ASSIGN_OR_RETURN(const Template* tmpl, FindTemplate(p.task));
    ASSIGN_OR_RETURN(ir::LoweredFunc func, tmpl->Instantiate(p.task, target, p.config));
    p.entry_symbol = func.name;
    p.buffers = func.params;
    p.prepack = static_cast<bool>(func.prepack);
    p.unpack = static_cast<bool>(func.unpack);
    ASSIGN_OR_RETURN(std::string object, BuildObject(func, target));
    objects.push_back(work.File("kernel" + std::to_string(i) + ".o"));
    RETURN_IF_ERROR(WriteFile(objects.back(), object));
  }
  nlohmann::ordered_json provenance = {
      {"library", o.name},
      {"tuneforge_version", o.tuneforge_version},
      {"target", {{"key", target_info.key}, {"triple", target_info.triple},
                  {"cpu", target_info.cpu}, {"num_threads", target_info.num_threads},
                  {"device_key", target_info.device_key}}},
      {"db", o.db_path},
      {"kernels", nlohmann::ordered_json::array()}};
  for (const Planned& p : plan) {
    provenance["kernels"].push_back({{"function", p.function},
                                     {"task", p.kernel.task},
                                     {"config", nlohmann::json::parse(p.kernel.config_json)},
                                     {"record_id", p.kernel.record_id},
                                     {"gflops", p.kernel.gflops},
                                     {"fallback", p.kernel.fallback}});
    report.kernels.push_back(p.kernel);
  }
  std::string header = GenerateHeader(o, target_info, plan);
  RETURN_IF_ERROR(WriteFile(work.File(o.name + ".h"), header));
  RETURN_IF_ERROR(WriteFile(work.File("glue.cc"), GenerateGlue(o, provenance.dump(2), plan)));
  RETURN_IF_ERROR(deploy::BuildLibraryFiles(work, o.name, objects, target_info.triple));
  const std::string so = work.File("lib" + o.name + ".so"), ar = work.File("lib" + o.name + ".a");

  std::error_code ec;
  std::filesystem::create_directories(out, ec);
  if (ec) return absl::InternalError("cannot create " + out.string() + ": " + ec.message());
  report.shared_library = (out / ("lib" + o.name + ".so")).string();
  report.static_library = (out / ("lib" + o.name + ".a")).string();
  report.header = (out / (o.name + ".h")).string();
  for (const auto& [from, to] : std::vector<std::pair<std::string, std::string>>{
           {so, report.shared_library}, {ar, report.static_library},
           {work.File(o.name + ".h"), report.header}}) {
    std::filesystem::copy_file(from, to, std::filesystem::copy_options::overwrite_existing, ec);
    if (ec) return absl::InternalError("cannot write " + to + ": " + ec.message());
  }
  for (const std::string& w : report.warnings) TF_LOG(Warning) << w;
  return report;
}

absl::StatusOr<std::optional<TargetInfo>> RecordTarget(Database* db, const std::vector<TuningTask>& tasks,
                                                       const std::string& device_key,
                                                       const std::string& target_key,
                                                       const std::string& target_name) {
  std::map<std::string, TargetInfo> candidates;
  for (const TuningTask& task : tasks) {
    ASSIGN_OR_RETURN(std::vector<TargetSummary> targets, db->TargetsOf(task.WorkloadKey()));
    for (const TargetSummary& t : targets) {
      if (!device_key.empty() && t.target.device_key != device_key) continue;
      if (!target_key.empty() && t.target.key != target_key) continue;
      if (!target_name.empty() && TripleArchitecture(t.target.triple) != target_name &&
          t.target.cpu != target_name) {
        continue;
      }
      candidates[t.target.key] = t.target;
    }
  }
  if (candidates.empty()) return std::optional<TargetInfo>();
  if (candidates.size() > 1) {
    std::string keys;
    for (const auto& [k, t] : candidates) keys += "\n  " + k;
    return absl::InvalidArgumentError(
        "the tasks have records on several targets; choose one with --target-key:" + keys);
  }
  return std::optional<TargetInfo>(candidates.begin()->second);
}

}  // namespace tuneforge
