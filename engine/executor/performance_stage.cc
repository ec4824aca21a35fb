#include "engine/executor/performance_stage.h"

#include <algorithm>
#include <cmath>
#include <map>
#include <optional>
#include <set>
#include <tuple>
#include <unordered_map>
#include <unordered_set>

#include <fmt/format.h>

#include "engine/drift/alert_state.h"
#include "engine/drift/calibration.h"
#include "engine/drift/codec.h"
#include "engine/exact_sum.h"
#include "engine/executor/join_pending.h"
#include "engine/executor/model_gate.h"
#include "engine/executor/performance_records.h"
#include "engine/executor/row_block.h"
#include "engine/json_writer.h"
#include "engine/log.h"
#include "engine/string_hash.h"

namespace driftd {

namespace {

using performance::ByteReader;
using performance::ByteWriter;
using performance::Handed;
using performance::kDelayBins;
using performance::kStateVersion;
using performance::Model;
using performance::Window;
using performance::Auc;
using performance::DelayBin;
using performance::DelayQuantile;
using performance::ValueBucket;

// Persisted key prefixes within the stage's namespace.
constexpr char kPendingKey = 'p';
constexpr char kWindowKey = 'w';
constexpr char kModelKey = 'm';
// The model's task: the parts of a window the joining tasks handed over, and up to where each
// joining task has handed its windows over (scaled out).
constexpr char kHandedKey = 'h';
constexpr char kHandedUpToKey = 'c';
// The models the join admitted (Admit), one entry each.
constexpr char kAdmittedKey = 'a';
// A message to another task is sealed once its window parts reach this size (a Kafka record's
// size is limited), and the next one starts.
constexpr size_t kMaxMessageBytes = 512 << 10;
// The settings the state is laid out by (the window's length), written once.
constexpr char kSettingsKey = 's';
// The longest join key kept (a longer one is counted, not joined).
constexpr size_t kMaxKeyBytes = 1024;
// The event times the join takes, about 73,000 years either side of 1970: with a bound and a
// window of at most 10^15 ms (the longest duration config takes), every sum the join makes of
// them (a row's time plus three bounds, a window's end) stays within int64. A time outside
// (a sentinel such as the largest epoch millis a decoder accepts) is counted as no time.
constexpr int64_t kMaxJoinTimeUs = int64_t{1} << 61;
bool JoinableTime(int64_t t) { return t >= -kMaxJoinTimeUs && t <= kMaxJoinTimeUs; }
// The most rows (predictions and labels) of one key in one span of the bound (event times in
// [k x bound, (k + 1) x bound)) the join takes: a key that is not a request's (a constant, a
// user id) would otherwise hold the bound's every row in one entry, rewritten and gone over
// whole with each row. The span's first rows in (time, kind, value) order are taken, the others
// counted (rows_over_key_cap), so which rows are joined depends on the rows alone: a row that
// left the entry before another came was decided at a watermark at or before the other's time,
// so it is before it in that order (each span's count is kept until no row can come to it, for
// a pairing decided in an earlier span takes its duplicates in this one with it). A key holds
// at most this many rows per span between the watermark and its latest row.
constexpr uint32_t kMaxRowsPerSpan = 128;
// Fewest labelled predictions in a window before its realized value is judged.
constexpr int64_t kMinJudged = 30;

uint64_t Fnv1a(std::initializer_list<std::string_view> parts) {
  uint64_t h = 1469598103934665603ull;
  for (std::string_view part : parts) {
    for (char c : part) {
      h ^= static_cast<uint8_t>(c);
      h *= 1099511628211ull;
    }
    h ^= 0x1f;
    h *= 1099511628211ull;
  }
  return h;
}

std::string HexId(uint64_t id) { return fmt::format("{:016x}", id); }

int64_t FloorDiv(int64_t a, int64_t b) { return a / b - ((a % b != 0) && ((a < 0) != (b < 0))); }

void PutBigEndian(std::string& out, int64_t v) {
  const uint64_t u = static_cast<uint64_t>(v) ^ (uint64_t{1} << 63);  // sorts as signed
  for (int i = 7; i >= 0; --i) out.push_back(static_cast<char>((u >> (8 * i)) & 0xff));
}
int64_t GetBigEndian(std::string_view in) {
  uint64_t u = 0;
  for (int i = 0; i < 8; ++i) u = (u << 8) | static_cast<uint8_t>(in[static_cast<size_t>(i)]);
  return static_cast<int64_t>(u ^ (uint64_t{1} << 63));
}


// A judged value: what the window says, what the baseline says, and the verdict.
struct Verdict {
  double value = NAN;
  double baseline = NAN;
  double sd = NAN;  // of value - baseline under "no change"
  double score = 0;
  double effect = 0;  // in the direction of worse
  double warn_at = NAN;
  double alert_at = NAN;
  AlertLevel level = AlertLevel::kOk;
  bool judged = false;
};


// A number for JSON: null when it is not finite.
void NumberOrNull(JsonObject& o, std::string_view key, double v) {
  if (std::isfinite(v)) {
    o.Number(key, v);
  } else {
    o.Null(key);
  }
}

}  // namespace

class PerformanceStage::Impl {
 public:
  Status Init(const PipelineSpec& spec) {
    labels_ = spec.labels;
    perf_ = spec.performance;
    pipeline_ = spec.name;
    // The model gate admits query.maxModels models and keeps the rows of the others as
    // "(other)", or drops them; scaled out, the task of a key joins copies of other tasks'
    // predictions, which no gate has seen, so the join bounds its models itself, as the gate
    // does.
    max_models_ = spec.query.max_models;
    bound_us_ = labels_.within_ms * 1000;
    window_us_ = perf_.window_ms * 1000;
    classification_ = perf_.task == PerformanceTask::kClassification;
    for (const SinkSpec& sink : spec.sinks) {
      if (sink.stream == StreamKind::kPerformance) want_rows_ = true;
    }
    const Schema schema = QuerySchema(spec);
    std::string model = spec.drift.enabled && !spec.drift.model_column.empty()
                            ? spec.drift.model_column
                            : (spec.query.group_by.empty() ? "" : spec.query.group_by[0]);
    model_column_ = schema.IndexOf(model);
    key_column_ = schema.IndexOf(labels_.prediction_key);
    score_column_ = schema.IndexOf(perf_.prediction);
    time_column_ = spec.query.watermark ? schema.IndexOf(spec.query.watermark->column) : -1;
    label_key_column_ = labels_.schema.IndexOf(labels_.key);
    label_column_ = labels_.schema.IndexOf(labels_.label);
    label_time_column_ = labels_.schema.IndexOf(labels_.event_time);
    if (model_column_ < 0 || key_column_ < 0 || score_column_ < 0 || time_column_ < 0 ||
        label_key_column_ < 0 || label_column_ < 0 || label_time_column_ < 0) {
      return MakeError(ErrorCode::kConfig,
                       "labels: the model, key, prediction, event-time or label column is "
                       "missing (validate the pipeline)");
    }
    if (schema.fields[static_cast<size_t>(model_column_)].type != FieldType::kString) {
      return MakeError(ErrorCode::kConfig, "labels: the model column must be a string");
    }
    // Score bins: equal widths over [0, 1] with the threshold as one more edge, so that a bin
    // is wholly on one side of it.
    for (int i = 0; i <= perf_.bins; ++i) edges_.push_back(static_cast<double>(i) / perf_.bins);
    edges_.push_back(perf_.threshold);
    std::sort(edges_.begin(), edges_.end());
    edges_.erase(std::unique(edges_.begin(), edges_.end()), edges_.end());
    return Ok();
  }

  // Scaled out: this stage's task and how many share the query. Each task joins the keys that
  // hash to it (StableHash(key) % tasks: the placement routes labels and copies of predictions
  // so) and judges the models it owns (the placement's model hash).
  void SetTask(uint32_t id, uint32_t tasks) {
    task_ = id;
    tasks_ = std::max<uint32_t>(1, tasks);
    handed_up_to_.assign(tasks_, INT64_MIN);
  }

  // ---- arrivals -------------------------------------------------------------------------------

  void Predictions(const RecordBatch& batch, const RowTimes& times) {
    const Column& models = batch.columns[static_cast<size_t>(model_column_)];
    const Column& keys = batch.columns[static_cast<size_t>(key_column_)];
    const Column& scores = batch.columns[static_cast<size_t>(score_column_)];
    const Column& event_times = batch.columns[static_cast<size_t>(time_column_)];
    for (size_t row = 0; row < batch.num_rows; ++row) {
      // Scaled out, another task joins this key (it has the prediction's copy).
      if (tasks_ > 1 && !keys.IsNull(row) && TaskOfName(keys.String(row)) != task_) continue;
      if (models.IsNull(row) || keys.IsNull(row) || event_times.IsNull(row) ||
          !JoinableTime(event_times.i64[row]) || keys.String(row).size() > kMaxKeyBytes) {
        ++counts_.without_key;
        continue;
      }
      const double score = scores.IsNull(row) ? NAN : NumberOf(scores, row);
      if (!std::isfinite(score)) {
        ++counts_.without_key;
        continue;
      }
      const int64_t t = event_times.i64[row];
      // Late: behind the watermark when it came. A label it could pair with may have been
      // decided already, or not, as the batching fell: a row behind the watermark joins nothing,
      // so that outcomes depend on the rows alone. (Its window may still be open.)
      if (t < times.late_before[row]) {
        ++counts_.predictions_late;
        continue;
      }
      if (!Admit(models.String(row))) {
        ++counts_.predictions_over_model_cap;
        continue;
      }
      JoinEntry::Prediction prediction;
      prediction.t = t;
      prediction.score = score;
      prediction.model = Intern(models.String(row));
      const CapOrder order{t, false, score, *prediction.model};
      Arrive(keys.String(row), order, [&](JoinEntry& entry) {
        auto& all = entry.predictions;
        all.insert(std::upper_bound(all.begin(), all.end(), prediction,
                                    [](const auto& a, const auto& b) {
                                      return a.order() < b.order();
                                    }),
                   std::move(prediction));
      });
    }
  }

  // Whether the join takes predictions of `model`: one it holds state for, the overflow's
  // "(other)", or a new one while it holds fewer than max_models_. Models are let in as they
  // come, as the gate does.
  bool Admit(std::string_view model) {
    if (model == last_admitted_) return true;
    if (model != ModelGate::kOtherModel && known_models_.find(model) == known_models_.end()) {
      if (static_cast<int64_t>(known_models_.size()) >= max_models_) return false;
      known_models_.emplace(model);
      // Kept, so that a restart admits the same models: scaled out, nothing else in this
      // task's state may name the model once its windows were handed to its task.
      newly_admitted_.emplace_back(model);
    }
    last_admitted_ = model;
    return true;
  }

  // The one string of a model's name, which pending predictions point to.
  const std::string* Intern(std::string_view model) {
    auto it = names_.find(model);
    if (it == names_.end()) it = names_.emplace(model).first;
    return &*it;
  }

  // A model restored with state: admitted again ("(other)" needs no place).
  void Know(std::string_view model) {
    if (model != ModelGate::kOtherModel) known_models_.emplace(model);
  }

  void Labels(const RecordBatch& batch, const RowTimes& times) {
    const Column& keys = batch.columns[static_cast<size_t>(label_key_column_)];
    const Column& values = batch.columns[static_cast<size_t>(label_column_)];
    const Column& event_times = batch.columns[static_cast<size_t>(label_time_column_)];
    for (size_t row = 0; row < batch.num_rows; ++row) {
      if (keys.IsNull(row) || event_times.IsNull(row) || values.IsNull(row) ||
          !JoinableTime(event_times.i64[row]) || keys.String(row).size() > kMaxKeyBytes) {
        ++counts_.without_key;
        continue;
      }
      const double value = NumberOf(values, row);
      if (!std::isfinite(value)) {
        ++counts_.without_key;
        continue;
      }
      const int64_t t = event_times.i64[row];
      // Late: behind the watermark when it came, as a prediction (above). A pairing it could
      // belong to is decided once the watermark is past its head plus the bound, which is at or
      // past t, so a label that is not late finds every one of them waiting, whatever the
      // batching.
      if (t < times.late_before[row]) {
        ++counts_.labels_late;
        continue;
      }
      const JoinEntry::Label label{t, value};
      Arrive(keys.String(row), CapOrder{t, true, value, {}}, [&](JoinEntry& entry) {
        auto& all = entry.labels;
        all.insert(std::upper_bound(all.begin(), all.end(), label,
                                    [](const auto& a, const auto& b) {
                                      return a.order() < b.order();
                                    }),
                   label);
      });
    }
  }

  // A row's place in the order the cap on a key's rows keeps them by (kMaxRowsPerSpan).
  struct CapOrder {
    int64_t t;
    bool label;
    double value;  // a prediction's score, a label's value
    std::string_view model;
    auto tie() const { return std::tie(t, label, value, model); }
  };

  // A row of `key` came: `add` puts it among the entry's rows, and the windows' counts follow.
  // Past the cap of its span, the span's last row in the cap's order is counted and not joined:
  // the new one, or one that waits (taken out again).
  template <typename Add>
  void Arrive(std::string_view key_view, const CapOrder& row, Add add) {
    auto [it, created] = pending_.try_emplace(std::string(key_view));
    const std::string& key = it->first;
    JoinEntry& entry = it->second;
    if (!created) Unschedule(key, entry);
    const int64_t span = SpanOf(row.t);
    uint32_t& taken = entry.TakenIn(span);
    if (taken < kMaxRowsPerSpan) {
      ++taken;
    } else {
      ++counts_.rows_over_key_cap;
      if (!TakeOutLastAfter(entry, span, row)) {
        Schedule(key, entry);
        return;
      }
    }
    add(entry);
    ++waiting_;
    Recount(entry);
    Schedule(key, entry);
    MarkDirty(key);
  }

  // The span of the bound an event time is in, by its start.
  int64_t SpanOf(int64_t t) const { return FloorDiv(t, bound_us_) * bound_us_; }

  // Takes the waiting row of `span` last in the cap's order out of the entry if `row` comes
  // before it (its window no longer counts it); false when `row` is the last.
  bool TakeOutLastAfter(JoinEntry& entry, int64_t span, const CapOrder& row) {
    auto in_span = [&](int64_t t) { return SpanOf(t) == span; };
    std::optional<CapOrder> last;
    int prediction = -1;
    int label = -1;
    for (size_t i = 0; i < entry.predictions.size(); ++i) {
      const JoinEntry::Prediction& p = entry.predictions[i];
      const CapOrder order{p.t, false, p.score, *p.model};
      if (in_span(p.t) && (!last || last->tie() < order.tie())) {
        last = order;
        prediction = static_cast<int>(i);
        label = -1;
      }
    }
    for (size_t i = 0; i < entry.labels.size(); ++i) {
      const JoinEntry::Label& l = entry.labels[i];
      const CapOrder order{l.t, true, l.value, {}};
      if (in_span(l.t) && (!last || last->tie() < order.tie())) {
        last = order;
        label = static_cast<int>(i);
        prediction = -1;
      }
    }
    if (!last || !(row.tie() < last->tie())) return false;
    if (prediction >= 0) {
      JoinEntry::Prediction& p = entry.predictions[static_cast<size_t>(prediction)];
      if (p.counted) CountArrival(p, -1);
      if (p.by_end) WindowOf(p).labelled_by_end -= 1;
      entry.predictions.erase(entry.predictions.begin() + prediction);
    } else {
      entry.labels.erase(entry.labels.begin() + label);
    }
    --waiting_;
    return true;
  }

  // ---- state ----------------------------------------------------------------------------------

  Status Restore(std::string_view key, std::string_view value) {
    if (key.empty()) return Ok();
    const std::string_view rest = key.substr(1);
    switch (key[0]) {
      case kPendingKey: {
        JoinEntry entry;
        if (!DecodePending(value, entry, [this](std::string_view m) { return Intern(m); })) break;
        if (entry.taken.empty()) {
          // An entry of layout 1 or 2 (no spans' counts): its waiting rows are what its spans
          // took, as far as it knows.
          for (const JoinEntry::Prediction& p : entry.predictions) ++entry.TakenIn(SpanOf(p.t));
          for (const JoinEntry::Label& l : entry.labels) ++entry.TakenIn(SpanOf(l.t));
        }
        for (const JoinEntry::Prediction& prediction : entry.predictions) Know(*prediction.model);
        const auto rows = static_cast<int64_t>(entry.predictions.size() + entry.labels.size());
        auto [it, inserted] = pending_.emplace(std::string(rest), std::move(entry));
        if (!inserted) break;  // one key twice: not state this stage wrote
        waiting_ += rows;
        Schedule(it->first, it->second);
        return Ok();
      }
      case kWindowKey: {
        if (rest.size() < 8) break;
        Window window;
        if (!Window::Decode(value, window)) break;
        const int64_t start = GetBigEndian(rest.substr(0, 8));
        if (FloorDiv(start, window_us_) * window_us_ != start) {
          return Incompatible(fmt::format("a window starting at {} us, which is not a multiple "
                                          "of performance.window",
                                          start));
        }
        DRIFTD_TRY(Fits(window));
        Know(rest.substr(8));
        windows_[{start, std::string(rest.substr(8))}] = std::move(window);
        return Ok();
      }
      case kSettingsKey: {
        ByteReader r(value);
        if (r.U8() != kStateVersion) break;
        const auto window_us = static_cast<int64_t>(r.Varint());
        if (r.failed() || !r.at_end()) break;
        if (window_us != window_us_) {
          return Incompatible(fmt::format("windows of {} s, and performance.window is {} s",
                                          window_us / 1'000'000, window_us_ / 1'000'000));
        }
        settings_written_ = true;
        return Ok();
      }
      case kAdmittedKey: {
        Know(rest);
        return Ok();
      }
      case kHandedKey: {
        if (rest.size() < 8) break;
        Handed handed;
        if (!Handed::Decode(value, handed)) break;
        DRIFTD_TRY(Fits(handed.estimate));
        DRIFTD_TRY(Fits(handed.final));
        const std::pair<int64_t, std::string> at{GetBigEndian(rest.substr(0, 8)),
                                                 std::string(rest.substr(8))};
        handed_stored_.insert(at);
        handed_[at] = std::move(handed);
        return Ok();
      }
      case kHandedUpToKey: {
        if (rest.size() != 4) break;
        ByteReader r(value);
        const int64_t up_to = r.I64();
        if (r.failed() || !r.at_end()) break;
        const uint32_t from = (static_cast<uint32_t>(static_cast<uint8_t>(rest[0])) << 24) |
                              (static_cast<uint32_t>(static_cast<uint8_t>(rest[1])) << 16) |
                              (static_cast<uint32_t>(static_cast<uint8_t>(rest[2])) << 8) |
                              static_cast<uint32_t>(static_cast<uint8_t>(rest[3]));
        // A task the query no longer has (fewer tasks than when it was written): left alone.
        if (from < tasks_) handed_up_to_[from] = std::max(handed_up_to_[from], up_to);
        return Ok();
      }
      case kModelKey: {
        Model model;
        if (!Model::Decode(value, model)) break;
        DRIFTD_TRY(Fits(model.baseline));
        Know(rest);
        models_[std::string(rest)] = std::move(model);
        return Ok();
      }
      default: break;
    }
    return MakeError(ErrorCode::kCorruption, "performance state: an entry of {} bytes is unreadable",
                     value.size());
  }

  // Whether a restored window is laid out as this pipeline's are: score bins from
  // performance.bins and the threshold (classification), value buckets (regression). A
  // checkpoint written with other settings cannot serve the pipeline.
  Status Fits(const Window& window) const {
    if (!classification_) {
      if (!window.score_bins.empty() || !window.positive_bins.empty()) {
        return Incompatible("classification state, and the pipeline's performance.task is "
                            "regression");
      }
      return Ok();
    }
    if (!window.value_buckets.empty() || !window.bucket_errors.empty()) {
      return Incompatible("regression state, and the pipeline's performance.task is "
                          "classification");
    }
    for (const size_t size : {window.score_bins.size(), window.positive_bins.size(),
                              window.negative_bins.size(), window.score_sums.size()}) {
      if (size != 0 && size != bins()) {
        return Incompatible(fmt::format("score bins of {} bins, and the pipeline's "
                                        "performance.bins and threshold make {}",
                                        size, bins()));
      }
    }
    return Ok();
  }

  Status Incompatible(std::string_view what) const {
    return MakeError(ErrorCode::kIncompatible, "{}",
                 fmt::format("performance: the checkpoint holds {}: it was written with other "
                             "performance settings. Revert them, or start over with a new "
                             "checkpointLocation",
                             what));
  }

  bool HasClosable(int64_t watermark) const {
    // The model's task: windows whose every part came.
    const int64_t judged_to = JudgedTo();
    if (judged_to != INT64_MIN) {
      for (const auto& [at, handed] : handed_) {
        const int64_t end = at.first + window_us_;
        if ((handed.has_estimate && end <= judged_to) ||
            (handed.has_final && end + bound_us_ <= judged_to)) {
          return true;
        }
      }
    }
    // The joining task: pairings to decide, windows to hand over, how far it got to tell.
    if (watermark == INT64_MIN) return false;
    if (!deadlines_.empty() && deadlines_.begin()->first < watermark) return true;
    for (const auto& [at, window] : windows_) {
      const int64_t end = at.first + window_us_;
      if ((!window.estimated && end <= watermark) || end + bound_us_ <= watermark) return true;
    }
    return tasks_ > 1 && HandedUpTo(watermark) > sent_up_to_;
  }

  // A message from another task's stage: parts of windows of models this task owns, and up to
  // where that task has handed its windows over.
  Status Receive(std::string_view body) {
    ByteReader r(body);
    const uint32_t from = r.U32();
    const uint64_t parts = r.Varint();
    for (uint64_t i = 0; i < parts && !r.failed(); ++i) {
      const bool final = r.U8() != 0;
      const int64_t start = r.I64();
      std::string model(r.Str());
      Window window;
      if (r.failed() || !Window::Decode(r.Bytes(), window)) break;
      DRIFTD_TRY(Fits(window));
      Take({start, std::move(model)}, window, final);
    }
    const int64_t up_to = r.I64();
    if (r.failed() || !r.at_end() || from >= tasks_) {
      return MakeError(ErrorCode::kCorruption,
                       "performance: a message of {} bytes from another task is unreadable",
                       body.size());
    }
    if (up_to > handed_up_to_[from]) {
      handed_up_to_[from] = up_to;
      dirty_handed_up_to_.insert(from);
    }
    return Ok();
  }

  void Finish(const BatchContext& context, BatchOutput& output, StateChanges& changes,
              StageProgress& progress) {
    events_.clear();
    evaluations_.clear();
    const int64_t watermark = context.watermark_us;
    batch_id_ = context.batch_id;
    if (watermark != INT64_MIN) {
      Decide(watermark, changes);
      HandOver(watermark, output, changes);
    }
    Judge(output);
    for (const auto& at : dirty_handed_) {
      auto it = handed_.find(at);
      if (it != handed_.end()) {
        std::string value;
        it->second.Encode(value);
        changes.puts.emplace_back(StartModelKey(kHandedKey, at.first, at.second),
                                  std::move(value));
        handed_stored_.insert(at);
      } else if (handed_stored_.erase(at) > 0) {
        changes.deletes.push_back(StartModelKey(kHandedKey, at.first, at.second));
      }
    }
    dirty_handed_.clear();
    if (tasks_ > 1) {
      for (const uint32_t from : dirty_handed_up_to_) {
        std::string key(1, kHandedUpToKey);
        for (int shift = 24; shift >= 0; shift -= 8) {
          key.push_back(static_cast<char>((from >> shift) & 0xff));
        }
        std::string value;
        ByteWriter(value).I64(handed_up_to_[from]);
        changes.puts.emplace_back(std::move(key), std::move(value));
      }
    }
    dirty_handed_up_to_.clear();
    for (const std::string& key : dirty_) {
      auto it = pending_.find(key);
      if (it == pending_.end()) continue;
      std::string value;
      EncodePending(it->second, value);
      changes.puts.emplace_back(std::string(1, kPendingKey) + key, std::move(value));
    }
    dirty_.clear();
    for (const auto& at : dirty_windows_) {
      auto it = windows_.find(at);
      if (it == windows_.end()) continue;
      std::string value;
      it->second.Encode(value);
      changes.puts.emplace_back(StartModelKey(kWindowKey, at.first, at.second),
                                std::move(value));
    }
    dirty_windows_.clear();
    for (const std::string& name : dirty_models_) {
      std::string value;
      models_[name].Encode(value);
      changes.puts.emplace_back(std::string(1, kModelKey) + name, std::move(value));
    }
    dirty_models_.clear();
    for (const std::string& model : newly_admitted_) {
      changes.puts.emplace_back(std::string(1, kAdmittedKey) + model, std::string());
    }
    newly_admitted_.clear();
    if (!settings_written_) {
      // A checkpoint written before this record existed gets it at its next batch.
      std::string value;
      ByteWriter w(value);
      w.U8(kStateVersion);
      w.Varint(static_cast<uint64_t>(window_us_));
      changes.puts.emplace_back(std::string(1, kSettingsKey), std::move(value));
      settings_written_ = true;
    }
    for (const AlertEvent& event : events_) output.alerts.Add(event.model, event.ToJson());
    counts_.pending = waiting_;
    progress.join.Add(counts_);
    const int64_t pending = counts_.pending;
    counts_.pending = 0;
    totals_.Add(counts_);
    totals_.pending = pending;
    counts_ = JoinCounts{};
  }

  // What the watermark passed, one step at a time in deadline then key order: the same order
  // whatever the batching, so the windows' sums are too.
  void Decide(int64_t watermark, StateChanges& changes) {
    while (!deadlines_.empty() && deadlines_.begin()->first < watermark) {
      const std::string key(deadlines_.begin()->second);
      deadlines_.erase(deadlines_.begin());
      auto it = pending_.find(key);
      if (it == pending_.end()) continue;
      if (DecideNext(it->second)) {
        Schedule(it->first, it->second);
        MarkDirty(key);
        continue;
      }
      pending_.erase(it);
      dirty_.erase(key);
      changes.deletes.push_back(std::string(1, kPendingKey) + key);
    }
  }

  // The joining task's side: each window the watermark passed goes to its model's task, once
  // when it closes (what arrived, for the estimate) and once when its labels are in (the whole
  // of it, which then leaves this task); then how far its windows went (HandedUpTo), to every
  // task. One process (one task) hands them to itself.
  void HandOver(int64_t watermark, BatchOutput& output, StateChanges& changes) {
    std::vector<std::string> bodies(tasks_);
    std::vector<uint64_t> parts(tasks_, 0);
    // A message to `to` of the parts so far, and how far this task got (INT64_MIN: not said).
    auto send = [&](uint32_t to, int64_t up_to) {
      std::string body;
      ByteWriter w(body);
      w.U32(task_);
      w.Varint(parts[to]);
      body += bodies[to];
      ByteWriter(body).I64(up_to);
      output.repartition.push_back({to, "performance", TaskMessageBlock(body), false});
      bodies[to].clear();
      parts[to] = 0;
    };
    auto hand = [&](const std::pair<int64_t, std::string>& at, const Window& window,
                    bool final) {
      const uint32_t owner = TaskOfName(at.second);
      if (owner == task_) {
        Take(at, window, final);
        return;
      }
      ByteWriter w(bodies[owner]);
      w.U8(final ? 1 : 0);
      w.I64(at.first);
      w.Str(at.second);
      std::string bytes;
      window.Encode(bytes);
      w.Bytes(bytes);
      ++parts[owner];
      if (bodies[owner].size() >= kMaxMessageBytes) send(owner, INT64_MIN);
    };
    for (auto it = windows_.begin(); it != windows_.end();) {
      const int64_t end = it->first.first + window_us_;
      Window& window = it->second;
      if (!window.estimated && end <= watermark) {
        window.estimated = true;
        hand(it->first, window, /*final=*/false);
        dirty_windows_.insert(it->first);
      }
      if (end + bound_us_ > watermark) {
        ++it;
        continue;
      }
      hand(it->first, window, /*final=*/true);
      changes.deletes.push_back(StartModelKey(kWindowKey, it->first.first, it->first.second));
      dirty_windows_.erase(it->first);
      it = windows_.erase(it);
    }
    const int64_t up_to = HandedUpTo(watermark);
    if (up_to > handed_up_to_[task_]) {
      handed_up_to_[task_] = up_to;
      dirty_handed_up_to_.insert(task_);
    }
    const bool tell = tasks_ > 1 && up_to > sent_up_to_;
    if (tell) sent_up_to_ = up_to;
    // How far it got goes after the parts it covers (one partition keeps their order).
    for (uint32_t to = 0; to < tasks_; ++to) {
      if (to == task_ || (parts[to] == 0 && !tell)) continue;
      send(to, tell ? up_to : INT64_MIN);
    }
  }

  // A part of a model's window, from the task that joined its keys (this one or another).
  void Take(const std::pair<int64_t, std::string>& at, const Window& window, bool final) {
    Handed& handed = handed_[at];
    if (final) {
      handed.final.Merge(window);
      handed.has_final = true;
    } else {
      handed.estimate.Merge(window);
      handed.has_estimate = true;
    }
    dirty_handed_.insert(at);
  }

  // The latest point a window is due at (its end, or its end plus the bound) that `watermark`
  // is at or past: every window due by then has been handed over once the watermark got there.
  int64_t HandedUpTo(int64_t watermark) const {
    // Window ends and bounds are within 2^61 and 2^60 (kMaxJoinTimeUs): a watermark beyond
    // 2^62 either way says no more, and no sum below overflows.
    constexpr int64_t kFar = int64_t{1} << 62;
    const int64_t w = std::clamp(watermark, -kFar, kFar);
    const int64_t closed = FloorDiv(w, window_us_) * window_us_;
    const int64_t labelled = FloorDiv(w - bound_us_, window_us_) * window_us_ + bound_us_;
    return std::max(closed, labelled);
  }

  // How far every joining task has handed its windows over: what the model's task may judge.
  int64_t JudgedTo() const {
    int64_t to = INT64_MAX;
    for (const int64_t up_to : handed_up_to_) to = std::min(to, up_to);
    return to;
  }

  // The model's task's side: what is due, in the order of when it is due (estimates at the
  // window's end, the final row at its end plus the bound; then by model), once every joining
  // task handed its part over: each batch emits the next stretch of one sequence, so the rows
  // and the baselines and alert states they change depend neither on where batches end nor on
  // how many tasks joined the keys.
  void Judge(BatchOutput& output) {
    const int64_t judged_to = JudgedTo();
    if (judged_to == INT64_MIN || handed_.empty()) return;
    struct Due {
      int64_t at;
      std::string model;
      int64_t start;
      bool final;
      bool operator<(const Due& o) const {
        return std::tie(at, model, start, final) < std::tie(o.at, o.model, o.start, o.final);
      }
    };
    std::vector<Due> due;
    for (const auto& [at, handed] : handed_) {
      const int64_t end = at.first + window_us_;
      if (handed.has_estimate && end <= judged_to) {
        due.push_back({end, at.second, at.first, false});
      }
      if (handed.has_final && end + bound_us_ <= judged_to) {
        due.push_back({end + bound_us_, at.second, at.first, true});
      }
    }
    std::sort(due.begin(), due.end());
    for (const Due& d : due) {
      const std::pair<int64_t, std::string> at{d.start, d.model};
      auto it = handed_.find(at);
      Handed& handed = it->second;
      Window& window = d.final ? handed.final : handed.estimate;
      // A window whose every prediction turned out a duplicate of another model's (it was
      // counted while it headed its pairing) has nothing to say: no row, in any order.
      if (window.predictions != 0) Emit(d.model, d.start, window, d.final, output);
      window = Window{};
      (d.final ? handed.has_final : handed.has_estimate) = false;
      dirty_handed_.insert(at);
      if (handed.empty()) handed_.erase(it);
    }
  }

  const std::vector<AlertEvent>& events() const { return events_; }
  const std::vector<SharedEvaluation>& evaluations() const { return evaluations_; }
  JoinCounts totals() const { return totals_; }

 private:
  static double NumberOf(const Column& column, size_t row) {
    switch (column.type) {
      case FieldType::kDouble: return column.f64[row];
      case FieldType::kLong:
      case FieldType::kInt:
      case FieldType::kBoolean: return static_cast<double>(column.i64[row]);
      default: return NAN;
    }
  }

  static std::string StartModelKey(char prefix, int64_t start, const std::string& model) {
    std::string key(1, prefix);
    PutBigEndian(key, start);
    key += model;
    return key;
  }

  uint32_t TaskOfName(std::string_view name) const {
    return tasks_ == 1 ? 0 : static_cast<uint32_t>(StableHash(name) % tasks_);
  }

  size_t BinOf(double score) const {
    const double s = std::clamp(score, 0.0, 1.0);
    size_t bin = static_cast<size_t>(std::upper_bound(edges_.begin(), edges_.end(), s) -
                                     edges_.begin());
    bin = bin == 0 ? 0 : bin - 1;
    return std::min(bin, edges_.size() - 2);
  }
  size_t bins() const { return edges_.size() - 1; }
  bool PositiveBin(size_t bin) const { return edges_[bin] >= perf_.threshold; }

  void MarkDirty(const std::string& key) { dirty_.insert(key); }
  // `key` is the entry's own key in pending_, which the index points to.
  void Schedule(const std::string& key, JoinEntry& entry) {
    entry.deadline = entry.NextDeadline(bound_us_);
    deadlines_.emplace(entry.deadline, key);
  }
  void Unschedule(const std::string& key, const JoinEntry& entry) {
    deadlines_.erase({entry.deadline, key});
  }

  Window& WindowOf(const JoinEntry::Prediction& prediction) {
    const int64_t start = FloorDiv(prediction.t, window_us_) * window_us_;
    const std::pair<int64_t, std::string> at{start, *prediction.model};
    dirty_windows_.insert(at);
    Window& window = windows_[at];
    if (window.score_bins.empty() && classification_) window.score_bins.assign(bins(), 0);
    return window;
  }

  // The windows count what the entry's rows say so far: each pairing's head as an arrival
  // (for the estimates), and as labelled by its window's end when the label it has so far came
  // before that end. Counts only: the order they change in does not matter.
  void Recount(JoinEntry& entry) {
    size_t label = 0;
    int64_t previous_end = INT64_MIN;  // the previous pairing's head plus the bound
    int64_t head_end = INT64_MIN;
    for (JoinEntry::Prediction& prediction : entry.predictions) {
      const bool head = head_end == INT64_MIN || prediction.t > head_end;
      bool by_end = false;
      if (head) {
        previous_end = head_end;
        head_end = prediction.t + bound_us_;
        // Its first label: the earliest within the bound that no earlier pairing took.
        while (label < entry.labels.size() &&
               (entry.labels[label].t <= previous_end ||
                entry.labels[label].t < prediction.t - bound_us_)) {
          ++label;
        }
        const int64_t end = FloorDiv(prediction.t, window_us_) * window_us_ + window_us_;
        by_end = label < entry.labels.size() && entry.labels[label].t <= head_end &&
                 entry.labels[label].t < end;
      }
      if (head != prediction.counted) {
        CountArrival(prediction, head ? 1 : -1);
        prediction.counted = head;
      }
      if (by_end != prediction.by_end) {
        WindowOf(prediction).labelled_by_end += by_end ? 1 : -1;
        prediction.by_end = by_end;
      }
    }
  }

  // A prediction as its window's arrival (`step` 1), or no longer (-1).
  void CountArrival(const JoinEntry::Prediction& prediction, int64_t step) {
    Window& window = WindowOf(prediction);
    window.predictions += step;
    if (classification_) {
      window.score_bins[BinOf(prediction.score)] += step;
    } else if ((window.value_buckets[ValueBucket(prediction.score)] += step) == 0) {
      window.value_buckets.erase(ValueBucket(prediction.score));
    }
  }

  // Decides what is due first in the entry (a pairing, or a label of none), forgets the last
  // pairing once no label can be outside its bound, or the count of a span no row can come to
  // any more. Returns whether the entry stays.
  bool DecideNext(JoinEntry& entry) {
    if (entry.SpanDeadline(bound_us_) < entry.RowDeadline(bound_us_)) {
      entry.taken.PopFront();
      return entry.holds_anything();
    }
    if (entry.label_first(bound_us_)) {
      const JoinEntry::Label label = entry.labels.front();
      entry.labels.erase(entry.labels.begin());
      --waiting_;
      if (entry.last_head != INT64_MIN && label.t - entry.last_head <= 2 * bound_us_) {
        ++counts_.labels_outside_bound;
      } else {
        ++counts_.labels_without_prediction;
      }
    } else if (!entry.predictions.empty()) {
      DecidePairing(entry);
    } else {
      entry.last_head = INT64_MIN;  // nothing waits, and the last pairing is forgotten
      return entry.holds_anything();
    }
    if (entry.waiting()) return true;
    // Only the last unlabelled pairing's head and the spans' counts stay a while: no room for
    // rows.
    std::vector<JoinEntry::Prediction>().swap(entry.predictions);
    std::vector<JoinEntry::Label>().swap(entry.labels);
    return entry.holds_anything();
  }

  // The watermark passed the first pairing's head plus the bound: its outcome goes into the
  // head's window.
  void DecidePairing(JoinEntry& entry) {
    const JoinEntry::Prediction head = entry.predictions.front();
    const int64_t end = head.t + bound_us_;
    auto past = [end](const auto& row) { return row.t > end; };
    const auto predictions_end =
        std::find_if(entry.predictions.begin(), entry.predictions.end(), past);
    const auto labels_end = std::find_if(entry.labels.begin(), entry.labels.end(), past);
    const int64_t duplicates = predictions_end - entry.predictions.begin() - 1;
    const int64_t labels = labels_end - entry.labels.begin();
    counts_.duplicate_predictions += duplicates;
    Window& window = WindowOf(head);
    if (labels == 0) {
      ++window.unlabelled;
      ++counts_.unlabelled;
    } else {
      Labelled(head, entry.labels.front(), window);
      window.duplicate_labels += labels - 1;
      counts_.duplicate_labels += labels - 1;
    }
    waiting_ -= duplicates + 1 + labels;
    entry.predictions.erase(entry.predictions.begin(), predictions_end);
    entry.labels.erase(entry.labels.begin(), labels_end);
    entry.last_head = labels == 0 ? head.t : INT64_MIN;
    Recount(entry);
  }

  // A labelled prediction's outcome.
  void Labelled(const JoinEntry::Prediction& prediction, const JoinEntry::Label& label,
                Window& window) {
    ++window.labelled;
    ++counts_.labelled;
    ++window.delays[static_cast<size_t>(DelayBin(label.t - prediction.t))];
    const double score = prediction.score;
    if (classification_) {
      const bool positive = label.value >= 0.5;
      const bool predicted = score >= perf_.threshold;
      if (positive && predicted) ++window.tp;
      if (!positive && predicted) ++window.fp;
      if (!positive && !predicted) ++window.tn;
      if (positive && !predicted) ++window.fn;
      if (window.positive_bins.empty()) {
        window.positive_bins.assign(bins(), 0);
        window.negative_bins.assign(bins(), 0);
        window.score_sums.assign(bins(), ExactSum());
      }
      const size_t bin = BinOf(score);
      ++(positive ? window.positive_bins : window.negative_bins)[bin];
      window.score_sums[bin].Add(std::clamp(score, 0.0, 1.0));
      const double p = std::clamp(score, 1e-15, 1 - 1e-15);
      window.log_loss.Add(positive ? -std::log(p) : -std::log(1 - p));
    } else {
      const double error = score - label.value;
      window.abs_sum.Add(std::fabs(error));
      window.sq_sum.Add(error * error);
      window.abs_sq_sum.Add(error * error);
      window.error_sum.Add(error);
      if (label.value != 0) {
        window.pct_sum.Add(std::fabs(error / label.value));
        ++window.pct_n;
      }
      auto& bucket = window.bucket_errors[ValueBucket(score)];
      ++bucket.first;
      bucket.second.first.Add(std::fabs(error));
      bucket.second.second.Add(error * error);
    }
  }

  // ---- metrics --------------------------------------------------------------------------------

  struct Realized {
    double accuracy = NAN, precision = NAN, recall = NAN, f1 = NAN, roc_auc = NAN,
           roc_auc_error = NAN, log_loss = NAN, ece = NAN;
    double mae = NAN, rmse = NAN, mape = NAN, bias = NAN, mae_sd = NAN;
  };
  Realized RealizedOf(const Window& w) const {
    Realized r;
    const double m = static_cast<double>(w.labelled);
    if (m <= 0) return r;
    if (classification_) {
      r.accuracy = static_cast<double>(w.tp + w.tn) / m;
      r.precision = w.tp + w.fp > 0 ? static_cast<double>(w.tp) / static_cast<double>(w.tp + w.fp)
                                    : NAN;
      r.recall = w.tp + w.fn > 0 ? static_cast<double>(w.tp) / static_cast<double>(w.tp + w.fn)
                                 : NAN;
      r.f1 = w.tp > 0 ? 2.0 * static_cast<double>(w.tp) /
                            static_cast<double>(2 * w.tp + w.fp + w.fn)
                      : 0;
      std::vector<double> pos(w.positive_bins.begin(), w.positive_bins.end());
      std::vector<double> neg(w.negative_bins.begin(), w.negative_bins.end());
      Auc(pos, neg, r.roc_auc, r.roc_auc_error);
      r.log_loss = w.log_loss.Value() / m;
      double ece = 0;
      for (size_t b = 0; b < w.score_sums.size(); ++b) {
        ece += std::fabs(static_cast<double>(w.positive_bins[b]) - w.score_sums[b].Value());
      }
      r.ece = ece / m;
    } else {
      r.mae = w.abs_sum.Value() / m;
      r.rmse = std::sqrt(w.sq_sum.Value() / m);
      r.mape = w.pct_n > 0 ? w.pct_sum.Value() / static_cast<double>(w.pct_n) : NAN;
      r.bias = w.error_sum.Value() / m;
      r.mae_sd = std::sqrt(std::max(0.0, w.abs_sq_sum.Value() / m - r.mae * r.mae));
    }
    return r;
  }

  struct Estimated {
    double accuracy = NAN, accuracy_sd = NAN, f1 = NAN, roc_auc = NAN;
    double mae = NAN, mae_sd = NAN;
  };
  // CBPE (classification): each bin's calibrated probability of a positive from the baseline's
  // labelled predictions, smoothed towards the bin's mean score; DLE (regression): each value
  // bucket's mean |error| on the baseline, the nearest bucket's for one the baseline lacks.
  Estimated EstimateOf(const Window& w, const Model& model) const {
    Estimated e;
    const Window& base = model.baseline;
    const double n = static_cast<double>(w.predictions);
    if (n <= 0) return e;
    if (classification_) {
      if (base.positive_bins.empty()) return e;
      double tp = 0, fp = 0, fn = 0, tn = 0, var = 0;
      std::vector<double> pos(bins(), 0);
      std::vector<double> neg(bins(), 0);
      constexpr double kPrior = 2;  // pseudo-labels at the bin's own score
      for (size_t b = 0; b < bins(); ++b) {
        const double count = static_cast<double>(w.score_bins[b]);
        const double labelled =
            static_cast<double>(base.positive_bins[b] + base.negative_bins[b]);
        const double mid = labelled > 0 ? base.score_sums[b].Value() / labelled
                                        : (edges_[b] + edges_[b + 1]) / 2;
        const double c =
            (static_cast<double>(base.positive_bins[b]) + kPrior * mid) / (labelled + kPrior);
        pos[b] = count * c;
        neg[b] = count * (1 - c);
        const bool positive_bin = PositiveBin(b);
        (positive_bin ? tp : fn) += count * c;
        (positive_bin ? fp : tn) += count * (1 - c);
        // Each prediction's correctness is Bernoulli(q); the bin's calibration is an estimate
        // from `labelled` (+ prior) labels.
        const double q = positive_bin ? c : 1 - c;
        var += count * q * (1 - q) + count * count * c * (1 - c) / (labelled + kPrior);
      }
      e.accuracy = (tp + tn) / n;
      e.accuracy_sd = std::sqrt(var) / n;
      e.f1 = tp > 0 ? 2 * tp / (2 * tp + fp + fn) : 0;
      double error = 0;
      Auc(pos, neg, e.roc_auc, error);
    } else {
      if (base.bucket_errors.empty()) return e;
      double sum = 0;
      double var = 0;
      for (const auto& [bucket, count] : w.value_buckets) {
        auto it = base.bucket_errors.lower_bound(bucket);
        if (it == base.bucket_errors.end()) --it;
        if (it != base.bucket_errors.begin()) {
          auto before = std::prev(it);
          if (std::abs(before->first - bucket) < std::abs(it->first - bucket)) it = before;
        }
        const double m = static_cast<double>(it->second.first);
        const double mean = it->second.second.first.Value() / m;
        const double mean_sq = it->second.second.second.Value() / m;
        sum += static_cast<double>(count) * mean;
        var += static_cast<double>(count) * std::max(0.0, mean_sq - mean * mean);
      }
      e.mae = sum / n;
      e.mae_sd = std::sqrt(var) / n;
    }
    return e;
  }

  // One-sided: is the window worse than the baseline beyond its sampling spread (sd) and the
  // effect floor? `worse` is positive when it is (lower accuracy, higher MAE).
  Verdict Judge(double value, double baseline, double sd, double worse, double floor) const {
    Verdict v;
    v.value = value;
    v.baseline = baseline;
    v.sd = sd;
    if (!std::isfinite(value) || !std::isfinite(baseline) || !(sd > 0)) return v;
    v.judged = true;
    v.effect = worse;
    v.score = calibration::ScoreOfZ(worse / sd);
    const double sign = classification_ ? -1 : 1;  // the direction of worse
    v.warn_at = baseline + sign * std::max(floor, perf_.warn * sd);
    v.alert_at = baseline + sign * std::max(floor, perf_.alert * sd);
    if (worse >= floor) {
      if (v.score >= perf_.alert) {
        v.level = AlertLevel::kAlert;
      } else if (v.score >= perf_.warn) {
        v.level = AlertLevel::kWarn;
      }
    }
    return v;
  }

  // The alert state machine of one judged series; an event when the level changed.
  // `extras`: the window's other values, for the status page and metrics beside the judged one.
  void Step(const std::string& model_name, Model& model, bool estimated, int64_t start,
            const Window& window, const Verdict& v,
            std::vector<std::pair<std::string_view, double>> extras) {
    AlertStateMachine& state = estimated ? model.estimated_state : model.realized_state;
    std::string& incident = estimated ? model.estimated_incident : model.realized_incident;
    const std::string series = fmt::format("{}:{}", estimated ? "estimated" : "performance",
                                           classification_ ? "accuracy" : "mae");
    const std::string_view detector = classification_
                                          ? (estimated ? "estimated_accuracy_drop" : "accuracy_drop")
                                          : (estimated ? "estimated_mae_rise" : "mae_rise");
    AlertPolicy policy;
    policy.hysteresis = 1;
    policy.cooldown_ms = 0;
    const AlertLevel previous = state.state();
    const bool back = v.level == AlertLevel::kOk;
    auto changed = state.Step(v.level, /*immediate=*/true, back, start / 1000, policy);

    auto evaluation = std::make_shared<Evaluation>();
    evaluation->model = model_name;
    evaluation->series = series;
    evaluation->evaluated = true;
    evaluation->previous_level = previous;
    evaluation->level = state.state();
    evaluation->window_start_us = start;
    evaluation->window_end_us = start + window_us_;
    evaluation->window_n = estimated ? window.predictions : window.labelled;
    evaluation->window_end_record = evaluation->window_n;
    evaluation->window_mean = v.value;
    evaluation->baseline_kind = BaselineKind::kWarmup;
    evaluation->baseline_n = model.baseline.labelled;
    evaluation->baseline_mean = v.baseline;
    DetectorReading reading;
    reading.detector = detector;
    reading.statistic = v.value;
    reading.score = v.score;
    reading.warn = perf_.warn;
    reading.alert = perf_.alert;
    reading.warn_threshold = v.warn_at;
    reading.alert_threshold = v.alert_at;
    reading.effect = v.effect;
    reading.min_effect = classification_ ? perf_.min_drop : perf_.min_drop * v.baseline;
    reading.level = v.level;
    reading.window_level = v.level;
    if (estimated && std::isfinite(v.sd)) {
      reading.extras.emplace_back("low", v.value - 1.96 * v.sd);
      reading.extras.emplace_back("high", v.value + 1.96 * v.sd);
    }
    // The alert carries the band only (its row's shape is the alerts stream's); the
    // evaluation, which the status page and metrics read, the window's other values too.
    DetectorReading alert_reading = reading;
    for (const auto& extra : extras) {
      if (std::isfinite(extra.second)) reading.extras.push_back(extra);
    }
    evaluation->detectors.push_back(reading);
    evaluation->batch_id = batch_id_;
    evaluations_.push_back(evaluation);
    if (!changed) return;

    AlertEvent event;
    event.level = *changed;
    event.previous_level = previous;
    event.model = model_name;
    event.series = series;
    event.detector = std::string(detector);
    event.statistic = v.value;
    event.threshold = *changed == AlertLevel::kAlert ? v.alert_at : v.warn_at;
    event.score = v.score;
    event.window_start_record = 0;
    event.window_end_record = evaluation->window_n;
    event.window_start_us = start;
    event.window_end_us = start + window_us_;
    event.baseline_kind = BaselineKind::kWarmup;
    event.baseline_n = model.baseline.labelled;
    event.baseline_mean = v.baseline;
    event.window_n = evaluation->window_n;
    event.window_mean = v.value;
    event.detectors.push_back(std::move(alert_reading));
    event.batch_id = batch_id_;
    event.alert_id = HexId(Fnv1a({model_name, series, detector, ToString(*changed),
                                  std::to_string(start)}));
    if (previous == AlertLevel::kOk || previous == AlertLevel::kResolved) {
      incident = event.alert_id;
    }
    event.incident_id = incident.empty() ? event.alert_id : incident;
    events_.push_back(std::move(event));
  }

  // The window's row, and for a model with a baseline its verdicts.
  void Emit(const std::string& model_name, int64_t start, const Window& window, bool final,
            BatchOutput& output) {
    Model& model = models_[model_name];
    dirty_models_.insert(model_name);
    const bool frozen = model.frozen(perf_.baseline_windows);
    const double n = static_cast<double>(window.predictions);
    const double coverage = n > 0 ? static_cast<double>(window.labelled) / n : 0;
    const double coverage_by_end = n > 0 ? static_cast<double>(window.labelled_by_end) / n : 0;
    const bool covered = final && window.predictions > 0 && coverage >= perf_.min_coverage;
    const Realized realized = RealizedOf(window);
    const Realized base = RealizedOf(model.baseline);
    const Estimated estimate = frozen ? EstimateOf(window, model) : Estimated{};

    std::optional<Verdict> realized_verdict;
    std::optional<Verdict> estimated_verdict;
    if (frozen) {
      const double m0 = static_cast<double>(model.baseline.labelled);
      if (classification_) {
        const double a0 = base.accuracy;
        const double p0 = a0 * (1 - a0);
        if (!final && std::isfinite(estimate.accuracy)) {
          estimated_verdict =
              Judge(estimate.accuracy, a0,
                    std::sqrt(estimate.accuracy_sd * estimate.accuracy_sd + p0 / m0),
                    a0 - estimate.accuracy, perf_.min_drop);
        }
        if (covered && window.labelled >= kMinJudged) {
          const double m = static_cast<double>(window.labelled);
          realized_verdict = Judge(realized.accuracy, a0, std::sqrt(p0 / m + p0 / m0),
                                   a0 - realized.accuracy, perf_.min_drop);
        }
      } else {
        const double mae0 = base.mae;
        const double var0 = base.mae_sd * base.mae_sd;
        if (!final && std::isfinite(estimate.mae)) {
          estimated_verdict =
              Judge(estimate.mae, mae0, std::sqrt(estimate.mae_sd * estimate.mae_sd + var0 / m0),
                    estimate.mae - mae0, perf_.min_drop * mae0);
        }
        if (covered && window.labelled >= kMinJudged) {
          const double m = static_cast<double>(window.labelled);
          realized_verdict = Judge(realized.mae, mae0, std::sqrt(var0 / m + var0 / m0),
                                   realized.mae - mae0, perf_.min_drop * mae0);
        }
      }
    }
    if (estimated_verdict && estimated_verdict->judged) {
      // The estimate's own 95% band (the performance row's), beside the judging band (`low`,
      // `high`: the estimate against the baseline, both uncertain).
      const double value = classification_ ? estimate.accuracy : estimate.mae;
      const double sd = classification_ ? estimate.accuracy_sd : estimate.mae_sd;
      std::vector<std::pair<std::string_view, double>> extras = {
          {"band_low", value - 1.96 * sd},
          {"band_high", value + 1.96 * sd},
          {"predictions", n},
          {"coverage_at_window_end", coverage_by_end}};
      if (classification_) {
        extras.insert(extras.end(), {{"f1", estimate.f1}, {"roc_auc", estimate.roc_auc}});
      }
      Step(model_name, model, /*estimated=*/true, start, window, *estimated_verdict,
           std::move(extras));
    }
    if (realized_verdict && realized_verdict->judged) {
      // The realized values, and the estimate of the same window beside them.
      std::vector<std::pair<std::string_view, double>> extras = {
          {"predictions", n},
          {"labelled", static_cast<double>(window.labelled)},
          {"coverage", coverage}};
      if (classification_) {
        const double band = 1.96 * estimate.accuracy_sd;
        extras.insert(extras.end(), {{"precision", realized.precision},
                                     {"recall", realized.recall},
                                     {"f1", realized.f1},
                                     {"roc_auc", realized.roc_auc},
                                     {"log_loss", realized.log_loss},
                                     {"ece", realized.ece},
                                     {"estimated", estimate.accuracy},
                                     {"estimated_low", estimate.accuracy - band},
                                     {"estimated_high", estimate.accuracy + band}});
      } else {
        extras.insert(extras.end(), {{"rmse", realized.rmse},
                                     {"mape", realized.mape},
                                     {"bias", realized.bias},
                                     {"estimated", estimate.mae},
                                     {"estimated_low", estimate.mae - 1.96 * estimate.mae_sd},
                                     {"estimated_high", estimate.mae + 1.96 * estimate.mae_sd}});
      }
      Step(model_name, model, /*estimated=*/false, start, window, *realized_verdict,
           std::move(extras));
    }
    // A covered final window before the baseline froze joins it.
    const bool joins_baseline = final && covered && !frozen;
    if (joins_baseline) {
      model.baseline.Merge(window);
      ++model.baseline_windows;
    }

    if (want_rows_) {
      std::string row;
      JsonObject o(row);
      o.String("model", model_name);
      std::string w;
      JsonObject win(w);
      win.Timestamp("start", start);
      win.Timestamp("end", start + window_us_);
      win.Close();
      o.Raw("window", w);
      o.String("task", classification_ ? "classification" : "regression");
      o.String("status", !final ? "estimated" : covered ? "final" : "labels_missing");
      o.Int("predictions", window.predictions);
      // When the window closes, what is known for sure: the labels that came by its end (later
      // ones depend on how far the join got, which batching decides).
      o.Int("labelled", final ? window.labelled : window.labelled_by_end);
      o.Number("coverage", final ? coverage : coverage_by_end);
      o.Number("coverage_at_window_end", coverage_by_end);
      if (final) {
        o.Int("unlabelled", window.unlabelled);
        o.Int("duplicate_labels", window.duplicate_labels);
        std::string delays;
        JsonObject d(delays);
        NumberOrNull(d, "p50_seconds", DelayQuantile(window, 0.5));
        NumberOrNull(d, "p90_seconds", DelayQuantile(window, 0.9));
        NumberOrNull(d, "max_seconds", DelayQuantile(window, 1.0));
        d.Close();
        o.Raw("label_delay", delays);
      }
      if (final && window.labelled > 0) {
        std::string r;
        JsonObject rr(r);
        if (classification_) {
          NumberOrNull(rr, "accuracy", realized.accuracy);
          NumberOrNull(rr, "precision", realized.precision);
          NumberOrNull(rr, "recall", realized.recall);
          NumberOrNull(rr, "f1", realized.f1);
          NumberOrNull(rr, "roc_auc", realized.roc_auc);
          NumberOrNull(rr, "roc_auc_error", realized.roc_auc_error);
          NumberOrNull(rr, "log_loss", realized.log_loss);
          NumberOrNull(rr, "ece", realized.ece);
        } else {
          NumberOrNull(rr, "mae", realized.mae);
          NumberOrNull(rr, "rmse", realized.rmse);
          NumberOrNull(rr, "mape", realized.mape);
          NumberOrNull(rr, "bias", realized.bias);
        }
        rr.Close();
        o.Raw("realized", r);
      } else {
        o.Null("realized");
      }
      if (frozen && (std::isfinite(estimate.accuracy) || std::isfinite(estimate.mae))) {
        std::string e;
        JsonObject ee(e);
        if (classification_) {
          NumberOrNull(ee, "accuracy", estimate.accuracy);
          NumberOrNull(ee, "accuracy_low", estimate.accuracy - 1.96 * estimate.accuracy_sd);
          NumberOrNull(ee, "accuracy_high", estimate.accuracy + 1.96 * estimate.accuracy_sd);
          NumberOrNull(ee, "f1", estimate.f1);
          NumberOrNull(ee, "roc_auc", estimate.roc_auc);
        } else {
          NumberOrNull(ee, "mae", estimate.mae);
          NumberOrNull(ee, "mae_low", estimate.mae - 1.96 * estimate.mae_sd);
          NumberOrNull(ee, "mae_high", estimate.mae + 1.96 * estimate.mae_sd);
        }
        ee.Close();
        o.Raw("estimated", e);
      } else {
        o.Null("estimated");
      }
      std::string b;
      JsonObject bb(b);
      bb.Int("windows", model.baseline_windows);
      bb.Int("n", model.baseline.labelled);
      NumberOrNull(bb, classification_ ? "accuracy" : "mae",
                   classification_ ? base.accuracy : base.mae);
      bb.Bool("frozen", model.frozen(perf_.baseline_windows));
      bb.Close();
      o.Raw("baseline", b);
      const Verdict* verdict = final ? (realized_verdict ? &*realized_verdict : nullptr)
                                     : (estimated_verdict ? &*estimated_verdict : nullptr);
      if (verdict != nullptr && verdict->judged) {
        o.String("level", LevelName(verdict->level));
        o.Number("score", verdict->score);
      } else {
        o.Null("level");
        o.Null("score");
      }
      o.Int("batch_id", batch_id_);
      o.Close();
      output.performance.Add(model_name, std::move(row));
    }
  }

  static std::string_view LevelName(AlertLevel level) { return ToString(level); }

  LabelsSpec labels_;
  PerformanceSpec perf_;
  std::string pipeline_;
  int64_t bound_us_ = 0;
  int64_t window_us_ = 0;
  bool classification_ = true;
  bool want_rows_ = false;
  int model_column_ = -1, key_column_ = -1, score_column_ = -1, time_column_ = -1;
  int label_key_column_ = -1, label_column_ = -1, label_time_column_ = -1;
  std::vector<double> edges_;

  // The models the join holds state for (pending predictions, windows, baselines), at most
  // max_models_ besides "(other)", and the last one a prediction was admitted for.
  int64_t max_models_ = 0;
  StringSet known_models_;
  std::vector<std::string> newly_admitted_;  // since the last Finish
  StringSet names_;  // the model names pending predictions point to
  std::string last_admitted_;
  std::unordered_map<std::string, JoinEntry> pending_;
  int64_t waiting_ = 0;  // predictions and labels in pending_
  // Each entry's next deadline, by the entry's key in pending_ (nodes do not move).
  std::set<std::pair<int64_t, std::string_view>> deadlines_;
  std::map<std::pair<int64_t, std::string>, Window> windows_;
  std::map<std::string, Model> models_;
  // Scaled out: this task, the number of tasks; the model's task's parts of windows handed over
  // (and which are in the checkpoint), and how far each joining task handed its windows over;
  // how far this one last told the others.
  uint32_t task_ = 0;
  uint32_t tasks_ = 1;
  std::map<std::pair<int64_t, std::string>, Handed> handed_;
  std::set<std::pair<int64_t, std::string>> handed_stored_;
  std::set<std::pair<int64_t, std::string>> dirty_handed_;
  std::vector<int64_t> handed_up_to_ = std::vector<int64_t>(1, INT64_MIN);
  std::set<uint32_t> dirty_handed_up_to_;
  int64_t sent_up_to_ = INT64_MIN;
  std::set<std::string> dirty_;
  std::set<std::pair<int64_t, std::string>> dirty_windows_;
  std::set<std::string> dirty_models_;
  bool settings_written_ = false;  // kSettingsKey is in the checkpoint
  JoinCounts counts_;  // this batch
  JoinCounts totals_;
  int64_t batch_id_ = 0;
  std::vector<AlertEvent> events_;
  std::vector<SharedEvaluation> evaluations_;
};

Result<std::unique_ptr<PerformanceStage>> PerformanceStage::Create(const PipelineSpec& spec) {
  auto impl = std::make_unique<Impl>();
  DRIFTD_TRY(impl->Init(spec));
  return std::unique_ptr<PerformanceStage>(new PerformanceStage(std::move(impl)));
}

PerformanceStage::PerformanceStage(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
PerformanceStage::~PerformanceStage() = default;

Status PerformanceStage::Restore(std::string_view key, std::string_view value) {
  return impl_->Restore(key, value);
}
void PerformanceStage::Process(const RecordBatch& batch, const RowTimes& times, BatchOutput&) {
  impl_->Predictions(batch, times);
}
void PerformanceStage::ProcessLabels(const RecordBatch& labels, const RowTimes& times) {
  impl_->Labels(labels, times);
}
void PerformanceStage::SetTask(uint32_t id, uint32_t tasks) { impl_->SetTask(id, tasks); }
Status PerformanceStage::Receive(std::string_view message) { return impl_->Receive(message); }
bool PerformanceStage::HasClosableWindows(int64_t watermark_us) const {
  return impl_->HasClosable(watermark_us);
}
void PerformanceStage::Finish(const BatchContext& context, BatchOutput& output,
                              StateChanges& changes, StageProgress& progress) {
  impl_->Finish(context, output, changes, progress);
}
const std::vector<AlertEvent>& PerformanceStage::last_events() const { return impl_->events(); }
const std::vector<SharedEvaluation>& PerformanceStage::last_evaluations() const {
  return impl_->evaluations();
}
JoinCounts PerformanceStage::counts() const { return impl_->totals(); }

PipelineSpec LabelsPipeline(const PipelineSpec& spec) {
  PipelineSpec labels;
  labels.name = spec.name;
  labels.file = spec.file;
  labels.schema = spec.labels.schema;
  labels.source = spec.labels.source;
  labels.checkpoint_location = spec.checkpoint_location;
  labels.secrets = spec.secrets;
  labels.scale_out = spec.scale_out;  // its source joins the query's consumer group
  return labels;
}

}  // namespace driftd
