#include "engine/executor/join_pending.h"

#include <algorithm>

#include "engine/drift/codec.h"

namespace driftd {

namespace {

using drift::ByteReader;
using drift::ByteWriter;

// Layout 1 (before pairings: one prediction, one label and their counts) and 2 (before the
// spans' counts) are still read.
constexpr uint8_t kPendingVersion = 3;

}  // namespace

void EncodePending(const JoinEntry& p, std::string& out) {
  ByteWriter w(out);
  w.U8(kPendingVersion);
  w.Varint(p.predictions.size());
  for (const JoinEntry::Prediction& x : p.predictions) {
    w.Zigzag(x.t);
    w.F64(x.score);
    w.Str(*x.model);
    w.U8(static_cast<uint8_t>((x.counted ? 1 : 0) | (x.by_end ? 2 : 0)));
  }
  w.Varint(p.labels.size());
  for (const JoinEntry::Label& x : p.labels) {
    w.Zigzag(x.t);
    w.F64(x.value);
  }
  w.Zigzag(p.last_head);
  w.Varint(p.taken.size());
  p.taken.ForEach([&](int64_t span, uint32_t rows) {
    w.Zigzag(span);
    w.Varint(rows);
  });
}

namespace {

// Layout 1: flags (prediction, label, counted by the end), model, the prediction's time and
// score, the label's time and value, and how many labels and predictions had the key. Its
// labels come back as copies of the one kept: with a prediction, the copies are the duplicates
// layout 1 would have counted when it decided the entry; without, each is a label without a
// prediction (a pairing's duplicates only are duplicates now). "Labelled by the end" keeps what
// layout 1 said (a label at the window's very end counted), which the window's count matches.
bool DecodePendingV1(ByteReader& r, JoinEntry& p,
                     const std::function<const std::string*(std::string_view)>& intern) {
  const uint8_t flags = r.U8();
  JoinEntry::Prediction prediction;
  prediction.model = intern(r.Str());
  prediction.t = r.Zigzag();
  prediction.score = r.F64();
  prediction.counted = true;
  prediction.by_end = flags & 4;
  JoinEntry::Label label;
  label.t = r.Zigzag();
  label.value = r.F64();
  const uint64_t labels = r.Varint();
  r.Varint();  // predictions: their duplicates were counted when they came
  if (r.failed() || !r.at_end() || labels > 1'000'000) return false;
  if (flags & 1) p.predictions.push_back(std::move(prediction));
  if (flags & 2) p.labels.assign(std::max<uint64_t>(labels, 1), label);
  return p.holds_anything();
}

}  // namespace

bool DecodePending(std::string_view in, JoinEntry& p,
                   const std::function<const std::string*(std::string_view)>& intern) {
  ByteReader r(in);
  const uint8_t version = r.U8();
  if (version == 1) return DecodePendingV1(r, p, intern);
  if (version != 2 && version != kPendingVersion) return false;
  const uint64_t predictions = r.Varint();
  for (uint64_t i = 0; i < predictions && !r.failed(); ++i) {
    JoinEntry::Prediction x;
    x.t = r.Zigzag();
    x.score = r.F64();
    x.model = intern(r.Str());
    const uint8_t flags = r.U8();
    x.counted = flags & 1;
    x.by_end = flags & 2;
    p.predictions.push_back(std::move(x));
  }
  const uint64_t labels = r.Varint();
  for (uint64_t i = 0; i < labels && !r.failed(); ++i) {
    JoinEntry::Label x;
    x.t = r.Zigzag();
    x.value = r.F64();
    p.labels.push_back(x);
  }
  p.last_head = r.Zigzag();
  if (version >= 3) {
    const uint64_t spans = r.Varint();
    for (uint64_t i = 0; i < spans && !r.failed(); ++i) {
      const int64_t span = r.Zigzag();
      const uint64_t rows = r.Varint();
      // Spans start at event times the join takes (within 2^61 us of 1970), in order, and
      // count at least one row.
      constexpr int64_t kFar = int64_t{1} << 62;
      if (span < -kFar || span > kFar || rows == 0 || rows > UINT32_MAX ||
          (!p.taken.empty() && span <= p.taken.back_start())) {
        return false;
      }
      p.taken.In(span) = static_cast<uint32_t>(rows);
    }
  }
  if (r.failed() || !r.at_end() || !p.holds_anything()) return false;
  // Written in this order; sorted again so that a change of the order's ties reads it right.
  std::stable_sort(p.predictions.begin(), p.predictions.end(),
                   [](const auto& a, const auto& b) { return a.order() < b.order(); });
  return true;
}

}  // namespace driftd
