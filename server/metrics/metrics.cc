// The metrics registry and its Prometheus text rendering.
#include "server/metrics/metrics.h"

#include <cmath>
#include <cstdio>
#include <sstream>

#include "compiler/support/status.h"

namespace tuneforge::metrics {
namespace {

bool ValidName(const std::string& name, bool allow_colon) {
  if (name.empty()) return false;
  for (size_t i = 0; i < name.size(); ++i) {
    char c = name[i];
    bool ok = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_' ||
              (allow_colon && c == ':') || (i > 0 && c >= '0' && c <= '9');
    if (!ok) return false;
  }
  return true;
}

std::string EscapeHelp(const std::string& help) {
  std::string out;
  for (char c : help) {
    if (c == '\\') out += "\\\\";
    else if (c == '\n') out += "\\n";
    else out += c;
  }
  return out;
}

// {a="x",b="y"} with an optional extra label (histograms' "le"); empty when none.
std::string LabelText(const std::vector<std::string>& names, const LabelValues& values,
                      const std::string& extra_name = "", const std::string& extra_value = "") {
  std::string out;
  for (size_t i = 0; i < names.size(); ++i) {
    out += out.empty() ? "{" : ",";
    out += names[i] + "=\"" + EscapeLabelValue(values[i]) + "\"";
  }
  if (!extra_name.empty()) {
    out += out.empty() ? "{" : ",";
    out += extra_name + "=\"" + extra_value + "\"";
  }
  if (!out.empty()) out += "}";
  return out;
}

void AtomicAdd(std::atomic<double>* a, double v) {
  double old = a->load(std::memory_order_relaxed);
  while (!a->compare_exchange_weak(old, old + v, std::memory_order_relaxed)) {
  }
}

}  // namespace

std::string EscapeLabelValue(const std::string& v) {
  std::string out;
  for (char c : v) {
    if (c == '\\') out += "\\\\";
    else if (c == '"') out += "\\\"";
    else if (c == '\n') out += "\\n";
    else out += c;
  }
  return out;
}

std::string FormatValue(double v) {
  if (std::isnan(v)) return "NaN";
  if (std::isinf(v)) return v > 0 ? "+Inf" : "-Inf";
  if (v == std::floor(v) && std::fabs(v) < 1e15) {
    char buf[32];
    std::snprintf(buf, sizeof(buf), "%.0f", v);
    return buf;
  }
  char buf[32];
  std::snprintf(buf, sizeof(buf), "%.9g", v);
  return buf;
}

Histogram::Histogram(std::vector<double> bounds)
    : bounds_(std::move(bounds)), buckets_(new std::atomic<int64_t>[bounds_.size() + 1]) {
  for (size_t i = 0; i < bounds_.size(); ++i) {
    TF_CHECK(std::isfinite(bounds_[i]) && (i == 0 || bounds_[i] > bounds_[i - 1]),
             "histogram bounds must be finite and strictly increasing");
  }
  for (size_t i = 0; i <= bounds_.size(); ++i) buckets_[i].store(0, std::memory_order_relaxed);
}

void Histogram::Observe(double v) {
  // Buckets are few (tens): a linear scan beats a binary search's branches.
  size_t i = 0;
  while (i < bounds_.size() && v > bounds_[i]) ++i;
  buckets_[i].fetch_add(1, std::memory_order_relaxed);
  AtomicAdd(&sum_, v);
}

Histogram::Snapshot Histogram::Read() const {
  Snapshot s;
  s.bounds = bounds_;
  int64_t running = 0;
  for (size_t i = 0; i <= bounds_.size(); ++i) {
    running += buckets_[i].load(std::memory_order_relaxed);
    s.cumulative.push_back(running);
  }
  s.count = running;
  s.sum = sum_.load(std::memory_order_relaxed);
  return s;
}

std::vector<double> ExponentialBuckets(double start, double factor, int count) {
  TF_CHECK(start > 0 && factor > 1 && count > 0, "bad exponential buckets");
  std::vector<double> out;
  for (double b = start; static_cast<int>(out.size()) < count; b *= factor) out.push_back(b);
  return out;
}

Registry::Family* Registry::FamilyLocked(const std::string& name, const std::string& help,
                                         Kind kind, const std::vector<std::string>& label_names,
                                         const LabelValues& labels) {
  TF_CHECK(ValidName(name, true), "bad metric name '", name, "'");
  for (const std::string& l : label_names) {
    TF_CHECK(ValidName(l, false) && l != "le" && l.rfind("__", 0) != 0, "bad label name '", l, "'");
  }
  TF_CHECK(labels.size() == label_names.size(), "metric ", name, " takes ", label_names.size(),
           " label values, got ", labels.size());
  auto [it, inserted] = families_.try_emplace(name);
  Family& f = it->second;
  if (inserted) {
    f.kind = kind;
    f.help = help;
    f.label_names = label_names;
  }
  TF_CHECK(f.kind == kind && f.label_names == label_names && !f.collect,
           "metric ", name, " registered twice with different kinds or labels");
  return &f;
}

Counter* Registry::GetCounter(const std::string& name, const std::string& help,
                              const std::vector<std::string>& label_names,
                              const LabelValues& labels) {
  std::lock_guard<std::mutex> lock(mu_);
  Family* f = FamilyLocked(name, help, Kind::kCounter, label_names, labels);
  std::unique_ptr<Counter>& c = f->counters[labels];
  if (!c) c = std::make_unique<Counter>();
  return c.get();
}

Gauge* Registry::GetGauge(const std::string& name, const std::string& help,
                          const std::vector<std::string>& label_names, const LabelValues& labels) {
  std::lock_guard<std::mutex> lock(mu_);
  Family* f = FamilyLocked(name, help, Kind::kGauge, label_names, labels);
  std::unique_ptr<Gauge>& g = f->gauges[labels];
  if (!g) g = std::make_unique<Gauge>();
  return g.get();
}

Histogram* Registry::GetHistogram(const std::string& name, const std::string& help,
                                  const std::vector<double>& bounds,
                                  const std::vector<std::string>& label_names,
                                  const LabelValues& labels) {
  std::lock_guard<std::mutex> lock(mu_);
  Family* f = FamilyLocked(name, help, Kind::kHistogram, label_names, labels);
  if (f->histograms.empty()) f->bounds = bounds;
  TF_CHECK(f->bounds == bounds, "histogram ", name, " registered with other buckets");
  std::unique_ptr<Histogram>& h = f->histograms[labels];
  if (!h) h = std::make_unique<Histogram>(bounds);
  return h.get();
}

void Registry::AddCollector(const std::string& name, const std::string& help,
                            const std::string& kind, const std::vector<std::string>& label_names,
                            std::function<std::vector<Sample>()> collect) {
  TF_CHECK(kind == "counter" || kind == "gauge", "collector kind must be counter or gauge");
  std::lock_guard<std::mutex> lock(mu_);
  TF_CHECK(!families_.count(name), "metric ", name, " registered twice");
  Family* f = FamilyLocked(name, help, kind == "counter" ? Kind::kCounter : Kind::kGauge,
                           label_names, LabelValues(label_names.size()));
  f->collect = std::move(collect);
}

std::string Registry::Render() const {
  // Copy what to render under the lock, then render (and run collectors, which take
  // other components' locks) without it: a hot path holding its own lock may be
  // registering a series at the same moment.
  struct View {
    std::string name;
    const Family* family;
    std::vector<std::pair<LabelValues, const void*>> series;
    std::function<std::vector<Sample>()> collect;
  };
  std::vector<View> views;
  {
    std::lock_guard<std::mutex> lock(mu_);
    for (const auto& [name, f] : families_) {
      View v{name, &f, {}, f.collect};
      for (const auto& [l, c] : f.counters) v.series.emplace_back(l, c.get());
      for (const auto& [l, g] : f.gauges) v.series.emplace_back(l, g.get());
      for (const auto& [l, h] : f.histograms) v.series.emplace_back(l, h.get());
      views.push_back(std::move(v));
    }
  }
  std::ostringstream out;
  for (const View& v : views) {
    const Family& f = *v.family;  // kind, help and labels never change once registered
    const char* kind = f.kind == Kind::kCounter ? "counter"
                       : f.kind == Kind::kGauge ? "gauge"
                                                : "histogram";
    out << "# HELP " << v.name << " " << EscapeHelp(f.help) << "\n";
    out << "# TYPE " << v.name << " " << kind << "\n";
    if (v.collect) {
      for (const Sample& s : v.collect()) {
        TF_CHECK(s.labels.size() == f.label_names.size(), "collector of ", v.name,
                 " returned the wrong number of labels");
        out << v.name << LabelText(f.label_names, s.labels) << " " << FormatValue(s.value) << "\n";
      }
      continue;
    }
    for (const auto& [labels, ptr] : v.series) {
      switch (f.kind) {
        case Kind::kCounter:
          out << v.name << LabelText(f.label_names, labels) << " "
              << static_cast<const Counter*>(ptr)->Value() << "\n";
          break;
        case Kind::kGauge:
          out << v.name << LabelText(f.label_names, labels) << " "
              << FormatValue(static_cast<const Gauge*>(ptr)->Value()) << "\n";
          break;
        case Kind::kHistogram: {
          Histogram::Snapshot s = static_cast<const Histogram*>(ptr)->Read();
          for (size_t i = 0; i <= s.bounds.size(); ++i) {
            std::string le = i < s.bounds.size() ? FormatValue(s.bounds[i]) : "+Inf";
            out << v.name << "_bucket" << LabelText(f.label_names, labels, "le", le) << " "
                << s.cumulative[i] << "\n";
          }
          out << v.name << "_sum" << LabelText(f.label_names, labels) << " " << FormatValue(s.sum)
              << "\n";
          out << v.name << "_count" << LabelText(f.label_names, labels) << " " << s.count << "\n";
          break;
        }
      }
    }
  }
  return out.str();
}

}  // namespace tuneforge::metrics
