#include "engine/string_hash.h"

#include <random>

namespace driftd {

uint64_t ProcessHashSeed() {
  static const uint64_t seed = [] {
    std::random_device device;
    return (uint64_t{device()} << 32) ^ device();
  }();
  return seed;
}

}  // namespace driftd
