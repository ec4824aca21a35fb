// The micro-batch executor: plans, reads, decodes, aggregates, commits, delivers and reports.
#pragma once

namespace driftd {}
