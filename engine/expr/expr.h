// Spark SQL expressions over a RecordBatch: the `query.where` filter and the derived columns of
// `query.select` ("abs(prediction - ground_truth) AS abs_error"). Text is parsed by a
// recursive-descent parser, type-checked against the columns it may read, and evaluated a
// column at a time: every node of the tree computes its whole column for the batch before its
// parent reads it, so there is no per-row dispatch and no per-row allocation.
//
// Semantics follow Spark SQL with ANSI mode off: NULL propagates through arithmetic, comparison
// and functions; AND, OR and NOT use three-valued logic; a division by zero, a log of a number
// <= 0, an array index out of range and a failed CAST give NULL, never an error. The supported
// surface is listed in config/README.md ("Expressions").
//
// Thread-safety: a compiled Expression is used by one thread at a time (Evaluate reuses its
// scratch columns).
#pragma once

#include <cstddef>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include <tl/expected.hpp>

#include "engine/batch.h"
#include "engine/schema.h"

namespace driftd::expr {

/// A problem in an expression's text, at a byte offset into it.
struct ExprError {
  size_t offset = 0;
  std::string message;
  /// For an unknown column or function: the name and what it could have been, so that the
  /// caller can offer a did-you-mean. Empty otherwise.
  std::string unknown_name;
  std::vector<std::string> candidates;
};

template <typename T>
using ExprResult = tl::expected<T, ExprError>;

struct Node;  // expr_tree.h
struct SelectItem;

/// A parsed, type-checked expression bound to the columns of one schema.
class Expression {
 public:
  /// Parses `text` and checks it against `columns` (column indexes refer to this schema).
  static ExprResult<Expression> Compile(std::string_view text, const Schema& columns);

  Expression(Expression&&) noexcept;
  Expression& operator=(Expression&&) noexcept;
  ~Expression();

  /// The type of the result.
  FieldType type() const;

  /// Whether the expression is nothing but a reference to a column (its index), else -1.
  int column_index() const;

  /// The indexes of the columns the expression reads, ascending, each once.
  std::vector<int> ColumnsRead() const;

  /// Computes the expression for every row of `batch` (whose columns follow the schema it was
  /// compiled against, possibly with more columns after). The result has batch.num_rows rows;
  /// it stays valid until the next Evaluate.
  const Column& Evaluate(const RecordBatch& batch);

 private:
  friend ExprResult<SelectItem> CompileSelectItem(std::string_view text, const Schema& columns);
  explicit Expression(std::unique_ptr<Node> root);
  std::unique_ptr<Node> root_;
};

/// One item of `query.select`: an expression with an optional "AS name".
struct SelectItem {
  Expression expression;
  /// The name after AS, or empty.
  std::string alias;
  /// Where the alias starts in the text (for "listed twice" problems).
  size_t alias_offset = 0;
};

/// Parses and checks "expr [AS name]".
ExprResult<SelectItem> CompileSelectItem(std::string_view text, const Schema& columns);

/// The functions an expression may call, for messages.
std::vector<std::string> FunctionNames();

}  // namespace driftd::expr
