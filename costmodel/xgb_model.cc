// XgbModel: training, prediction and serialization through XGBoost's C API.
#include "costmodel/xgb_model.h"

#include <xgboost/c_api.h>

#include <algorithm>
#include <numeric>
#include <utility>

#include "compiler/support/status.h"

namespace tuneforge::costmodel {
namespace {

// The one place XGBoost's 0/-1 return codes become Status.
absl::Status Check(int rc, const char* what) {
  if (rc == 0) return absl::OkStatus();
  return absl::InternalError(std::string("xgboost ") + what + ": " + XGBGetLastError());
}

// Owns a DMatrixHandle.
class Matrix {
 public:
  ~Matrix() {
    if (handle_) XGDMatrixFree(handle_);
  }
  absl::Status Create(const std::vector<FeatureVector>& rows) {
    size_t ncol = rows.empty() ? 0 : rows[0].size();
    std::vector<float> flat;
    flat.reserve(rows.size() * ncol);
    for (const FeatureVector& r : rows) {
      if (r.size() != ncol) return absl::InvalidArgumentError("feature rows differ in length");
      flat.insert(flat.end(), r.begin(), r.end());
    }
    return Check(XGDMatrixCreateFromMat(flat.data(), rows.size(), ncol, NAN, &handle_),
                 "XGDMatrixCreateFromMat");
  }
  DMatrixHandle handle() const { return handle_; }

 private:
  DMatrixHandle handle_ = nullptr;
};

}  // namespace

XgbModel::XgbModel(XgbParams params) : params_(std::move(params)) {}

XgbModel::~XgbModel() {
  if (booster_) XGBoosterFree(booster_);
}

XgbModel::XgbModel(XgbModel&& other) noexcept
    : params_(std::move(other.params_)), booster_(std::exchange(other.booster_, nullptr)) {}

XgbModel& XgbModel::operator=(XgbModel&& other) noexcept {
  if (this != &other) {
    if (booster_) XGBoosterFree(booster_);
    params_ = std::move(other.params_);
    booster_ = std::exchange(other.booster_, nullptr);
  }
  return *this;
}

absl::Status XgbModel::ApplyParams(void* booster) const {
  auto set = [&](const char* k, const std::string& v) {
    return Check(XGBoosterSetParam(booster, k, v.c_str()), "XGBoosterSetParam");
  };
  RETURN_IF_ERROR(set("objective", params_.objective));
  RETURN_IF_ERROR(set("max_depth", std::to_string(params_.max_depth)));
  RETURN_IF_ERROR(set("eta", std::to_string(params_.eta)));
  RETURN_IF_ERROR(set("min_child_weight", std::to_string(params_.min_child_weight)));
  RETURN_IF_ERROR(set("subsample", std::to_string(params_.subsample)));
  RETURN_IF_ERROR(set("colsample_bytree", std::to_string(params_.colsample_bytree)));
  if (params_.objective.rfind("rank:", 0) == 0)
    RETURN_IF_ERROR(set("num_pairsample", std::to_string(params_.num_pairsample)));
  RETURN_IF_ERROR(set("nthread", std::to_string(params_.nthread)));
  RETURN_IF_ERROR(set("seed", std::to_string(params_.seed)));
  RETURN_IF_ERROR(set("tree_method", "hist"));
  RETURN_IF_ERROR(set("verbosity", "0"));
  return absl::OkStatus();
}

absl::Status XgbModel::Train(const std::vector<FeatureVector>& rows,
                             const std::vector<float>& labels,
                             const std::vector<unsigned>& group_sizes,
                             const std::vector<float>& base_margin) {
  if (rows.empty()) return absl::InvalidArgumentError("no training rows");
  if (labels.size() != rows.size())
    return absl::InvalidArgumentError("labels and rows differ in count");
  std::vector<unsigned> groups = group_sizes;
  if (groups.empty()) groups = {static_cast<unsigned>(rows.size())};
  if (std::accumulate(groups.begin(), groups.end(), size_t{0}) != rows.size())
    return absl::InvalidArgumentError("group sizes do not sum to the row count");

  Matrix m;
  RETURN_IF_ERROR(m.Create(rows));
  RETURN_IF_ERROR(
      Check(XGDMatrixSetFloatInfo(m.handle(), "label", labels.data(), labels.size()), "set label"));
  RETURN_IF_ERROR(
      Check(XGDMatrixSetUIntInfo(m.handle(), "group", groups.data(), groups.size()), "set group"));
  if (!base_margin.empty()) {
    if (base_margin.size() != rows.size())
      return absl::InvalidArgumentError("base margins and rows differ in count");
    RETURN_IF_ERROR(Check(
        XGDMatrixSetFloatInfo(m.handle(), "base_margin", base_margin.data(), base_margin.size()),
        "set base_margin"));
  }
  BoosterHandle booster = nullptr;
  DMatrixHandle dm = m.handle();
  RETURN_IF_ERROR(Check(XGBoosterCreate(&dm, 1, &booster), "XGBoosterCreate"));
  absl::Status st = ApplyParams(booster);
  for (int i = 0; st.ok() && i < params_.rounds; ++i)
    st = Check(XGBoosterUpdateOneIter(booster, i, m.handle()), "XGBoosterUpdateOneIter");
  if (!st.ok()) {
    XGBoosterFree(booster);
    return st;
  }
  if (booster_) XGBoosterFree(booster_);
  booster_ = booster;
  return absl::OkStatus();
}

absl::StatusOr<std::vector<float>> XgbModel::Predict(const std::vector<FeatureVector>& rows) const {
  if (!booster_) return absl::FailedPreconditionError("cost model is not trained");
  if (rows.empty()) return std::vector<float>{};
  Matrix m;
  RETURN_IF_ERROR(m.Create(rows));
  bst_ulong len = 0;
  const float* out = nullptr;
  RETURN_IF_ERROR(
      Check(XGBoosterPredict(booster_, m.handle(), 0, 0, 0, &len, &out), "XGBoosterPredict"));
  if (len != rows.size()) return absl::InternalError("xgboost returned a wrong prediction count");
  return std::vector<float>(out, out + len);
}

int XgbModel::num_features() const {
  bst_ulong n = 0;
  if (!booster_ || XGBoosterGetNumFeature(booster_, &n) != 0) return 0;
  return static_cast<int>(n);
}

absl::StatusOr<std::string> XgbModel::SaveToBytes() const {
  if (!booster_) return absl::FailedPreconditionError("cost model is not trained");
  bst_ulong len = 0;
  const char* data = nullptr;
  RETURN_IF_ERROR(Check(XGBoosterSaveModelToBuffer(booster_, R"({"format":"ubj"})", &len, &data),
                        "XGBoosterSaveModelToBuffer"));
  return std::string(data, len);
}

absl::Status XgbModel::LoadFromBytes(const std::string& bytes) {
  BoosterHandle booster = nullptr;
  RETURN_IF_ERROR(Check(XGBoosterCreate(nullptr, 0, &booster), "XGBoosterCreate"));
  absl::Status st = Check(XGBoosterLoadModelFromBuffer(booster, bytes.data(), bytes.size()),
                          "XGBoosterLoadModelFromBuffer");
  if (st.ok())
    st = Check(XGBoosterSetParam(booster, "nthread", std::to_string(params_.nthread).c_str()),
               "XGBoosterSetParam");
  if (!st.ok()) {
    XGBoosterFree(booster);
    return st;
  }
  if (booster_) XGBoosterFree(booster_);
  booster_ = booster;
  return absl::OkStatus();
}

double PairwiseAccuracy(const std::vector<float>& scores, const std::vector<float>& labels) {
  TF_CHECK(scores.size() == labels.size());
  int64_t right = 0, total = 0;
  for (size_t i = 0; i < scores.size(); ++i)
    for (size_t j = i + 1; j < scores.size(); ++j) {
      if (labels[i] == labels[j]) continue;
      ++total;
      right += (scores[i] > scores[j]) == (labels[i] > labels[j]) && scores[i] != scores[j];
    }
  return total ? static_cast<double>(right) / total : 0;
}

double RecallAtK(const std::vector<float>& scores, const std::vector<float>& labels, int k) {
  TF_CHECK(scores.size() == labels.size());
  k = std::min<int>(k, scores.size());
  if (k <= 0) return 0;
  auto top = [&](const std::vector<float>& v) {
    std::vector<size_t> idx(v.size());
    std::iota(idx.begin(), idx.end(), 0);
    std::stable_sort(idx.begin(), idx.end(), [&](size_t a, size_t b) { return v[a] > v[b]; });
    idx.resize(k);
    std::sort(idx.begin(), idx.end());
    return idx;
  };
  std::vector<size_t> a = top(scores), b = top(labels), both;
  std::set_intersection(a.begin(), a.end(), b.begin(), b.end(), std::back_inserter(both));
  return static_cast<double>(both.size()) / k;
}

}  // namespace tuneforge::costmodel
