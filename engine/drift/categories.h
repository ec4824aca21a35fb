// Categorical drift series: what a string series keeps, in memory bounded whatever its
// cardinality and independent of the order its values arrive in (engine/drift/README.md,
// "Categorical series").
//
// The baseline's first part (its first values, at most kMaxFirstPart) is counted exactly; when
// it is complete, its most frequent categories become the tracked set, by name, and every
// category it held is "seen". From then on values are counted exactly into cells: one per
// tracked category, "other" (seen, not tracked) and "unseen" (never seen). The rest of the
// baseline and every window count into the same cells, so a window's counts depend on its values
// only, never on their order, and the memory of a frozen series is its cells, the tracked names
// and the seen set's 32-bit fingerprints. Heavy-hitter sketches (Misra-Gries, SpaceSaving) would
// bound the first part too, but what they keep depends on arrival order; exact counts of a
// bounded first part do not.
//
// Value types; thread-compatible. Pure code.
#pragma once

#include <cstddef>
#include <cstdint>
#include <limits>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "engine/drift/codec.h"

namespace driftd {

/// Category names are kept (for alerts and reference files) to this many bytes, cut at a UTF-8
/// character boundary; a category is identified by the hash of all its bytes.
inline constexpr size_t kMaxCategoryNameBytes = 128;

/// A fixed 64-bit hash of a category's bytes: FNV-1a 64, then splitmix64's finalizer. It is
/// persisted (tracked categories, seen fingerprints, sample thresholds), so it never changes.
uint64_t CategoryHash(std::string_view category);

/// `name` cut to kMaxCategoryNameBytes at a character boundary.
std::string_view CategoryName(std::string_view name);

/// Counts of categories in bounded memory, independent of arrival order. Up to `capacity`
/// distinct categories are counted exactly; beyond, a category is kept only while its hash is
/// below a threshold that halves whenever more than `capacity` are kept (as ValueSample), and the
/// values of the categories left out are counted in dropped(). The threshold, and so the kept
/// categories and their counts, depend on the set of categories added only.
class CategoryCounts {
 public:
  static constexpr size_t kDefaultCapacity = 4096;

  struct Entry {
    uint64_t hash = 0;
    int64_t count = 0;
    std::string name;  // cut to kMaxCategoryNameBytes
  };

  explicit CategoryCounts(size_t capacity = kDefaultCapacity) : capacity_(capacity) {}

  void Add(uint64_t hash, std::string_view name, int64_t count = 1);
  /// Values whose category is not known (sampled out before they came here).
  void AddDropped(int64_t count) {
    dropped_ += count;
    total_ += count;
  }
  void Clear();

  /// Every value added; those of categories left out; distinct categories kept.
  int64_t total() const { return total_; }
  int64_t dropped() const { return dropped_; }
  size_t size() const { return entries_.size(); }
  size_t capacity() const { return capacity_; }
  bool exact() const { return threshold_ == std::numeric_limits<uint64_t>::max() && dropped_ == 0; }
  /// Kept categories counted once (Good-Turing's estimate of the unseen share is this / total).
  int64_t singletons() const;

  /// Kept categories in increasing hash order: a fixed pseudo-random order that only the set
  /// of categories decides.
  std::vector<const Entry*> InHashOrder() const;
  /// The `k` most frequent kept categories with at least `min_count` values, by count, then
  /// name, then hash.
  std::vector<const Entry*> Top(size_t k, int64_t min_count = 1) const;

  /// Bytes held, for the memory bound.
  size_t MemoryBytes() const;

  void Encode(drift::ByteWriter& w) const;
  bool Decode(drift::ByteReader& r);
  bool operator==(const CategoryCounts& other) const;

 private:
  void Shrink();

  size_t capacity_;
  uint64_t threshold_ = std::numeric_limits<uint64_t>::max();
  int64_t total_ = 0;
  int64_t dropped_ = 0;
  std::unordered_map<uint64_t, Entry> entries_;
};

/// A frozen categorical baseline's categories: the tracked ones (named; each a cell of its own)
/// and the fingerprints of every category its first part held ("seen"). Cells: 0..tracked-1
/// the tracked categories, other() the seen ones not tracked, unseen() the rest.
class CategorySet {
 public:
  /// From the exact counts of the baseline's first part: its `max_tracked` most frequent
  /// categories with at least `min_count` values are tracked; every category it kept is seen.
  static CategorySet Choose(const CategoryCounts& first, size_t max_tracked, int64_t min_count);
  /// From reference statistics: the tracked categories (names and their hashes), and the seen
  /// fingerprints (the tracked ones are added).
  static CategorySet FromParts(std::vector<std::string> names, std::vector<uint32_t> seen);

  size_t tracked() const { return names_.size(); }
  size_t other() const { return names_.size(); }
  size_t unseen() const { return names_.size() + 1; }
  size_t cells() const { return names_.size() + 2; }
  const std::string& name(size_t i) const { return names_[i]; }
  uint64_t hash(size_t i) const { return hashes_[i]; }
  const std::vector<uint32_t>& seen() const { return seen_; }

  /// The cell of a category with hash `hash`.
  size_t CellOf(uint64_t hash) const {
    if (!slots_.empty()) {
      const size_t mask = slots_.size() - 1;
      for (size_t i = hash & mask;; i = (i + 1) & mask) {
        const uint32_t slot = slots_[i];
        if (slot == 0) break;
        if (hashes_[slot - 1] == hash) return slot - 1;
      }
    }
    return IsSeen(hash) ? other() : unseen();
  }
  bool IsSeen(uint64_t hash) const;
  /// The fingerprint of a category in the seen set: the high 32 bits of its hash (two distinct
  /// categories share one with probability 2^-32).
  static uint32_t Fingerprint(uint64_t hash) { return static_cast<uint32_t>(hash >> 32); }

  size_t MemoryBytes() const;
  void Encode(drift::ByteWriter& w) const;
  bool Decode(drift::ByteReader& r);
  bool operator==(const CategorySet& other) const {
    return names_ == other.names_ && hashes_ == other.hashes_ && seen_ == other.seen_;
  }

 private:
  void Index();

  std::vector<std::string> names_;
  std::vector<uint64_t> hashes_;
  std::vector<uint32_t> seen_;   // sorted, distinct
  std::vector<uint32_t> slots_;  // open addressing over hashes_: index + 1, 0 empty
};

/// An event-time window of a categorical series that the watermark has not closed yet.
struct CategoryWindow {
  int64_t start_us = 0;
  int64_t min_us = std::numeric_limits<int64_t>::min();
  int64_t max_us = std::numeric_limits<int64_t>::min();
  /// Once the baseline froze: the window's cells (empty before).
  std::vector<int64_t> cells;
  /// Before the baseline froze: the window's categories (bounded, order-independent), given to
  /// the baseline in hash order when the window closes.
  CategoryCounts sample;
  /// The names of its categories the baseline never saw, for the alert (a few, bounded).
  CategoryCounts unseen;

  CategoryWindow();
};

/// What a categorical series keeps beyond what every drift series has (its value index, window
/// bounds, alert state and incident): the baseline's first part until the category set is
/// fixed, then the set and the baseline's cells, the current window's cells, open event-time
/// windows, and trailing windows or seasonal phases.
struct CategoricalState {
  /// Unseen categories a window counts by name for its alert: exactly up to this many distinct
  /// ones (a long tail's window holds a few dozen), a hash sample of them beyond.
  static constexpr size_t kUnseenNames = 256;
  /// The most values the baseline's first part holds (exactly counted, so at most this many
  /// distinct categories).
  static constexpr int64_t kMaxFirstPart = 2000;
  /// A tracked category had at least this many values in the first part.
  static constexpr int64_t kMinTrackedCount = 2;
  /// Fewer held-out baseline values than this and the unseen share's reference is Good-Turing's
  /// estimate from the first part instead.
  static constexpr int64_t kMinHeldOut = 100;

  /// Baseline values so far (its n).
  int64_t baseline_values = 0;
  // ---- until the category set is fixed ----
  CategoryCounts first;
  // ---- from then on ----
  bool set_ready = false;
  CategorySet set;
  /// The baseline's values per cell (first part included).
  std::vector<int64_t> ref;
  /// Baseline values after the first part: ref[unseen()] of them had an unseen category.
  int64_t held_out = 0;
  /// The first part's size and its categories seen once (Good-Turing), kept from the fix.
  int64_t first_total = 0;
  int64_t first_singletons = 0;
  /// The unseen share's reference, fixed when the baseline freezes: `ref_unseen` of
  /// `ref_unseen_n` values.
  int64_t ref_unseen = 0;
  int64_t ref_unseen_n = 0;
  // ---- after the baseline froze ----
  /// The current record window's cells, its values, and its unseen categories' names.
  std::vector<int64_t> window;
  int64_t window_n = 0;
  CategoryCounts window_unseen{kUnseenNames};
  /// Event-time windows not closed yet, by start.
  std::vector<CategoryWindow> open;
  /// Trailing baseline: ring of the last windows' cells (the warmup is the first); seasonal:
  /// one per phase.
  std::vector<std::vector<int64_t>> trailing;
  uint32_t trailing_next = 0;
  std::vector<std::vector<int64_t>> phases;

  /// One baseline value (`count` of them) of a category (unknown when `name` is null: a value
  /// sampled out of an event-time window). `first_part` is the first part's size;
  /// `max_tracked` the tracked categories at most.
  void AddToBaseline(uint64_t hash, const std::string_view* name, int64_t count,
                     int64_t first_part, size_t max_tracked);
  /// Fixes the category set from the first part (done by AddToBaseline when the first part is
  /// complete; by Freeze when the baseline ends first).
  void FixSet(size_t max_tracked);
  /// The baseline is complete: fixes the unseen share's reference and sizes the window.
  void Freeze(size_t max_tracked);
  int64_t baseline_n() const { return baseline_values; }

  size_t MemoryBytes() const;
};

/// Window cells merged for the shape tests (chi_square, psi, js): tracked categories whose
/// expected count in either sample (pooled share times its size) is below `min_expected` join
/// "other", with which unseen values are counted; when the rest is itself that small it joins
/// the smallest remaining cell. `win` and `ref` are full cell vectors (CategorySet::cells());
/// `merged_win`/`merged_ref` receive the merged cells, `cell_of` for each merged cell the first
/// full cell in it (the tracked category, or `other` for the rest).
void MergeCategoryCells(const std::vector<int64_t>& win, const std::vector<int64_t>& ref,
                        size_t other, double min_expected, std::vector<int64_t>& merged_win,
                        std::vector<int64_t>& merged_ref, std::vector<size_t>& cell_of);

}  // namespace driftd
