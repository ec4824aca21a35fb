// Encoding of a batch's output for the checkpoint outbox: length-prefixed, versioned.
#pragma once

#include <string>
#include <string_view>

#include "engine/sink.h"
#include "engine/result.h"

namespace driftd {

std::string EncodeBatchOutput(const BatchOutput& output);
Result<BatchOutput> DecodeBatchOutput(std::string_view bytes);

}  // namespace driftd
