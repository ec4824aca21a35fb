#include "engine/drift/categories.h"

#include <algorithm>
#include <tuple>

namespace driftd {

namespace {

constexpr uint8_t kCountsEncodingVersion = 1;
constexpr uint8_t kSetEncodingVersion = 1;
constexpr uint64_t kNoThreshold = std::numeric_limits<uint64_t>::max();

bool Kept(uint64_t hash, uint64_t threshold) { return threshold == kNoThreshold || hash < threshold; }

}  // namespace

uint64_t CategoryHash(std::string_view category) {
  uint64_t h = 1469598103934665603ull;
  for (char c : category) {
    h ^= static_cast<uint8_t>(c);
    h *= 1099511628211ull;
  }
  // splitmix64's finalizer: FNV's high bits alone mix poorly, and the thresholds and
  // fingerprints read the high bits.
  h += 0x9e3779b97f4a7c15ull;
  h = (h ^ (h >> 30)) * 0xbf58476d1ce4e5b9ull;
  h = (h ^ (h >> 27)) * 0x94d049bb133111ebull;
  return h ^ (h >> 31);
}

std::string_view CategoryName(std::string_view name) {
  if (name.size() <= kMaxCategoryNameBytes) return name;
  size_t end = kMaxCategoryNameBytes;
  // Back off continuation bytes (10xxxxxx) so that the cut leaves whole characters.
  while (end > 0 && (static_cast<uint8_t>(name[end]) & 0xC0) == 0x80) --end;
  return name.substr(0, end);
}

// ---- CategoryCounts ----------------------------------------------------------------------------

void CategoryCounts::Add(uint64_t hash, std::string_view name, int64_t count) {
  if (count <= 0) return;
  total_ += count;
  if (!Kept(hash, threshold_)) {
    dropped_ += count;
    return;
  }
  auto [it, inserted] = entries_.try_emplace(hash);
  if (inserted) {
    it->second.hash = hash;
    it->second.name = std::string(CategoryName(name));
  }
  it->second.count += count;
  if (entries_.size() > capacity_) Shrink();
}

void CategoryCounts::Shrink() {
  while (entries_.size() > capacity_) {
    threshold_ = threshold_ == kNoThreshold ? (uint64_t{1} << 63) : threshold_ >> 1;
    for (auto it = entries_.begin(); it != entries_.end();) {
      if (Kept(it->first, threshold_)) {
        ++it;
      } else {
        dropped_ += it->second.count;
        it = entries_.erase(it);
      }
    }
  }
}

void CategoryCounts::Clear() {
  threshold_ = kNoThreshold;
  total_ = 0;
  dropped_ = 0;
  std::unordered_map<uint64_t, Entry>().swap(entries_);
}

int64_t CategoryCounts::singletons() const {
  int64_t n = 0;
  for (const auto& [hash, e] : entries_) n += e.count == 1 ? 1 : 0;
  return n;
}

std::vector<const CategoryCounts::Entry*> CategoryCounts::InHashOrder() const {
  std::vector<const Entry*> out;
  out.reserve(entries_.size());
  for (const auto& [hash, e] : entries_) out.push_back(&e);
  std::sort(out.begin(), out.end(), [](const Entry* a, const Entry* b) { return a->hash < b->hash; });
  return out;
}

std::vector<const CategoryCounts::Entry*> CategoryCounts::Top(size_t k, int64_t min_count) const {
  std::vector<const Entry*> out;
  for (const auto& [hash, e] : entries_) {
    if (e.count >= min_count) out.push_back(&e);
  }
  auto order = [](const Entry* a, const Entry* b) {
    return std::tie(b->count, a->name, a->hash) < std::tie(a->count, b->name, b->hash);
  };
  if (out.size() > k) {
    std::partial_sort(out.begin(), out.begin() + static_cast<std::ptrdiff_t>(k), out.end(), order);
    out.resize(k);
  } else {
    std::sort(out.begin(), out.end(), order);
  }
  return out;
}

size_t CategoryCounts::MemoryBytes() const {
  size_t bytes = sizeof(*this) + entries_.bucket_count() * sizeof(void*);
  for (const auto& [hash, e] : entries_) {
    // A node: the pair, the hash-table links, and the name's heap buffer when it has one.
    bytes += sizeof(std::pair<const uint64_t, Entry>) + 2 * sizeof(void*);
    if (e.name.capacity() > 15) bytes += e.name.capacity() + 1;
  }
  return bytes;
}

void CategoryCounts::Encode(drift::ByteWriter& w) const {
  w.U8(kCountsEncodingVersion);
  w.U64(threshold_);
  w.I64(total_);
  w.I64(dropped_);
  const std::vector<const Entry*> entries = InHashOrder();  // equal counts encode equally
  w.U32(static_cast<uint32_t>(entries.size()));
  for (const Entry* e : entries) {
    w.U64(e->hash);
    w.I64(e->count);
    w.Str(e->name);
  }
}

bool CategoryCounts::Decode(drift::ByteReader& r) {
  Clear();
  if (r.U8() != kCountsEncodingVersion) return false;
  threshold_ = r.U64();
  total_ = r.I64();
  dropped_ = r.I64();
  const uint32_t n = r.U32();
  if (r.failed() || n > capacity_ || n > r.remaining() / 20 || total_ < 0 || dropped_ < 0) {
    return false;
  }
  int64_t kept = 0;
  for (uint32_t i = 0; i < n; ++i) {
    Entry e;
    e.hash = r.U64();
    e.count = r.I64();
    e.name = std::string(r.Str());
    if (r.failed() || e.count <= 0 || e.name.size() > kMaxCategoryNameBytes ||
        !Kept(e.hash, threshold_)) {
      return false;
    }
    kept += e.count;
    if (!entries_.emplace(e.hash, std::move(e)).second) return false;
  }
  return !r.failed() && kept + dropped_ == total_;
}

bool CategoryCounts::operator==(const CategoryCounts& other) const {
  if (threshold_ != other.threshold_ || total_ != other.total_ || dropped_ != other.dropped_ ||
      entries_.size() != other.entries_.size()) {
    return false;
  }
  for (const auto& [hash, e] : entries_) {
    auto it = other.entries_.find(hash);
    if (it == other.entries_.end() || it->second.count != e.count || it->second.name != e.name) {
      return false;
    }
  }
  return true;
}

// ---- CategorySet --------------------------------------------------------------------------------

CategorySet CategorySet::Choose(const CategoryCounts& first, size_t max_tracked,
                                int64_t min_count) {
  CategorySet set;
  for (const CategoryCounts::Entry* e : first.Top(max_tracked, min_count)) {
    set.names_.push_back(e->name);
    set.hashes_.push_back(e->hash);
  }
  for (const CategoryCounts::Entry* e : first.InHashOrder()) set.seen_.push_back(Fingerprint(e->hash));
  std::sort(set.seen_.begin(), set.seen_.end());
  set.seen_.erase(std::unique(set.seen_.begin(), set.seen_.end()), set.seen_.end());
  set.Index();
  return set;
}

CategorySet CategorySet::FromParts(std::vector<std::string> names, std::vector<uint32_t> seen) {
  CategorySet set;
  for (std::string& name : names) {
    const uint64_t hash = CategoryHash(name);
    set.hashes_.push_back(hash);
    seen.push_back(Fingerprint(hash));
    set.names_.emplace_back(CategoryName(name));
  }
  std::sort(seen.begin(), seen.end());
  seen.erase(std::unique(seen.begin(), seen.end()), seen.end());
  set.seen_ = std::move(seen);
  set.Index();
  return set;
}

bool CategorySet::IsSeen(uint64_t hash) const {
  return std::binary_search(seen_.begin(), seen_.end(), Fingerprint(hash));
}

void CategorySet::Index() {
  slots_.clear();
  if (hashes_.empty()) return;
  size_t size = 4;
  while (size < 2 * hashes_.size()) size *= 2;
  slots_.assign(size, 0);
  const size_t mask = size - 1;
  for (size_t j = 0; j < hashes_.size(); ++j) {
    size_t i = hashes_[j] & mask;
    while (slots_[i] != 0) i = (i + 1) & mask;
    slots_[i] = static_cast<uint32_t>(j + 1);
  }
}

size_t CategorySet::MemoryBytes() const {
  size_t bytes = sizeof(*this) + hashes_.capacity() * 8 + seen_.capacity() * 4 +
                 slots_.capacity() * 4 + names_.capacity() * sizeof(std::string);
  for (const std::string& name : names_) {
    if (name.capacity() > 15) bytes += name.capacity() + 1;
  }
  return bytes;
}

void CategorySet::Encode(drift::ByteWriter& w) const {
  w.U8(kSetEncodingVersion);
  w.U32(static_cast<uint32_t>(names_.size()));
  for (size_t i = 0; i < names_.size(); ++i) {
    w.U64(hashes_[i]);
    w.Str(names_[i]);
  }
  w.U32(static_cast<uint32_t>(seen_.size()));
  for (uint32_t f : seen_) w.U32(f);
}

bool CategorySet::Decode(drift::ByteReader& r) {
  *this = CategorySet();
  if (r.U8() != kSetEncodingVersion) return false;
  const uint32_t tracked = r.U32();
  if (r.failed() || tracked > r.remaining() / 12 || tracked > 100'000) return false;
  for (uint32_t i = 0; i < tracked; ++i) {
    hashes_.push_back(r.U64());
    names_.emplace_back(r.Str());
    if (names_.back().size() > kMaxCategoryNameBytes) return false;
  }
  const uint32_t seen = r.U32();
  if (r.failed() || seen > r.remaining() / 4) return false;
  seen_.resize(seen);
  for (uint32_t& f : seen_) f = r.U32();
  if (r.failed() || !std::is_sorted(seen_.begin(), seen_.end()) ||
      std::adjacent_find(seen_.begin(), seen_.end()) != seen_.end()) {
    return false;
  }
  std::vector<uint64_t> sorted = hashes_;
  std::sort(sorted.begin(), sorted.end());
  if (std::adjacent_find(sorted.begin(), sorted.end()) != sorted.end()) return false;
  Index();
  return true;
}

// ---- CategoricalState -----------------------------------------------------------------------------

CategoryWindow::CategoryWindow() : unseen(CategoricalState::kUnseenNames) {}

void CategoricalState::AddToBaseline(uint64_t hash, const std::string_view* name, int64_t count,
                                     int64_t first_part, size_t max_tracked) {
  if (count > 0) baseline_values += count;
  while (count > 0) {
    if (!set_ready) {
      const int64_t take = std::min(count, std::max<int64_t>(1, first_part - first.total()));
      if (name != nullptr) {
        first.Add(hash, *name, take);
      } else {
        first.AddDropped(take);
      }
      count -= take;
      if (first.total() >= first_part) FixSet(max_tracked);
      continue;
    }
    ref[name != nullptr ? set.CellOf(hash) : set.other()] += count;
    held_out += count;
    count = 0;
  }
}

void CategoricalState::FixSet(size_t max_tracked) {
  if (set_ready) return;
  set = CategorySet::Choose(first, max_tracked, kMinTrackedCount);
  ref.assign(set.cells(), 0);
  for (const CategoryCounts::Entry* e : first.InHashOrder()) ref[set.CellOf(e->hash)] += e->count;
  ref[set.other()] += first.dropped();
  first_total = first.total();
  first_singletons = first.singletons();
  first.Clear();
  held_out = 0;
  set_ready = true;
}

void CategoricalState::Freeze(size_t max_tracked) {
  FixSet(max_tracked);
  if (held_out >= kMinHeldOut) {
    ref_unseen = ref[set.unseen()];
    ref_unseen_n = held_out;
  } else {
    // The baseline ended with (almost) only its first part: Good-Turing's estimate of the share
    // of values whose category it did not see, the share of its categories seen once. The
    // estimate varies more than a binomial share of as many values (a category seen twice could
    // as well have been seen once), so it counts as a share of half as many.
    ref_unseen_n = std::max<int64_t>(1, first_total / 2);
    ref_unseen = first_total > 0 ? (first_singletons * ref_unseen_n + first_total / 2) / first_total
                                 : 0;
  }
  window.assign(set.cells(), 0);
  window_n = 0;
  window_unseen.Clear();
}

size_t CategoricalState::MemoryBytes() const {
  size_t bytes = sizeof(*this) + first.MemoryBytes() + set.MemoryBytes() + ref.capacity() * 8 +
                 window.capacity() * 8 + window_unseen.MemoryBytes();
  for (const CategoryWindow& w : open) {
    bytes += sizeof(w) + w.cells.capacity() * 8 + w.sample.MemoryBytes() + w.unseen.MemoryBytes();
  }
  for (const auto& t : trailing) bytes += sizeof(t) + t.capacity() * 8;
  for (const auto& p : phases) bytes += sizeof(p) + p.capacity() * 8;
  return bytes;
}

void MergeCategoryCells(const std::vector<int64_t>& win, const std::vector<int64_t>& ref,
                        size_t other, double min_expected, std::vector<int64_t>& merged_win,
                        std::vector<int64_t>& merged_ref, std::vector<size_t>& cell_of) {
  merged_win.clear();
  merged_ref.clear();
  cell_of.clear();
  const size_t cells = std::min(win.size(), ref.size());
  double n_w = 0;
  double n_r = 0;
  for (size_t i = 0; i < cells; ++i) {
    n_w += static_cast<double>(win[i]);
    n_r += static_cast<double>(ref[i]);
  }
  if (!(n_w > 0) || !(n_r > 0)) return;
  const double small = std::min(n_w, n_r) / (n_w + n_r);
  auto large = [&](int64_t w, int64_t r) {
    return static_cast<double>(w + r) * small >= min_expected;
  };
  int64_t rest_w = 0;
  int64_t rest_r = 0;
  for (size_t i = 0; i < cells; ++i) {
    if (i < other && large(win[i], ref[i])) {
      merged_win.push_back(win[i]);
      merged_ref.push_back(ref[i]);
      cell_of.push_back(i);
    } else {
      rest_w += win[i];
      rest_r += ref[i];
    }
  }
  if (rest_w + rest_r == 0) return;
  if (large(rest_w, rest_r) || merged_win.empty()) {
    merged_win.push_back(rest_w);
    merged_ref.push_back(rest_r);
    cell_of.push_back(other);
    return;
  }
  // The rest is itself too small for the test: it joins the smallest cell (the first of equals).
  size_t smallest = 0;
  for (size_t j = 1; j < merged_win.size(); ++j) {
    if (merged_win[j] + merged_ref[j] < merged_win[smallest] + merged_ref[smallest]) smallest = j;
  }
  merged_win[smallest] += rest_w;
  merged_ref[smallest] += rest_r;
}

}  // namespace driftd
