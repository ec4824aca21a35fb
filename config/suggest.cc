#include "config/suggest.h"

#include <algorithm>
#include <cctype>

#include <fmt/format.h>

namespace driftd {
namespace {

char Lower(char c) { return static_cast<char>(std::tolower(static_cast<unsigned char>(c))); }

size_t MaxTypoDistance(size_t length) {
  if (length <= 4) return 1;
  if (length <= 8) return 2;
  return 3;
}

}  // namespace

size_t EditDistance(std::string_view a, std::string_view b) {
  // Three rolling rows are enough for the transposition case.
  std::vector<size_t> before(b.size() + 1), previous(b.size() + 1), current(b.size() + 1);
  for (size_t j = 0; j <= b.size(); ++j) previous[j] = j;
  for (size_t i = 1; i <= a.size(); ++i) {
    current[0] = i;
    for (size_t j = 1; j <= b.size(); ++j) {
      size_t cost = Lower(a[i - 1]) == Lower(b[j - 1]) ? 0 : 1;
      current[j] = std::min({previous[j] + 1, current[j - 1] + 1, previous[j - 1] + cost});
      if (i > 1 && j > 1 && Lower(a[i - 1]) == Lower(b[j - 2]) &&
          Lower(a[i - 2]) == Lower(b[j - 1])) {
        current[j] = std::min(current[j], before[j - 2] + 1);
      }
    }
    std::swap(before, previous);
    std::swap(previous, current);
  }
  return previous[b.size()];
}

std::optional<std::string> SuggestClosest(std::string_view word,
                                          const std::vector<std::string_view>& candidates) {
  const size_t limit = MaxTypoDistance(word.size());
  std::optional<std::string> best;
  size_t best_distance = limit + 1;
  for (std::string_view candidate : candidates) {
    if (candidate == word) continue;
    size_t distance = EditDistance(word, candidate);
    if (distance < best_distance) {
      best_distance = distance;
      best = std::string(candidate);
    }
  }
  return best;
}

std::string DidYouMean(std::string_view word, const std::vector<std::string_view>& candidates) {
  auto suggestion = SuggestClosest(word, candidates);
  return suggestion ? fmt::format("; did you mean '{}'?", *suggestion) : std::string();
}

}  // namespace driftd
