// A state entry's value on its way to the checkpoint: bytes of its own, or bytes it shares with
// another holder. The drift stage's latest evaluations are kept packed for the metrics and the
// status page; a batch that saves them hands the checkpoint those same bytes instead of a copy,
// so what is already encoded is copied once, into the commit's write, and not twice.
#pragma once

#include <cstddef>
#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace driftd {

class StateValue {
 public:
  StateValue() = default;
  StateValue(std::string bytes) : owned_(std::move(bytes)) {}  // NOLINT: implicit by design
  StateValue(const char* bytes) : owned_(bytes) {}             // NOLINT
  /// `bytes`, which `owner` keeps alive; they must not change while this value lives.
  StateValue(std::shared_ptr<const void> owner, std::string_view bytes)
      : owner_(std::move(owner)), shared_(bytes) {}

  std::string_view view() const { return owner_ ? shared_ : std::string_view(owned_); }
  operator std::string_view() const { return view(); }  // NOLINT
  size_t size() const { return view().size(); }
  const char* data() const { return view().data(); }
  /// The bytes as a string of their own (a copy when shared).
  std::string str() const { return std::string(view()); }

  /// Lets go of the bytes (frees them if owned, drops the share otherwise).
  void Release() {
    std::string().swap(owned_);
    owner_.reset();
    shared_ = {};
  }

  friend bool operator==(const StateValue& a, std::string_view b) { return a.view() == b; }

 private:
  std::string owned_;
  std::shared_ptr<const void> owner_;
  std::string_view shared_;
};

/// A batch's state puts: (key, value), in the order they were made.
using StatePuts = std::vector<std::pair<std::string, StateValue>>;

}  // namespace driftd
