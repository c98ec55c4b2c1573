// A small metrics registry rendered in the Prometheus text format (version 0.0.4).
//
// Three kinds of metric, each a family of series told apart by label values:
//   Counter   - only goes up (requests, results, errors);
//   Gauge     - a value that goes up and down;
//   Histogram - observations counted into fixed buckets chosen at registration,
//               plus their sum and count.
// A family is either pushed (the code holds a Counter*/Gauge*/Histogram* and bumps
// it; cheap enough for hot paths: one relaxed atomic per Increment/Set, two per
// Observe plus one CAS loop for the sum) or pulled (a collector callback that
// reports the family's series at scrape time; used to read other components'
// state - agents, jobs, queues - without touching their code paths).
//
// Thread-safe: registration, increments and Render may run concurrently. Pointers
// returned by the registry stay valid for the registry's lifetime.
#pragma once

#include <atomic>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <utility>
#include <vector>

namespace tuneforge::metrics {

// Label values in the order of the family's label names.
using LabelValues = std::vector<std::string>;

class Counter {
 public:
  void Increment(int64_t by = 1) { value_.fetch_add(by, std::memory_order_relaxed); }
  int64_t Value() const { return value_.load(std::memory_order_relaxed); }

 private:
  std::atomic<int64_t> value_{0};
};

class Gauge {
 public:
  void Set(double v) { value_.store(v, std::memory_order_relaxed); }
  double Value() const { return value_.load(std::memory_order_relaxed); }

 private:
  std::atomic<double> value_{0};
};

class Histogram {
 public:
  // `bounds`: the buckets' upper bounds, strictly increasing (+Inf is implicit).
  explicit Histogram(std::vector<double> bounds);
  void Observe(double v);

  struct Snapshot {
    std::vector<double> bounds;
    std::vector<int64_t> cumulative;  // per bound, then +Inf (== count)
    double sum = 0;
    int64_t count = 0;
  };
  Snapshot Read() const;

 private:
  const std::vector<double> bounds_;
  std::unique_ptr<std::atomic<int64_t>[]> buckets_;  // bounds_.size() + 1 (the +Inf bucket)
  std::atomic<double> sum_{0};
};

// Bucket helpers: `count` bounds start, start*factor, ...
std::vector<double> ExponentialBuckets(double start, double factor, int count);

// One sample a collector reports: label values and the value.
struct Sample {
  LabelValues labels;
  double value = 0;
};

class Registry {
 public:
  Registry() = default;
  Registry(const Registry&) = delete;
  Registry& operator=(const Registry&) = delete;

  // Registers a family (name and label names checked against Prometheus' rules; a
  // bad name or re-registering a name with another kind is a bug and aborts) and
  // returns the series for `labels`, creating it on first use. Calling again with the
  // same name returns the same family's series.
  Counter* GetCounter(const std::string& name, const std::string& help,
                      const std::vector<std::string>& label_names = {},
                      const LabelValues& labels = {});
  Gauge* GetGauge(const std::string& name, const std::string& help,
                  const std::vector<std::string>& label_names = {},
                  const LabelValues& labels = {});
  Histogram* GetHistogram(const std::string& name, const std::string& help,
                          const std::vector<double>& bounds,
                          const std::vector<std::string>& label_names = {},
                          const LabelValues& labels = {});

  // A pulled family: `collect` runs at every Render (on the scraping thread, so it
  // must be quick and must not call back into this registry). Kind is "counter" or
  // "gauge".
  void AddCollector(const std::string& name, const std::string& help, const std::string& kind,
                    const std::vector<std::string>& label_names,
                    std::function<std::vector<Sample>()> collect);

  // Every family, sorted by name, in the Prometheus text format.
  std::string Render() const;

  // Content-Type of Render's output.
  static constexpr const char* kContentType = "text/plain; version=0.0.4; charset=utf-8";

 private:
  enum class Kind { kCounter, kGauge, kHistogram };
  struct Family {
    Kind kind;
    std::string help;
    std::vector<std::string> label_names;
    std::vector<double> bounds;  // histograms
    std::map<LabelValues, std::unique_ptr<Counter>> counters;
    std::map<LabelValues, std::unique_ptr<Gauge>> gauges;
    std::map<LabelValues, std::unique_ptr<Histogram>> histograms;
    std::function<std::vector<Sample>()> collect;  // pulled families only
  };
  Family* FamilyLocked(const std::string& name, const std::string& help, Kind kind,
                       const std::vector<std::string>& label_names, const LabelValues& labels);

  mutable std::mutex mu_;
  std::map<std::string, Family> families_;  // GUARDED_BY(mu_)
};

// Text-format helpers, exposed for tests.
std::string EscapeLabelValue(const std::string& v);
std::string FormatValue(double v);

}  // namespace tuneforge::metrics
