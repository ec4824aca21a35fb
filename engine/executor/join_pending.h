// The labels' join's waiting rows: what one join key holds until the watermark decides it, and
// its persisted layout (engine/executor/performance_stage.cc joins; this is its state).
#pragma once

#include <algorithm>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <string_view>
#include <tuple>
#include <utility>
#include <vector>

namespace driftd {

// How many rows one join key took per span of the bound (by the span's start), oldest span
// first: the first span inline, later ones (a key busy for longer than the bound) apart, since
// most keys are a request's, with rows in one or two spans.
class SpanCounts {
 public:
  SpanCounts() = default;
  SpanCounts(const SpanCounts& other)
      : first_(other.first_),
        first_rows_(other.first_rows_),
        rest_(other.rest_ ? std::make_unique<Rest>(*other.rest_) : nullptr) {}
  SpanCounts& operator=(const SpanCounts& other) {
    SpanCounts copy(other);
    *this = std::move(copy);
    return *this;
  }
  SpanCounts(SpanCounts&&) noexcept = default;
  SpanCounts& operator=(SpanCounts&&) noexcept = default;

  bool empty() const { return first_rows_ == 0; }
  size_t size() const { return empty() ? 0 : 1 + (rest_ ? rest_->size() : 0); }
  /// The oldest span's start, and the latest's; only when not empty.
  int64_t front_start() const { return first_; }
  int64_t back_start() const { return rest_ && !rest_->empty() ? rest_->back().first : first_; }
  void PopFront() {
    if (!rest_ || rest_->empty()) {
      first_rows_ = 0;
      rest_.reset();
      return;
    }
    first_ = rest_->front().first;
    first_rows_ = rest_->front().second;
    rest_->erase(rest_->begin());
    if (rest_->empty()) rest_.reset();
  }
  /// The count of `span`, made (0) when there is none: the caller counts a row in it.
  uint32_t& In(int64_t span) {
    if (empty()) {
      first_ = span;
      return first_rows_;
    }
    if (span == first_) return first_rows_;
    if (!rest_) rest_ = std::make_unique<Rest>();
    if (span < first_) {
      rest_->insert(rest_->begin(), {first_, first_rows_});
      first_ = span;
      first_rows_ = 0;
      return first_rows_;
    }
    auto it = std::lower_bound(rest_->begin(), rest_->end(), span,
                               [](const auto& entry, int64_t s) { return entry.first < s; });
    if (it == rest_->end() || it->first != span) it = rest_->insert(it, {span, 0});
    return it->second;
  }
  /// `f(span start, rows)` for each span, oldest first.
  template <typename F>
  void ForEach(F f) const {
    if (empty()) return;
    f(first_, first_rows_);
    if (rest_) {
      for (const auto& [span, rows] : *rest_) f(span, rows);
    }
  }

 private:
  using Rest = std::vector<std::pair<int64_t, uint32_t>>;
  int64_t first_ = 0;
  uint32_t first_rows_ = 0;  // 0: no span
  std::unique_ptr<Rest> rest_;
};

// The rows of one join key that wait for the watermark, and the last pairing decided for it.
//
// The pairing rule, a function of the key's rows alone (so of neither the batching nor the order
// the two inputs are read in): predictions in event-time order, the earliest heads a pairing and
// those within the bound after it are its duplicates; the next one later than that heads the
// next pairing (a key used again). A label belongs to the earliest pairing whose head is within
// the bound of it; of a pairing's labels the earliest counts and the others are duplicates. A
// label of no pairing is outside the bound when the last pairing of its key went unlabelled and was
// headed at most twice the bound before it (its label came later than the bound), and without a
// prediction otherwise.
//
// A pairing is decided once the watermark is past its head plus the bound, and a label of no
// pairing once it is past the label plus the bound: a row that is not late comes before either,
// since its event time is at or past the watermark when it comes. Until then the windows count
// what the rows that came say so far (arrivals, labels by the window's end), which is final for a
// window once the watermark reaches its end.
struct JoinEntry {
  struct Prediction {
    int64_t t = 0;
    double score = 0;
    const std::string* model = nullptr;  // interned: one string per model for every entry
    bool counted = false;  // its window counts it as an arrival (it heads a pairing)
    bool by_end = false;   // ...and as labelled by the window's end
    // Ties of time and score go by model (two models scoring one request), not by arrival.
    auto order() const { return std::tie(t, score, *model); }
  };
  struct Label {
    int64_t t = 0;
    double value = 0;
    auto order() const { return std::tie(t, value); }
  };
  std::vector<Prediction> predictions;  // by (t, score, model)
  std::vector<Label> labels;            // by (t, value)
  /// The head of the last pairing decided if it went unlabelled (INT64_MIN: none), kept until
  /// no label can be outside its bound.
  int64_t last_head = INT64_MIN;
  /// The rows the key took per span of the bound (by the span's start: floor(t / bound) x
  /// bound), oldest span first, for the cap on a key's rows; kept until the watermark is past
  /// the span's end (its start plus the bound, the bound of the day if it changed).
  SpanCounts taken;
  /// Where the entry is in the deadline queue (not persisted).
  int64_t deadline = 0;

  bool waiting() const { return !predictions.empty() || !labels.empty(); }
  /// Whether the earliest label is of no pairing: no prediction waits within the bound after it
  /// (an earlier one would be decided first).
  bool label_first(int64_t bound_us) const {
    return !labels.empty() &&
           (predictions.empty() || predictions.front().t > labels.front().t + bound_us);
  }
  /// When its first row (or the last pairing) is due; INT64_MAX: nothing is.
  int64_t RowDeadline(int64_t bound_us) const {
    if (label_first(bound_us)) return labels.front().t + bound_us;
    if (!predictions.empty()) return predictions.front().t + bound_us;
    if (last_head != INT64_MIN) return last_head + 3 * bound_us;
    return INT64_MAX;
  }
  /// When its oldest span of taken rows ends; INT64_MAX: none.
  int64_t SpanDeadline(int64_t bound_us) const {
    return taken.empty() ? INT64_MAX : taken.front_start() + bound_us;
  }
  int64_t NextDeadline(int64_t bound_us) const {
    return std::min(RowDeadline(bound_us), SpanDeadline(bound_us));
  }
  /// Whether anything keeps the entry: rows, the last pairing, a span's count.
  bool holds_anything() const { return waiting() || last_head != INT64_MIN || !taken.empty(); }
  /// The count of rows taken in `span`, made when there is none.
  uint32_t& TakenIn(int64_t span) { return taken.In(span); }
};

/// Appends the entry's persisted form (layout 3) to `out`.
void EncodePending(const JoinEntry& p, std::string& out);
/// Reads layout 3, 2 (no span counts) or 1 (one prediction, one label and their counts);
/// `intern` gives the one string of a model name. False when the bytes are not an entry.
bool DecodePending(std::string_view in, JoinEntry& p,
                   const std::function<const std::string*(std::string_view)>& intern);

}  // namespace driftd
