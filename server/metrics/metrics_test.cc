// Tests of the metrics registry and its Prometheus text format.
#include "server/metrics/metrics.h"

#include <gtest/gtest.h>

#include <thread>

namespace tuneforge::metrics {
namespace {

TEST(MetricsTest, RendersCountersGaugesAndLabels) {
  Registry r;
  Counter* a = r.GetCounter("t_requests_total", "Requests.", {"code"}, {"200"});
  Counter* b = r.GetCounter("t_requests_total", "Requests.", {"code"}, {"500"});
  EXPECT_EQ(a, r.GetCounter("t_requests_total", "Requests.", {"code"}, {"200"}));
  a->Increment();
  a->Increment(2);
  b->Increment();
  r.GetGauge("t_temp", "A \\ help\nline.")->Set(-1.5);
  std::string text = r.Render();
  EXPECT_EQ(text,
            "# HELP t_requests_total Requests.\n"
            "# TYPE t_requests_total counter\n"
            "t_requests_total{code=\"200\"} 3\n"
            "t_requests_total{code=\"500\"} 1\n"
            "# HELP t_temp A \\\\ help\\nline.\n"
            "# TYPE t_temp gauge\n"
            "t_temp -1.5\n");
}

TEST(MetricsTest, HistogramBucketsAreCumulative) {
  Registry r;
  Histogram* h = r.GetHistogram("t_seconds", "Time.", {0.1, 1});
  h->Observe(0.05);
  h->Observe(0.1);  // upper bounds are inclusive
  h->Observe(0.5);
  h->Observe(7);
  std::string text = r.Render();
  EXPECT_NE(text.find("# TYPE t_seconds histogram\n"), std::string::npos) << text;
  EXPECT_NE(text.find("t_seconds_bucket{le=\"0.1\"} 2\n"), std::string::npos) << text;
  EXPECT_NE(text.find("t_seconds_bucket{le=\"1\"} 3\n"), std::string::npos) << text;
  EXPECT_NE(text.find("t_seconds_bucket{le=\"+Inf\"} 4\n"), std::string::npos) << text;
  EXPECT_NE(text.find("t_seconds_sum 7.65\n"), std::string::npos) << text;
  EXPECT_NE(text.find("t_seconds_count 4\n"), std::string::npos) << text;
}

TEST(MetricsTest, CollectorsRunAtScrapeTimeAndEscapeLabels) {
  Registry r;
  int calls = 0;
  r.AddCollector("t_things", "Things.", "gauge", {"name"}, [&] {
    ++calls;
    return std::vector<Sample>{{{"a\"b\\c\nd"}, double(calls)}};
  });
  EXPECT_EQ(calls, 0);
  std::string first = r.Render();
  EXPECT_NE(first.find("t_things{name=\"a\\\"b\\\\c\\nd\"} 1\n"), std::string::npos) << first;
  EXPECT_NE(r.Render().find("} 2\n"), std::string::npos);
}

TEST(MetricsTest, ConcurrentIncrementsAreNotLost) {
  Registry r;
  Counter* c = r.GetCounter("t_total", "T.");
  Histogram* h = r.GetHistogram("t_h", "H.", {1});
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t)
    threads.emplace_back([&] {
      for (int i = 0; i < 10000; ++i) {
        c->Increment();
        h->Observe(0.5);
        if (i % 1000 == 0) (void)r.Render();
      }
    });
  for (auto& t : threads) t.join();
  EXPECT_EQ(c->Value(), 40000);
  Histogram::Snapshot s = h->Read();
  EXPECT_EQ(s.count, 40000);
  EXPECT_DOUBLE_EQ(s.sum, 20000);
}

TEST(MetricsTest, FormatValue) {
  EXPECT_EQ(FormatValue(3), "3");
  EXPECT_EQ(FormatValue(0.25), "0.25");
  EXPECT_EQ(FormatValue(1.0 / 0.0), "+Inf");
  EXPECT_EQ(ExponentialBuckets(0.001, 2, 3), (std::vector<double>{0.001, 0.002, 0.004}));
}

TEST(MetricsDeathTest, MisuseIsABug) {
  Registry r;
  r.GetCounter("t_x", "X.");
  EXPECT_DEATH(r.GetGauge("t_x", "X."), "registered twice");
  EXPECT_DEATH(r.GetCounter("bad-name", "X."), "bad metric name");
  EXPECT_DEATH(r.GetCounter("t_y", "Y.", {"a"}, {}), "label values");
}

}  // namespace
}  // namespace tuneforge::metrics
