// The labels' join's records and their persisted layouts (engine/executor/performance_stage.cc
// joins and judges; this is its state): a model's window of counts and exact sums, a model's
// baseline and alert states, and the parts of a window the joining tasks handed to the model's
// task; and the window's arithmetic (value buckets, delay bins and quantiles, binned ROC AUC).
// Value types; thread-compatible.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <map>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "engine/drift/alert_state.h"
#include "engine/drift/codec.h"
#include "engine/exact_sum.h"

namespace driftd::performance {

using drift::ByteReader;
using drift::ByteWriter;

inline constexpr uint8_t kStateVersion = 1;
// A window's layout: 2 keeps its sums exactly (ExactSum), 1 (still read) as doubles.
inline constexpr uint8_t kWindowVersion = 2;
// Label delays are counted in powers of two of seconds: [0, 1 s), [1, 2), [2, 4), ...
inline constexpr int kDelayBins = 32;

inline void PutCounts(ByteWriter& w, const std::vector<int64_t>& counts) {
  w.Varint(counts.size());
  for (int64_t c : counts) w.Varint(static_cast<uint64_t>(c));
}
inline std::vector<int64_t> GetCounts(ByteReader& r) {
  const uint64_t n = r.Varint();
  std::vector<int64_t> counts;
  for (uint64_t i = 0; i < n && !r.failed(); ++i) {
    counts.push_back(static_cast<int64_t>(r.Varint()));
  }
  return counts;
}
inline void PutSum(ByteWriter& w, const ExactSum& sum) {
  w.Varint(sum.parts().size());
  for (double part : sum.parts()) w.F64(part);
  w.F64(sum.special());
}
// Layout 1 kept a sum as one double.
inline ExactSum GetSum(ByteReader& r, uint8_t version) {
  if (version < 2) return ExactSum(r.F64());
  std::vector<double> parts;
  for (uint64_t i = 0, n = r.Varint(); i < n && !r.failed(); ++i) parts.push_back(r.F64());
  const double special = r.F64();
  return ExactSum::Restore(parts, special);
}
inline void PutSums(ByteWriter& w, const std::vector<ExactSum>& sums) {
  w.Varint(sums.size());
  for (const ExactSum& sum : sums) PutSum(w, sum);
}
inline std::vector<ExactSum> GetSums(ByteReader& r, uint8_t version) {
  const uint64_t n = r.Varint();
  std::vector<ExactSum> sums;
  for (uint64_t i = 0; i < n && !r.failed(); ++i) sums.push_back(GetSum(r, version));
  return sums;
}

// One model's window: what arrived (for the estimates) and what the join decided (realized).
// Scaled out, each task that joins some of the window's keys keeps a part of it, and the
// model's task merges the parts: every sum is exact (ExactSum), so the merged window is the one
// a single task would have summed, whichever keys each task joined.
struct Window {
  int64_t predictions = 0;
  int64_t labelled_by_end = 0;
  int64_t labelled = 0;
  int64_t unlabelled = 0;
  int64_t duplicate_labels = 0;
  bool estimated = false;  // its part for the "estimated" row was handed to the model's task
  // Arrivals: counts per score bin (classification) or per value bucket (regression).
  std::vector<int64_t> score_bins;
  std::map<int32_t, int64_t> value_buckets;
  // Classification, labelled predictions: confusion counts at the threshold, per-class score
  // histograms, the log loss and per-bin score sums (calibration error).
  int64_t tp = 0, fp = 0, tn = 0, fn = 0;
  std::vector<int64_t> positive_bins;
  std::vector<int64_t> negative_bins;
  std::vector<ExactSum> score_sums;
  ExactSum log_loss;
  // Regression, labelled predictions: error sums, and per value bucket the |error| sums (the
  // baseline's model of the expected error).
  ExactSum abs_sum, sq_sum, abs_sq_sum, pct_sum, error_sum;
  int64_t pct_n = 0;
  std::map<int32_t, std::pair<int64_t, std::pair<ExactSum, ExactSum>>> bucket_errors;
  std::vector<int64_t> delays = std::vector<int64_t>(kDelayBins, 0);

  void Merge(const Window& o) {
    predictions += o.predictions;
    labelled_by_end += o.labelled_by_end;
    labelled += o.labelled;
    unlabelled += o.unlabelled;
    duplicate_labels += o.duplicate_labels;
    auto add = [](std::vector<int64_t>& a, const std::vector<int64_t>& b) {
      if (a.size() < b.size()) a.resize(b.size(), 0);
      for (size_t i = 0; i < b.size(); ++i) a[i] += b[i];
    };
    add(score_bins, o.score_bins);
    add(positive_bins, o.positive_bins);
    add(negative_bins, o.negative_bins);
    add(delays, o.delays);
    if (score_sums.size() < o.score_sums.size()) score_sums.resize(o.score_sums.size());
    for (size_t i = 0; i < o.score_sums.size(); ++i) score_sums[i].Merge(o.score_sums[i]);
    for (const auto& [k, v] : o.value_buckets) value_buckets[k] += v;
    tp += o.tp, fp += o.fp, tn += o.tn, fn += o.fn;
    for (auto [mine, theirs] :
         {std::pair{&log_loss, &o.log_loss}, std::pair{&abs_sum, &o.abs_sum},
          std::pair{&sq_sum, &o.sq_sum}, std::pair{&abs_sq_sum, &o.abs_sq_sum},
          std::pair{&pct_sum, &o.pct_sum}, std::pair{&error_sum, &o.error_sum}}) {
      mine->Merge(*theirs);
    }
    pct_n += o.pct_n;
    for (const auto& [k, v] : o.bucket_errors) {
      auto& mine = bucket_errors[k];
      mine.first += v.first;
      mine.second.first.Merge(v.second.first);
      mine.second.second.Merge(v.second.second);
    }
  }

  void Encode(std::string& out) const {
    ByteWriter w(out);
    w.U8(kWindowVersion);
    w.Varint(static_cast<uint64_t>(predictions));
    w.Varint(static_cast<uint64_t>(labelled_by_end));
    w.Varint(static_cast<uint64_t>(labelled));
    w.Varint(static_cast<uint64_t>(unlabelled));
    w.Varint(static_cast<uint64_t>(duplicate_labels));
    w.U8(estimated ? 1 : 0);
    PutCounts(w, score_bins);
    w.Varint(value_buckets.size());
    for (const auto& [k, v] : value_buckets) {
      w.Zigzag(k);
      w.Varint(static_cast<uint64_t>(v));
    }
    for (int64_t v : {tp, fp, tn, fn}) w.Varint(static_cast<uint64_t>(v));
    PutCounts(w, positive_bins);
    PutCounts(w, negative_bins);
    PutSums(w, score_sums);
    for (const ExactSum* v : {&log_loss, &abs_sum, &sq_sum, &abs_sq_sum, &pct_sum, &error_sum}) {
      PutSum(w, *v);
    }
    w.Varint(static_cast<uint64_t>(pct_n));
    w.Varint(bucket_errors.size());
    for (const auto& [k, v] : bucket_errors) {
      w.Zigzag(k);
      w.Varint(static_cast<uint64_t>(v.first));
      PutSum(w, v.second.first);
      PutSum(w, v.second.second);
    }
    PutCounts(w, delays);
  }

  static bool Decode(std::string_view bytes, Window& out) {
    ByteReader r(bytes);
    const uint8_t version = r.U8();
    if (version != 1 && version != kWindowVersion) return false;
    out.predictions = static_cast<int64_t>(r.Varint());
    out.labelled_by_end = static_cast<int64_t>(r.Varint());
    out.labelled = static_cast<int64_t>(r.Varint());
    out.unlabelled = static_cast<int64_t>(r.Varint());
    out.duplicate_labels = static_cast<int64_t>(r.Varint());
    out.estimated = r.U8() != 0;
    out.score_bins = GetCounts(r);
    for (uint64_t i = 0, n = r.Varint(); i < n && !r.failed(); ++i) {
      const int32_t k = static_cast<int32_t>(r.Zigzag());
      out.value_buckets[k] = static_cast<int64_t>(r.Varint());
    }
    for (int64_t* v : {&out.tp, &out.fp, &out.tn, &out.fn}) *v = static_cast<int64_t>(r.Varint());
    out.positive_bins = GetCounts(r);
    out.negative_bins = GetCounts(r);
    out.score_sums = GetSums(r, version);
    for (ExactSum* v : {&out.log_loss, &out.abs_sum, &out.sq_sum, &out.abs_sq_sum, &out.pct_sum,
                        &out.error_sum}) {
      *v = GetSum(r, version);
    }
    out.pct_n = static_cast<int64_t>(r.Varint());
    for (uint64_t i = 0, n = r.Varint(); i < n && !r.failed(); ++i) {
      const int32_t k = static_cast<int32_t>(r.Zigzag());
      auto& v = out.bucket_errors[k];
      v.first = static_cast<int64_t>(r.Varint());
      v.second.first = GetSum(r, version);
      v.second.second = GetSum(r, version);
    }
    out.delays = GetCounts(r);
    out.delays.resize(kDelayBins, 0);
    return !r.failed() && r.at_end();
  }
};

// A model: its baseline (pooled windows, the calibration), and its alert states.
struct Model {
  int32_t baseline_windows = 0;
  Window baseline;
  AlertStateMachine realized_state;
  AlertStateMachine estimated_state;
  std::string realized_incident;
  std::string estimated_incident;

  bool frozen(int needed) const { return baseline_windows >= needed; }

  void Encode(std::string& out) const {
    ByteWriter w(out);
    w.U8(kStateVersion);
    w.Varint(static_cast<uint64_t>(baseline_windows));
    std::string bytes;
    baseline.Encode(bytes);
    w.Bytes(bytes);
    bytes.clear();
    realized_state.Encode(bytes);
    w.Bytes(bytes);
    bytes.clear();
    estimated_state.Encode(bytes);
    w.Bytes(bytes);
    w.Str(realized_incident);
    w.Str(estimated_incident);
  }
  static bool Decode(std::string_view in, Model& out) {
    ByteReader r(in);
    if (r.U8() != kStateVersion) return false;
    out.baseline_windows = static_cast<int32_t>(r.Varint());
    if (!Window::Decode(r.Bytes(), out.baseline)) return false;
    auto realized = AlertStateMachine::Decode(r.Bytes());
    auto estimated = AlertStateMachine::Decode(r.Bytes());
    if (!realized || !estimated) return false;
    out.realized_state = *realized;
    out.estimated_state = *estimated;
    out.realized_incident = std::string(r.Str());
    out.estimated_incident = std::string(r.Str());
    return !r.failed() && r.at_end();
  }
};

// The parts of one model's window that the joining tasks handed to the model's task: what
// arrived, for the row when the window closes, and the whole of each part once its labels are
// in. Each is merged from the parts as they come (exactly, so in any order).
struct Handed {
  bool has_estimate = false;
  bool has_final = false;
  Window estimate;
  Window final;

  bool empty() const { return !has_estimate && !has_final; }

  void Encode(std::string& out) const {
    ByteWriter w(out);
    w.U8(kStateVersion);
    w.U8(static_cast<uint8_t>((has_estimate ? 1 : 0) | (has_final ? 2 : 0)));
    for (const Window* window : {&estimate, &final}) {
      std::string bytes;
      window->Encode(bytes);
      w.Bytes(bytes);
    }
  }
  static bool Decode(std::string_view in, Handed& out) {
    ByteReader r(in);
    if (r.U8() != kStateVersion) return false;
    const uint8_t flags = r.U8();
    out.has_estimate = (flags & 1) != 0;
    out.has_final = (flags & 2) != 0;
    if (!Window::Decode(r.Bytes(), out.estimate) || !Window::Decode(r.Bytes(), out.final)) {
      return false;
    }
    return !r.failed() && r.at_end();
  }
};

// Regression predictions are bucketed by value with this relative width (DDSketch's mapping).
inline constexpr double kBucketGamma = 1.05;

// The value bucket of a regression prediction: sign and log_gamma(|x|), as one int.
inline int32_t ValueBucket(double x) {
  if (!(std::fabs(x) > 1e-12)) return 0;
  const int32_t index =
      static_cast<int32_t>(std::ceil(std::log(std::fabs(x)) / std::log(kBucketGamma))) + 1'000'000;
  return x > 0 ? index : -index;
}

inline int DelayBin(int64_t delay_us) {
  const double seconds = static_cast<double>(std::max<int64_t>(delay_us, 0)) / 1e6;
  if (seconds < 1) return 0;
  return std::min(kDelayBins - 1, 1 + static_cast<int>(std::floor(std::log2(seconds))));
}

// ROC AUC from per-bin class counts, ties within a bin counted half; `error` bounds the
// difference from the exact AUC of the unbinned scores.
inline void Auc(const std::vector<double>& pos, const std::vector<double>& neg, double& auc,
                double& error) {
  double positives = 0;
  double negatives = 0;
  for (double p : pos) positives += p;
  for (double n : neg) negatives += n;
  if (positives <= 0 || negatives <= 0) {
    auc = NAN;
    error = NAN;
    return;
  }
  double above = 0;  // positives in higher bins
  double sum = 0;
  double ties = 0;
  for (size_t b = pos.size(); b-- > 0;) {
    sum += neg[b] * (above + pos[b] / 2);
    ties += neg[b] * pos[b];
    above += pos[b];
  }
  auc = sum / (positives * negatives);
  error = ties / (2 * positives * negatives);
}

// The delay below which `q` of the window's labels came (the upper edge of the bin).
inline double DelayQuantile(const Window& w, double q) {
  int64_t total = 0;
  for (int64_t c : w.delays) total += c;
  if (total == 0) return NAN;
  const double target = q * static_cast<double>(total);
  int64_t seen = 0;
  for (size_t b = 0; b < w.delays.size(); ++b) {
    seen += w.delays[b];
    if (static_cast<double>(seen) >= target && w.delays[b] > 0) {
      return b == 0 ? 1.0 : std::ldexp(1.0, static_cast<int>(b));
    }
  }
  return std::ldexp(1.0, kDelayBins);
}

}  // namespace driftd::performance
