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
/// array<double> field is either one column holding "1;2" or a list as Python writes it
/// ("[1.5, 2]", "[np.float64(1.5), np.float64(2.0)]", a numpy array's "[1.5 2. ]") or columns
/// name[0], name[1], ... Empty cells (and NaN, None, <NA>) are null; unknown columns are an
/// error naming them. What pandas' df.to_csv() writes by default reads as the JSON of
/// df.to_json(orient="records", lines=True) does: its first column, the index without a name,
/// is skipped; a column of Python booleans (True/False) becomes JSON true/false, so that a
/// string field holds "true"/"false" as it does from JSON; a whole number written as a float
/// ("3.0", an int column with missing values) fills a long or int field as 3.
Result<std::string> CsvToJsonLines(const Schema& schema, std::string_view csv);

/// JSON lines with the whole floats of top-level long and int fields ("clicks": 3.0, as pandas
/// writes an int column with missing values) written as integers; other lines unchanged.
std::string WholeNumbersInJsonLines(const Schema& schema, std::string_view text);

/// `driftd baseline build PIPELINE --input FILE... [--format auto|json|csv] --output FILE`.
int RunBaselineBuild(const std::string& pipeline, const std::vector<std::string>& inputs,
                     const std::string& format, const std::string& output);

/// `driftd baseline reset --pipeline NAME --model MODEL [--http ADDR]`: asks the daemon to
/// start the model's baselines over (POST /admin/rebaseline).
int RunBaselineReset(const HttpAddress& address, const std::string& pipeline,
                     const std::string& model, const std::string& token);

}  // namespace driftd
