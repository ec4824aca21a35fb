// "Did you mean ...?" for misspelt keys, option names and values in pipeline files: the closest
// candidate by edit distance, when it is close enough to be a plausible typo.
#pragma once

#include <cstddef>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace driftd {

/// Optimal-string-alignment distance (insertions, deletions, substitutions and transpositions
/// of adjacent characters each cost 1), comparing ASCII letters case-insensitively so that
/// `outputmode` is at distance 0 from `outputMode`.
size_t EditDistance(std::string_view a, std::string_view b);

/// The candidate closest to `word`, if it is within a typo's reach: distance 1 for words of up to
/// 4 characters, 2 up to 8, 3 beyond. Ties go to the earlier candidate. Never returns `word`
/// itself (an exact match is not a typo).
std::optional<std::string> SuggestClosest(std::string_view word,
                                          const std::vector<std::string_view>& candidates);

/// "; did you mean 'X'?" or "" when nothing is close.
std::string DidYouMean(std::string_view word, const std::vector<std::string_view>& candidates);

}  // namespace driftd
