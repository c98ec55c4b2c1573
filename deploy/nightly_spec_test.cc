// Tests of the nightly job's spec file: the shipped example and bad specs.
#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <iterator>

#include "deploy/nightly.h"

namespace tuneforge {
namespace {

TEST(NightlySpecTest, TheShippedExampleLoads) {
  auto spec = LoadNightlySpec(TF_EXAMPLE_SPEC);
  ASSERT_TRUE(spec.ok()) << spec.status();
  EXPECT_EQ(spec->db, "/var/lib/tuneforge/tuneforge.db");
  EXPECT_EQ(spec->device_keys, std::vector<std::string>{"epyc-znver4"});
  ASSERT_EQ(spec->tasks.size(), 2u);
  EXPECT_EQ(spec->tasks[0], "matmul M=512 N=512 K=512 dtype=float32");
  EXPECT_EQ(spec->new_trials, 200);
  EXPECT_EQ(spec->converged_trials, 32);
  EXPECT_DOUBLE_EQ(spec->regression_threshold, 0.10);
}

TEST(NightlySpecTest, ClassifyTellsASlowerDeviceFromAWorseSchedule) {
  NightlyReport r;
  r.threshold = 0.1;
  NightlyTaskResult healthy_but_worse;   // canary fine, best dropped 30%
  healthy_but_worse.canary_recorded_gflops = 100;
  healthy_but_worse.canary_measured_gflops = 98;
  healthy_but_worse.previous_gflops = 100;
  healthy_but_worse.best_gflops = 70;
  NightlyTaskResult slower_device = healthy_but_worse;  // canary 40% slower too
  slower_device.canary_measured_gflops = 60;
  NightlyTaskResult fine = healthy_but_worse;
  fine.best_gflops = 95;
  r.tasks = {healthy_but_worse, slower_device, fine};
  Classify(&r);
  EXPECT_TRUE(r.tasks[0].regression);
  EXPECT_FALSE(r.tasks[0].canary_slower);
  EXPECT_TRUE(r.tasks[1].canary_slower);
  EXPECT_FALSE(r.tasks[1].regression);
  EXPECT_FALSE(r.tasks[2].regression || r.tasks[2].canary_slower);
  EXPECT_TRUE(r.HasRegression());
}

TEST(NightlySpecTest, CurveSvgIsAPolyline) {
  std::string svg = CurveSvg("t", {1, 2, 2, 5});
  EXPECT_NE(svg.find("<svg"), std::string::npos);
  EXPECT_NE(svg.find("<polyline"), std::string::npos);
  EXPECT_NE(svg.find("trial 4"), std::string::npos);
}

// User-given names (spec name, task, device key, status) are escaped in every report.
TEST(NightlySpecTest, ReportsEscapeUserGivenNames) {
  const std::string evil = "<script>alert('x')</script>&\"|";
  NightlyReport r;
  r.name = evil;
  r.date = "2026-11-25";
  NightlyTaskResult t;
  t.task = evil;
  t.device_key = evil;
  t.status = evil;
  t.curve = {1, 2};
  t.canary_recorded_gflops = 1;
  t.canary_measured_gflops = 1;
  r.tasks.push_back(t);
  std::string dir = (std::filesystem::temp_directory_path() /
                     ("tf_nightly_escape_" + std::to_string(getpid())))
                        .string();
  ASSERT_TRUE(WriteNightlyReport(r, dir).ok());
  for (const char* file : {"report.html", "curve-1.svg", "report.md"}) {
    std::ifstream in(dir + "/" + file);
    std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    EXPECT_EQ(text.find("<script>"), std::string::npos) << file << ":\n" << text;
    EXPECT_NE(text.find("&lt;script&gt;alert(&#39;x&#39;)&lt;/script&gt;&amp;&quot;"),
              std::string::npos)
        << file << ":\n" << text;
  }
  std::filesystem::remove_all(dir);
  EXPECT_EQ(XmlEscape("a<b>&\"'"), "a&lt;b&gt;&amp;&quot;&#39;");
}

// `models:` entries: each model with its tuning tasks (tuned as one model job); a task
// of `tasks` that a model has is left to the model's job; a model tuneforge cannot
// run is an error naming it.
TEST(NightlySpecTest, ModelsBringTheirTasks) {
  const std::string dir =
      (std::filesystem::temp_directory_path() / ("tf_nightly_models_" + std::to_string(getpid()))).string();
  std::filesystem::create_directories(dir);
  const std::string models = TF_TEST_MODELS_DIR;
  auto load = [&](const std::string& body) {
    std::ofstream(dir + "/spec.yaml") << "db: t.db\n" << body;
    return LoadNightlySpec(dir + "/spec.yaml");
  };
  auto spec = load("tasks: [\"dense M=2 N=4 K=32 bias=1 relu=0\", \"matmul M=8 N=8 K=8\"]\nmodels: [" +
                   models + "/mlp.onnx]\n");
  ASSERT_TRUE(spec.ok()) << spec.status();
  ASSERT_EQ(spec->models.size(), 1u);
  EXPECT_EQ(spec->models[0].name, models + "/mlp.onnx");
  EXPECT_EQ(spec->models[0].tasks, (std::vector<std::string>{"dense M=2 N=32 K=16 bias=1 relu=1 dtype=float32",
                                                            "dense M=2 N=4 K=32 bias=1 relu=0 dtype=float32"}));
  EXPECT_EQ(spec->tasks, (std::vector<std::string>{"matmul M=8 N=8 K=8 dtype=float32"}));
  auto only_models = load("models: [" + models + "/mlp.onnx]\n");
  ASSERT_TRUE(only_models.ok()) << only_models.status();
  EXPECT_TRUE(only_models->tasks.empty());
  auto bad = load("models: [" + models + "/unsupported.onnx]\n");
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find("unsupported.onnx: "), std::string::npos) << bad.status();
  EXPECT_NE(bad.status().message().find("operator 'RandomUniformLike' is not supported"), std::string::npos) << bad.status();
  auto missing = load("models: [nowhere.onnx]\n");
  ASSERT_FALSE(missing.ok());
  EXPECT_NE(missing.status().message().find("model nowhere.onnx"), std::string::npos) << missing.status();
  std::filesystem::remove_all(dir);
}

// Every bad value is one line naming the key and what it needs (yaml-cpp's own
// "bad conversion" named neither), and a key given twice is refused.
TEST(NightlySpecTest, BadValuesNameTheKey) {
  const std::string dir =
      (std::filesystem::temp_directory_path() / ("tf_nightly_bad_" + std::to_string(getpid()))).string();
  std::filesystem::create_directories(dir);
  auto error = [&](const std::string& body) {
    std::ofstream(dir + "/spec.yaml") << body;
    auto spec = LoadNightlySpec(dir + "/spec.yaml");
    return spec.ok() ? std::string() : std::string(spec.status().message());
  };
  const std::string ok = "db: t.db\ndevice_keys: [k]\ntasks: [\"matmul M=8 N=8 K=8\"]\n";
  EXPECT_EQ(error(ok), "");
  EXPECT_NE(error(ok + "trials: {new: 1e11}\n").find("trials.new must be an integer 1..100000, got '1e11'"),
            std::string::npos);
  EXPECT_NE(error(ok + "trials: {new: 1000000}\n").find("trials.new must be 1..100000"), std::string::npos);
  EXPECT_NE(error(ok + "trials: {converged: [1]}\n").find("trials.converged must be an integer 0..100000, got a list"),
            std::string::npos);
  EXPECT_NE(error(ok + "canary: maybe\n").find("canary must be true or false, got 'maybe'"), std::string::npos);
  EXPECT_NE(error(ok + "time_limit_minutes: soon\n").find("time_limit_minutes must be a number"),
            std::string::npos);
  EXPECT_NE(error(ok + "time_limit_minutes: .nan\n").find("finite number >= 0"), std::string::npos);
  EXPECT_NE(error(ok + "regression_threshold: {a: 1}\n").find("regression_threshold must be a number"),
            std::string::npos);
  EXPECT_NE(error("db: t.db\ndevice_keys: k\ntasks: [\"matmul M=8 N=8 K=8\"]\n")
                .find("device_keys must be a list of device keys, got 'k'"),
            std::string::npos);
  EXPECT_NE(error("db: [a]\n").find("db must be a file, got a list"), std::string::npos);
  EXPECT_NE(error(ok + "db: u.db\n").find("key 'db' is given twice"), std::string::npos);
  std::filesystem::remove_all(dir);
}

}  // namespace
}  // namespace tuneforge
