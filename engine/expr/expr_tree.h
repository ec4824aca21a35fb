// The expression's own parts (not its public surface, engine/expr/expr.h): the tree that the
// parser builds, the checker types and the evaluator computes, and the helpers the expression's
// files share. Included only by engine/expr/expr*.cc:
//   expr.cc        lexer, recursive-descent parser, Expression and CompileSelectItem
//   expr_check.cc  the functions an expression may call, and the type checker
//   expr_eval.cc   the column-at-a-time evaluator
#pragma once

#include <cctype>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include <tl/expected.hpp>

#include "engine/batch.h"
#include "engine/expr/expr.h"
#include "engine/schema.h"

namespace driftd::expr {

inline ExprError ErrorAt(size_t offset, std::string message) {
  return ExprError{offset, std::move(message), {}, {}};
}

inline std::string Lower(std::string_view text) {
  std::string out(text);
  for (char& c : out) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return out;
}

// ---- the tree -----------------------------------------------------------------------------

enum class Op {
  kLiteral,
  kColumn,
  kNeg,
  kNot,
  kAdd,
  kSub,
  kMul,
  kDiv,
  kMod,
  kEq,
  kNe,
  kLt,
  kLe,
  kGt,
  kGe,
  kAnd,
  kOr,
  kIsNull,
  kIsNotNull,
  kIn,
  kNotIn,
  kCase,
  kCast,
  kCall,
  kIndex,
};

struct FunctionDef;

struct Node {
  Op op = Op::kLiteral;
  size_t offset = 0;
  std::vector<std::unique_ptr<Node>> args;
  /// Result type after checking; nullopt only for a NULL literal not yet given a type.
  std::optional<FieldType> type;
  // kLiteral
  double f = 0;
  int64_t i = 0;
  std::string s;
  bool null = false;
  // kColumn: name and index; kCall: function name. `dotted`: the name was written with
  // '.' (a struct's field or a map's key: `segment.country`, `features.amount`).
  std::string name;
  bool dotted = false;
  int column = -1;
  const FunctionDef* fn = nullptr;
  // kCase: args = [operand] (when, then)... [else].
  bool case_operand = false;
  bool case_else = false;
  // kCast target type
  FieldType cast_to = FieldType::kDouble;

  // Evaluation
  Column out;
  size_t literal_rows = SIZE_MAX;  // rows `out` was filled for (literals are constant)
  std::vector<const Column*> inputs;  // scratch
};

inline std::unique_ptr<Node> MakeNode(Op op, size_t offset) {
  auto node = std::make_unique<Node>();
  node->op = op;
  node->offset = offset;
  return node;
}

// ---- functions ----------------------------------------------------------------------------

enum class Fn { kAbs, kSqrt, kLog, kLn, kLog10, kExp, kPow, kLeast, kGreatest, kCoalesce, kSize };

struct FunctionDef {
  std::string_view name;
  Fn fn;
  size_t min_args;
  size_t max_args;  // SIZE_MAX: any
  std::string_view signature;  // for messages
};

using Check = tl::expected<void, ExprError>;

/// Types `root` against `columns` (expr_check.cc): an error names the first problem.
Check CheckTree(std::unique_ptr<Node>& root, const Schema& columns);

}  // namespace driftd::expr
