// `driftd baseline`: build a reference-statistics file from reference records (JSON lines or
// CSV with the pipeline's schema), and start one model's baselines over in a running daemon.
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include "cmd/driftd/http_server.h"
#include "engine/result.h"
#include "engine/schema.h"

namespace driftd {

/// CSV with a header row to JSON lines of `schema`: a column per field by name; an
/// array<double> field is either one column holding "[1,2]" or "1;2" or columns name[0],
/// name[1], ... Empty cells are null; unknown columns are an error naming them.
Result<std::string> CsvToJsonLines(const Schema& schema, std::string_view csv);

/// `driftd baseline build PIPELINE --input FILE... [--format auto|json|csv] --output FILE`.
int RunBaselineBuild(const std::string& pipeline, const std::vector<std::string>& inputs,
                     const std::string& format, const std::string& output);

/// `driftd baseline reset --pipeline NAME --model MODEL [--http ADDR]`: asks the daemon to
/// start the model's baselines over (POST /admin/rebaseline).
int RunBaselineReset(const HttpAddress& address, const std::string& pipeline,
                     const std::string& model, const std::string& token);

}  // namespace driftd
