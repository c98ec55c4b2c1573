// The bad-input sweep: what a careless user (or an attacker) types at every command —
// wrong numbers, missing and foreign files, hostile model and array files, unsafe
// secrets and configs. Every case must end with exit code 1 and a one-line reason on
// stderr that names what is wrong (never an abort: rc 134/135/139), and must leave
// nothing behind: no new db file, the existing db's records intact.
#include <gtest/gtest.h>
#include <sys/stat.h>

#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "tests/process_util.h"

namespace tuneforge {
namespace {

using testing::RunCommand;

const std::string kBin = TF_BIN_DIR;
const std::string kModels = TF_TEST_MODELS_DIR;

struct Case {
  std::vector<std::string> argv;  // argv[0]: a program in kBin
  std::string expect;             // a substring of the one-line reason
};

class BadInputTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = (std::filesystem::temp_directory_path() / ("tf_bad_input_" + std::to_string(getpid()))).string();
    std::filesystem::remove_all(dir_);
    std::filesystem::create_directories(dir_);
  }
  void TearDown() override {
    if (!HasFailure()) std::filesystem::remove_all(dir_);
  }
  std::string Path(const std::string& name) const { return dir_ + "/" + name; }
  std::string Write(const std::string& name, const std::string& bytes) {
    std::ofstream(Path(name), std::ios::binary) << bytes;
    return Path(name);
  }
  // A .npy file with `shape` as its header's shape text and `floats` floats of data.
  std::string Npy(const std::string& name, const std::string& shape, int floats) {
    std::string header = "{'descr': '<f4', 'fortran_order': False, 'shape': " + shape + ", }";
    header.resize((10 + header.size() + 1 + 63) / 64 * 64 - 10 - 1, ' ');  // aligned to 64
    header.push_back('\n');
    std::string bytes = std::string("\x93NUMPY\x01\x00", 8);
    bytes.push_back(static_cast<char>(header.size() & 255));
    bytes.push_back(static_cast<char>(header.size() >> 8));
    bytes += header + std::string(static_cast<size_t>(floats) * 4, '\0');
    return Write(name, bytes);
  }
  std::string dir_;
};

TEST_F(BadInputTest, EveryBadInputIsAOneLineErrorAndLeavesNothingBehind) {
  // A real db with records, to check that nothing stored is lost.
  const std::string db = Path("a.db");
  auto tuned = RunCommand({kBin + "/tuneforge", "tune", "--task", "matmul M=8 N=8 K=8", "--trials", "2", "--db",
                           db, "--json"},
                          dir_, std::chrono::seconds(300));
  ASSERT_EQ(tuned.exit_code, 0) << tuned.err;
  auto count = [&] {
    auto r = RunCommand({kBin + "/tuneforge", "db", "stats", "--db", db, "--json"}, dir_);
    return r.out;
  };
  const std::string before = count();
  const std::string fresh = Path("fresh.db");  // must never appear
  const std::string task = "matmul M=8 N=8 K=8";

  // Files the cases use.
  const std::string text = Write("notes.txt", "hello\n");
  std::filesystem::create_directories(Path("adir"));
  const std::string open_token = Write("open.token", "alice-token-0123456789\n");
  chmod(open_token.c_str(), 0644);
  const std::string open_tokens = Write("open.tokens", "admin ops admin-token-0123456789\n");
  chmod(open_tokens.c_str(), 0644);
  const std::string spec_head = "db: " + db + "\ndevice_keys: [local]\ntasks: [\"" + task + "\"]\n";
  const std::string lib = Write("libtruncated.so", std::string("\x7f" "ELF\x02\x01\x01", 7) + std::string(100, '\0'));
  const std::string mlp = kModels + "/mlp.onnx";
  std::filesystem::copy_file(kModels + "/mlp_external.onnx", Path("ext.onnx"));
  std::filesystem::create_directories(Path("mlp_external.weights"));  // the weights are a directory
  const std::string log = Write("bad.jsonl", "{\"format\": \"nope\"}\n");

  const std::vector<Case> cases = {
      // tune
      {{"tuneforge", "tune", "--task", "matmul M=0 N=8 K=8", "--db", fresh}, "must be at least 1"},
      {{"tuneforge", "tune", "--task", "matmul M=2147483648 N=8 K=8", "--db", fresh}, "too large"},
      {{"tuneforge", "tune", "--task", "conv9d X=1", "--db", fresh}, "unknown op 'conv9d'"},
      {{"tuneforge", "tune", "--task", "matmul M=8 N=8 K=8 M=9", "--db", fresh}, "given twice"},
      {{"tuneforge", "tune", "--task", "matmul M=8 N=8 K=8 dtype=float64", "--db", fresh}, "float64"},
      {{"tuneforge", "tune", "--task", "matmul M=x N=8 K=8", "--db", fresh}, "is not an integer"},
      {{"tuneforge", "tune", "--task", task, "--trials", "-5", "--db", fresh}, "--trials"},
      {{"tuneforge", "tune", "--task", task, "--trials", "1e11", "--db", fresh}, "--trials"},
      {{"tuneforge", "tune", "--task", task, "--trials", "abc", "--db", fresh}, "--trials"},
      {{"tuneforge", "tune", "--task", task, "--policy", "bogus", "--db", fresh}, "bogus"},
      {{"tuneforge", "tune", "--task", task, "--seed", "x", "--db", fresh}, "--seed"},
      {{"tuneforge", "tune", "--task", task, "--batch", "0", "--db", fresh}, "--batch"},
      {{"tuneforge", "tune", "--task", task, "--timeout-ms", "-1", "--db", fresh}, "--timeout-ms"},
      {{"tuneforge", "tune", "--task", task, "--early-stop", "-3", "--db", fresh}, "--early-stop"},
      {{"tuneforge", "tune", "--task", task, "--target", "sparc", "--db", fresh}, "sparc"},
      {{"tuneforge", "tune", "--tasks", Path("none.txt"), "--db", fresh}, "none.txt"},
      {{"tuneforge", "tune", "--task", task, "--server", "127.0.0.1.nip.io:7070"}, "refusing plaintext"},
      {{"tuneforge", "tune", "--task", task, "--server", "127.0.0.1:1", "--token-file", open_token}, "chmod 600"},
      {{"tuneforge", "tune", "--task", task, "--server", "127.0.0.1:1", "--token-file", Path("none")}, "none"},
      {{"tuneforge", "tune", "--model", Path("none.onnx"), "--db", fresh}, "none.onnx"},
      {{"tuneforge", "tune", "--model", Path("ext.onnx"), "--db", fresh}, "not a regular file"},
      {{"tuneforge", "tune", "--db", fresh}, "--task"},
      // db
      {{"tuneforge", "db", "best", "--db", Path("none.db"), "--task", task}, "no such database file"},
      {{"tuneforge", "db", "best", "--db", db, "--task", "bogus"}, "bogus"},
      {{"tuneforge", "db", "best", "--db", text, "--task", task}, "notes.txt"},
      {{"tuneforge", "db", "best", "--db", Path("adir"), "--task", task}, "adir"},
      {{"tuneforge", "db", "import", Path("none.jsonl"), "--db", fresh}, "none.jsonl"},
      {{"tuneforge", "db", "import", log, "--db", fresh}, "bad.jsonl"},
      {{"tuneforge", "db", "import", text, "--db", fresh}, "notes.txt"},
      {{"tuneforge", "db", "import", Path("adir"), "--db", fresh}, "adir"},
      {{"tuneforge", "db", "import", log, "--db", fresh, "--format", "xml"}, "--format"},
      {{"tuneforge", "db", "merge", fresh, Path("none.db")}, "none.db"},
      {{"tuneforge", "db", "compact", "--db", db}, "--keep"},
      {{"tuneforge", "db", "top", "--db", db, "--task", task, "--k", "-1"}, "--k"},
      {{"tuneforge", "db", "export", "--db", Path("none.db"), "--out", Path("x.jsonl")}, "no such database file"},
      {{"tuneforge", "db", "frobnicate", "--db", db}, "unknown db subcommand"},
      {{"tuneforge", "db", "train-model", "--db", Path("none.db")}, "no such database file"},
      // model
      {{"tuneforge", "model", "inspect", Path("none.onnx")}, "none.onnx"},
      {{"tuneforge", "model", "inspect", text}, "notes.txt"},
      {{"tuneforge", "model", "inspect", Path("ext.onnx")}, "not a regular file"},
      {{"tuneforge", "model", "tasks", Path("ext.onnx"), "-o", Path("t.txt")}, "not a regular file"},
      {{"tuneforge", "model", "run", mlp, "--input", "x=" + Npy("abc.npy", "(abc,)", 32), "--output-dir", Path("o")},
       "shape dimension 'abc'"},
      {{"tuneforge", "model", "run", mlp, "--input", "x=" + Npy("big.npy", "(1e23,)", 32), "--output-dir", Path("o")},
       "shape dimension '1e23'"},
      {{"tuneforge", "model", "run", mlp, "--input",
        "x=" + Npy("huge.npy", "(4294967296, 4294967296, 4)", 32), "--output-dir", Path("o")},
       "needs more data"},
      {{"tuneforge", "model", "run", mlp, "--input", "x=" + Path("none.npy"), "--output-dir", Path("o")}, "none.npy"},
      {{"tuneforge", "model", "run", mlp, "--input", "x=" + text, "--output-dir", Path("o")}, "notes.txt"},
      {{"tuneforge", "model", "run", mlp, "--input", "x=" + Npy("short.npy", "(2, 16)", 3), "--output-dir", Path("o")},
       "short.npy"},
      {{"tuneforge", "model", "run", mlp, "--input", "x=" + Npy("x.npy", "(2, 16)", 32), "--output-dir", Path("o"),
        "--threads", "0"},
       "--threads"},
      // deploy
      {{"tuneforge", "deploy", "inspect", lib}, "libtruncated.so"},
      {{"tuneforge", "deploy", "inspect", lib, "--bench"}, "libtruncated.so"},
      {{"tuneforge", "deploy", "inspect", text}, "notes.txt"},
      {{"tuneforge", "deploy", "--db", Path("none.db"), "--task", task, "--out", Path("lib")}, "no such database file"},
      {{"tuneforge", "deploy", "--db", db, "--task", task, "--out", Path("no/such/dir/lib")}, "does not exist"},
      {{"tuneforge", "deploy", "--db", db, "--task", task, "--out", Path("lib"), "--name", "bad name"}, "bad name"},
      {{"tuneforge", "deploy", "--model", Path("ext.onnx"), "--db", db, "-o", Path("m")}, "not a regular file"},
      // nightly
      {{"tuneforge", "nightly", "run", Path("none.yaml")}, "none.yaml"},
      {{"tuneforge", "nightly", "run", Write("n1.yaml", spec_head + "trials: {new: 1e11}\n")},
       "trials.new must be an integer"},
      {{"tuneforge", "nightly", "run", Write("n2.yaml", spec_head + "canary: true\ncanary: false\n")},
       "given twice"},
      {{"tuneforge", "nightly", "run", Write("n3.yaml", "db: [unclosed\n")}, "not valid YAML"},
      {{"tuneforge", "nightly", "run", Write("n4.yaml", spec_head + "time_limit_minutes: .inf\n")},
       "time_limit_minutes"},
      // the server's flags and config
      {{"tuneforge-server", "--db", fresh, "--tokens", ""}, "--tokens needs a file"},
      {{"tuneforge-server", "--db", fresh, "--config", Write("s1.yaml", "tokens: \"\"\n")}, "tokens must name a file"},
      {{"tuneforge-server", "--db", fresh, "--config", Write("s2.yaml", "db: a.db\ndb: b.db\n")}, "given twice"},
      {{"tuneforge-server", "--db", fresh, "--listen", "127.0.0.1:0", "--tokens", open_tokens}, "chmod 600"},
      {{"tuneforge-server", "--db", fresh, "--listen", "nowhere"}, "nowhere"},
      {{"tuneforge-server", "--db", fresh, "--max-receive-message-bytes", "huge"}, "--max-receive-message-bytes"},
      {{"tuneforge-server", "--db", fresh, "--heartbeat-ms", "1"}, "--heartbeat-ms"},
      {{"tuneforge-server", "--db", fresh, "--listen", "127.0.0.1:0", "--tls-cert", text}, "--tls-key"},
      {{"tuneforge-server", "--db", fresh, "--frobnicate"}, "--frobnicate"},
      // the agent's
      {{"tuneforge-agent", "--server", "127.0.0.1.nip.io:7070", "--device-key", "k"}, "refusing plaintext"},
      {{"tuneforge-agent", "--server", "127.0.0.1:1", "--device-key", "k", "--token-file", open_token}, "chmod 600"},
  };
  ASSERT_GE(cases.size(), 50u);
  int failed = 0;
  for (const Case& c : cases) {
    std::vector<std::string> argv = c.argv;
    argv[0] = kBin + "/" + argv[0];
    auto r = RunCommand(argv, dir_, std::chrono::seconds(60));
    std::string shown;
    for (const std::string& a : c.argv) shown += a + " ";
    const bool one_line = !r.err.empty() && r.err.back() == '\n' && r.err.find('\n') == r.err.size() - 1;
    const bool ok = r.exit_code == 1 && one_line && r.err.find(c.expect) != std::string::npos;
    if (!ok) ++failed;
    EXPECT_TRUE(ok) << shown << "\n  rc " << r.exit_code << ", stderr:\n" << r.err << "  expected one line with '"
                    << c.expect << "'";
    EXPECT_FALSE(std::filesystem::exists(fresh)) << shown << "left " << fresh;
    std::filesystem::remove(fresh);
  }
  EXPECT_EQ(count(), before) << "the db's records changed";
  std::printf("bad-input sweep: %zu cases, %d not a one-line error\n", cases.size(), failed);
}

}  // namespace
}  // namespace tuneforge
