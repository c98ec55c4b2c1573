// `tuneforge model inspect|tasks|run`: what tuneforge makes of an ONNX model (the
// reader's checks, the graph, the fused task table), the tasks as a file for `tune
// --tasks`, and the model run by the graph executor on this machine.
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <map>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "tuner/model_timing.h"
#include "cli/commands.h"
#include "cli/flags.h"
#include "cli/model_tuning.h"
#include "compiler/codegen/build.h"
#include "compiler/frontend/onnx_reader.h"
#include "compiler/graph/executor.h"
#include "compiler/graph/graph.h"
#include "compiler/graph/tasks.h"
#include "compiler/support/files.h"
#include "compiler/support/status.h"
#include "db/database.h"
#include "nlohmann/json.hpp"

namespace tuneforge::cli {

namespace {

constexpr char kUsage[] =
    "usage: tuneforge model inspect M.onnx [--print-graph] [--json]\n"
    "       tuneforge model tasks M.onnx -o|--out TASKS.txt\n"
    "  Reads an ONNX model (weights stored as external data included), checks that\n"
    "  tuneforge supports its IR version, opset, operators and inputs (float32, static\n"
    "  shapes), and prints the model: producer, inputs and outputs with their shapes,\n"
    "  weights, and its operators with how often each occurs; then imports it into the\n"
    "  graph IR (shapes inferred, shape computations and BatchNormalization folded, dead\n"
    "  nodes removed) and says how many nodes remain. An unsupported model is an error\n"
    "  naming the node, operator, attribute or tensor.\n"
    "  --print-graph  print the imported graph, one line per node\n"
    "  Models exported with dynamic axes (batch_size, sequence_length, ...) need their\n"
    "  sizes, on every model command (and tune --model, deploy --model):\n"
    "  --dim NAME=N[,NAME=N...]  size of a symbolic input dimension; repeatable\n"
    "  --shape INPUT=D0,D1,...   the whole shape of an input; repeatable\n"
    "  inspect also prints the task table: each anchor (conv2d, depthwise, dense,\n"
    "  matmul, batch_matmul) with the epilogue it absorbs, identical tasks merged with\n"
    "  a weight, GFLOP and share of the model's FLOPs, and the leftovers (operators\n"
    "  that are no tuning task) with the reason.\n"
    "  tasks writes the tasks as a file for `tune --tasks` (one task per line with\n"
    "  weight=W).\n"
    "\n"
    "       tuneforge model run M.onnx --input NAME=FILE.npy ... --output-dir DIR\n"
    "                 [--db F] [--threads N]\n"
    "  Compiles the model for this machine and runs it once: every task with the best\n"
    "  record in the db for this target (--db), or the template's default schedule\n"
    "  where there is none; the other operators with generated kernels. Inputs and\n"
    "  outputs are NumPy .npy files of float32; each output is written as\n"
    "  DIR/NAME.npy. --threads: threads the kernels use (default: all cores).\n";

std::vector<int64_t> Shape(const onnx::ValueInfoProto& v) {
  std::vector<int64_t> dims;
  if (!v.type().has_tensor_type() || !v.type().tensor_type().has_shape()) return dims;
  for (const auto& d : v.type().tensor_type().shape().dim()) {
    dims.push_back(d.has_dim_value() ? d.dim_value() : -1);
  }
  return dims;
}

std::string ShapeText(const std::vector<int64_t>& dims) {
  std::vector<std::string> parts;
  for (int64_t d : dims) parts.push_back(d < 0 ? "?" : std::to_string(d));
  return "[" + absl::StrJoin(parts, ", ") + "]";
}

absl::StatusOr<int> Inspect(const std::string& path, const frontend::DimBindings& dims, bool json,
                            bool print_graph) {
  ASSIGN_OR_RETURN(LoadedModel loaded, LoadOnnxModel(path, dims));
  const frontend::OnnxModel& model = loaded.model;
  const graph::Graph& imported = loaded.graph;
  const graph::TaskTable& table = loaded.table;
  const onnx::GraphProto& g = model.proto.graph();
  std::map<std::string, int> ops;
  for (const auto& node : g.node()) ++ops[node.op_type()];
  int64_t weight_bytes = 0;
  std::map<std::string, bool> is_weight;
  for (const auto& t : g.initializer()) {
    weight_bytes += static_cast<int64_t>(t.raw_data().size()) +
                    t.float_data_size() * int64_t{4} + t.int64_data_size() * int64_t{8};
    is_weight[t.name()] = true;
  }
  nlohmann::json out = {{"path", path},
                        {"ir_version", model.proto.ir_version()},
                        {"opset", model.opset},
                        {"producer", model.proto.producer_name()},
                        {"nodes", g.node_size()},
                        {"weights", g.initializer_size()},
                        {"weight_bytes", weight_bytes},
                        {"operators", ops},
                        {"graph_nodes", imported.nodes.size()}};
  if (print_graph) out["graph"] = graph::PrintGraph(imported);
  out["total_gflop"] = table.total_flops / 1e9;
  out["tasks"] = nlohmann::json::array();
  for (const graph::ExtractedTask& t : table.tasks) {
    out["tasks"].push_back({{"task", t.task},
                            {"op", t.op},
                            {"weight", t.weight},
                            {"gflop", t.flops / 1e9},
                            {"share", t.flops * t.weight / table.total_flops},
                            {"nodes", t.nodes},
                            {"unfused_epilogue", t.unfused_epilogue}});
  }
  out["leftovers"] = nlohmann::json::array();
  for (const graph::Leftover& l : table.leftovers) {
    out["leftovers"].push_back({{"node", l.node}, {"op", l.op}, {"reason", l.reason},
                                {"gflop", l.flops / 1e9}});
  }
  for (const auto& v : g.input()) {
    if (is_weight.count(v.name())) continue;
    out["inputs"].push_back({{"name", v.name()}, {"shape", Shape(v)}});
  }
  for (const auto& v : g.output()) out["outputs"].push_back({{"name", v.name()}, {"shape", Shape(v)}});
  if (json) {
    std::printf("%s\n", out.dump(2).c_str());
    return 0;
  }
  std::printf("model:     %s (IR version %lld, opset %lld, producer '%s')\n", path.c_str(),
              static_cast<long long>(model.proto.ir_version()),
              static_cast<long long>(model.opset), model.proto.producer_name().c_str());
  for (const auto& v : g.input()) {
    if (!is_weight.count(v.name())) {
      std::printf("input:     %s %s\n", v.name().c_str(), ShapeText(Shape(v)).c_str());
    }
  }
  for (const auto& v : g.output()) {
    std::printf("output:    %s %s\n", v.name().c_str(), ShapeText(Shape(v)).c_str());
  }
  std::printf("weights:   %d tensors, %.1f KiB\n", g.initializer_size(), weight_bytes / 1024.0);
  std::printf("nodes:     %d\n", g.node_size());
  for (const auto& [op, n] : ops) std::printf("  %-20s %d\n", op.c_str(), n);
  std::printf("graph:     %zu nodes after folding and pruning\n", imported.nodes.size());
  std::printf("\n%-58s %6s %9s %6s  %s\n", "task", "weight", "GFLOP", "share", "covers");
  for (const graph::ExtractedTask& t : table.tasks) {
    std::string covers = absl::StrJoin(t.nodes, ",");
    if (!t.unfused_epilogue.empty()) {
      // A conv's epilogue runs in its output's unpack; a pointwise conv computed as a
      // matmul applies it as the matmul stores its results.
      const bool as_matmul = t.op == "matmul" || t.op == "batch_matmul";
      absl::StrAppend(&covers, " (", t.unfused_epilogue,
                      as_matmul ? " in the matmul's write-back" : " in the output's unpack", ", not in the tuned kernel)");
    }
    std::printf("%-58s %6d %9.4g %5.1f%%  %s\n", t.task.c_str(), t.weight, t.flops / 1e9,
                100.0 * t.flops * t.weight / table.total_flops, covers.c_str());
  }
  std::printf("leftovers (no tuning task):%s\n", table.leftovers.empty() ? " none" : "");
  for (const graph::Leftover& l : table.leftovers) {
    std::printf("  %-24s %-20s %s\n", l.node.c_str(), l.op.c_str(), l.reason.c_str());
  }
  if (print_graph) std::printf("\n%s", graph::PrintGraph(imported).c_str());
  return 0;
}

absl::StatusOr<int> WriteTasks(const std::string& path, const frontend::DimBindings& dims,
                               const std::string& out_path) {
  ASSIGN_OR_RETURN(LoadedModel loaded, LoadOnnxModel(path, dims));
  const graph::TaskTable& table = loaded.table;
  std::string text = absl::StrCat("# tuning tasks of ", path, " (tuneforge model tasks); ",
                                  "weight = occurrences per inference\n");
  for (const graph::ExtractedTask& t : table.tasks) {
    absl::StrAppend(&text, t.task, " weight=", t.weight, "\n");
  }
  RETURN_IF_ERROR(WriteFile(out_path, text));
  std::printf("wrote %zu tasks (%zu leftovers without a task) to %s\n", table.tasks.size(),
              table.leftovers.size(), out_path.c_str());
  return 0;
}

absl::StatusOr<int> Run(const std::string& path, const std::map<std::string, std::string>& input_files,
                        const Flags& flags) {
  ASSIGN_OR_RETURN(frontend::DimBindings dims, DimBindingsFromFlags(flags));
  ASSIGN_OR_RETURN(LoadedModel loaded, LoadOnnxModel(path, dims));
  Target target = DetectHostTarget("local");
  ASSIGN_OR_RETURN(int64_t threads, flags.GetInt("threads", target.num_threads, 1, 256));
  target.num_threads = static_cast<int>(threads);
  if (!flags.Has("output-dir")) return absl::InvalidArgumentError("model run needs --output-dir DIR");
  const std::string out_dir = flags.Get("output-dir");

  graph::ExecutorOptions options;
  std::unique_ptr<Database> db;
  if (flags.Has("db")) {
    ASSIGN_OR_RETURN(db, OpenDbReadOnly(flags.Get("db")));
    options.schedule = BestRecordSchedule(db.get(), &target);
  }
  ASSIGN_OR_RETURN(std::unique_ptr<graph::Executor> exec,
                   graph::Executor::Create(loaded.graph, target, options));

  std::vector<std::vector<float>> inputs;
  std::vector<std::string> unknown;
  for (const auto& [name, file] : input_files) {
    bool known = false;
    for (const graph::TensorInfo& in : exec->inputs()) known |= in.name == name;
    if (!known) unknown.push_back(name);
  }
  std::vector<std::string> expected;
  for (const graph::TensorInfo& in : exec->inputs()) {
    expected.push_back(in.name + " " + ShapeText(in.shape));
  }
  if (!unknown.empty()) {
    return absl::InvalidArgumentError(absl::StrCat("the model has no input ", absl::StrJoin(unknown, ", "),
                                                   " (its inputs: ", absl::StrJoin(expected, ", "), ")"));
  }
  for (const graph::TensorInfo& in : exec->inputs()) {
    auto it = input_files.find(in.name);
    if (it == input_files.end()) {
      return absl::InvalidArgumentError(absl::StrCat("missing --input ", in.name, "=FILE.npy (inputs: ",
                                                     absl::StrJoin(expected, ", "), ")"));
    }
    std::vector<int64_t> shape;
    ASSIGN_OR_RETURN(std::vector<float> data, graph::ReadNpy(it->second, &shape));
    if (shape != in.shape) {
      return absl::InvalidArgumentError(absl::StrCat("input ", in.name, " from ", it->second, " has shape ",
                                                     ShapeText(shape), "; the model wants ", ShapeText(in.shape)));
    }
    inputs.push_back(std::move(data));
  }
  std::vector<std::vector<float>> outputs;
  std::vector<const float*> in_ptrs;
  std::vector<float*> out_ptrs;
  for (const auto& v : inputs) in_ptrs.push_back(v.data());
  for (const graph::TensorInfo& out : exec->outputs()) {
    outputs.emplace_back(static_cast<size_t>(out.NumElements()));
    out_ptrs.push_back(outputs.back().data());
  }
  const auto start = std::chrono::steady_clock::now();
  RETURN_IF_ERROR(exec->Run(in_ptrs, out_ptrs));
  const double ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start).count();
  std::error_code ec;
  std::filesystem::create_directories(out_dir, ec);
  if (ec) return absl::PermissionDeniedError("cannot create " + out_dir + ": " + ec.message());
  std::printf("model:    %s on %s, %d threads\n", path.c_str(), target.cpu.c_str(), target.num_threads);
  std::printf("compiled: %zu kernels in %.2f s; tasks: %d tuned (db), %d default schedule; "
              "%d conv inputs (%d written by the producing kernel) and %d residuals handed over blocked; "
              "%d elementwise chains or channel shuffles computed in a conv's input copy; "
              "%d int8 outputs handed over as uint8\n",
              exec->kernels().size(), exec->compile_seconds(), exec->tuned_tasks(), exec->default_tasks(),
              exec->cancelled_layout_pairs(), exec->direct_writes(), exec->blocked_residuals(),
              exec->fused_prologues(), exec->quantized_handovers());
  std::printf("memory:   %.1f KiB planned for intermediate tensors and transient buffers (%.1f KiB without the "
              "plan), %.1f KiB scratch of the kernels' own\n",
              exec->arena_bytes() / 1024.0, (exec->unplanned_bytes() + exec->transient_bytes()) / 1024.0,
              exec->scratch_bytes() / 1024.0);
  std::printf("run:      %.3f ms (the first run, cold)\n", ms);
  if (const auto [asked, got] = exec->thread_shortfall(); asked > 0) {
    std::printf("warning:  a parallel loop asked for %d threads and got %d (the system refused more); "
                "the outputs are right, the run slower\n", asked, got);
  }
  for (size_t i = 0; i < outputs.size(); ++i) {
    const graph::TensorInfo& out = exec->outputs()[i];
    std::string name = out.name;
    for (char& c : name) {
      if (c == '/' || c == '\\') c = '_';
    }
    const std::string file = (std::filesystem::path(out_dir) / (name + ".npy")).string();
    RETURN_IF_ERROR(graph::WriteNpy(file, out.shape, outputs[i], out.dtype));
    std::printf("output:   %s %s -> %s\n", out.name.c_str(), ShapeText(out.shape).c_str(), file.c_str());
  }
  return 0;
}

}  // namespace

absl::StatusOr<int> ModelCommand(const std::vector<std::string>& args) {
  if (args.empty() || args[0] == "--help" || args[0] == "-h") {
    std::fputs(kUsage, args.empty() ? stderr : stdout);
    return args.empty() ? 2 : 0;
  }
  if (args[0] != "inspect" && args[0] != "tasks" && args[0] != "run") {
    return absl::InvalidArgumentError(
        absl::StrCat("unknown subcommand '", args[0], "' (known: inspect, tasks, run; see --help)"));
  }
  std::vector<std::string> rest;
  std::map<std::string, std::string> input_files;  // --input NAME=FILE, repeatable
  for (size_t i = 1; i < args.size(); ++i) {
    if (args[i] == "--input") {
      const std::string value = i + 1 < args.size() ? args[++i] : "";
      const size_t eq = value.find('=');
      if (eq == std::string::npos || eq == 0 || eq + 1 == value.size()) {
        return absl::InvalidArgumentError("--input wants NAME=FILE.npy, got '" + value + "'");
      }
      if (!input_files.emplace(value.substr(0, eq), value.substr(eq + 1)).second) {
        return absl::InvalidArgumentError("--input " + value.substr(0, eq) + " given twice");
      }
      continue;
    }
    rest.push_back(args[i] == "-o" ? "--out" : args[i]);  // -o: the short form of --out
  }
  ASSIGN_OR_RETURN(Flags flags, Flags::Parse(rest, {"out", "output-dir", "db", "threads", "dim", "shape"},
                                             {"json", "help", "print-graph"}, {"dim", "shape"}));
  if (flags.Has("help")) {
    std::fputs(kUsage, stdout);
    return 0;
  }
  if (flags.positional().size() != 1) {
    return absl::InvalidArgumentError(
        absl::StrCat("model ", args[0], " needs exactly one model file (see --help)"));
  }
  if (args[0] == "tasks") {
    if (!flags.Has("out")) return absl::InvalidArgumentError("model tasks needs -o TASKS.txt");
    ASSIGN_OR_RETURN(frontend::DimBindings dims, DimBindingsFromFlags(flags));
    return WriteTasks(flags.positional()[0], dims, flags.Get("out"));
  }
  if (args[0] == "run") return Run(flags.positional()[0], input_files, flags);
  ASSIGN_OR_RETURN(frontend::DimBindings dims, DimBindingsFromFlags(flags));
  return Inspect(flags.positional()[0], dims, flags.Has("json"), flags.Has("print-graph"));
}

}  // namespace tuneforge::cli
