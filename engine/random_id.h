// Random identifiers: a checkpoint's id, a Kafka sink's writer id.
#pragma once

#include <cstdint>
#include <random>
#include <string>

#include <fmt/format.h>

namespace driftd {

/// 32 lower-case hex digits (128 bits) from std::random_device.
inline std::string RandomHexId() {
  std::random_device random;
  std::string id;
  for (int i = 0; i < 4; ++i) id += fmt::format("{:08x}", static_cast<uint32_t>(random()));
  return id;
}

}  // namespace driftd
