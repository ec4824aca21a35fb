// The functions an expression may call, and the type checker: it gives every node of the tree
// its result type, a NULL-typed subtree the type its context asks for, and reports the first
// mismatch at its offset (expr_tree.h).
#include "engine/expr/expr_tree.h"

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include <fmt/format.h>

namespace driftd::expr {

// ---- functions ----------------------------------------------------------------------------

namespace {

constexpr FunctionDef kFunctions[] = {
    {"abs", Fn::kAbs, 1, 1, "abs(number)"},
    {"sqrt", Fn::kSqrt, 1, 1, "sqrt(number)"},
    {"log", Fn::kLog, 1, 2, "log(number) or log(base, number)"},
    {"ln", Fn::kLn, 1, 1, "ln(number)"},
    {"log10", Fn::kLog10, 1, 1, "log10(number)"},
    {"exp", Fn::kExp, 1, 1, "exp(number)"},
    {"pow", Fn::kPow, 2, 2, "pow(base, exponent)"},
    {"power", Fn::kPow, 2, 2, "power(base, exponent)"},
    {"least", Fn::kLeast, 2, SIZE_MAX, "least(a, b, ...)"},
    {"greatest", Fn::kGreatest, 2, SIZE_MAX, "greatest(a, b, ...)"},
    {"coalesce", Fn::kCoalesce, 1, SIZE_MAX, "coalesce(a, b, ...)"},
    {"size", Fn::kSize, 1, 1, "size(array or map)"},
};

const FunctionDef* FindFunction(std::string_view name) {
  const std::string lower = Lower(name);
  for (const FunctionDef& def : kFunctions) {
    if (def.name == lower) return &def;
  }
  return nullptr;
}

}  // namespace

std::vector<std::string> FunctionNames() {
  std::vector<std::string> names;
  for (const FunctionDef& def : kFunctions) names.emplace_back(def.name);
  return names;
}

// ---- type checking ------------------------------------------------------------------------

namespace {

std::string_view TypeName(const std::optional<FieldType>& type) {
  return type ? FieldTypeName(*type) : std::string_view("null");
}

bool IsIntegral(FieldType type) { return type == FieldType::kLong || type == FieldType::kInt; }

// Gives a NULL-typed subtree (a NULL literal, or something made only of NULLs, which can only
// ever be NULL) the type its context asks for.
void Coerce(std::unique_ptr<Node>& node, FieldType type) {
  if (node->type) return;
  auto literal = MakeNode(Op::kLiteral, node->offset);
  literal->null = true;
  literal->type = type;
  node = std::move(literal);
}

// The type two values are compared or combined in: numbers meet as double if either is one,
// else as long; other types only meet themselves. nullopt when they cannot meet.
std::optional<FieldType> CommonType(const std::optional<FieldType>& a,
                                    const std::optional<FieldType>& b) {
  if (!a) return b ? b : std::optional<FieldType>(FieldType::kLong);
  if (!b) return a;
  if (IsNumeric(*a) && IsNumeric(*b)) {
    if (*a == FieldType::kDouble || *b == FieldType::kDouble) return FieldType::kDouble;
    if (*a == FieldType::kInt && *b == FieldType::kInt) return FieldType::kInt;
    return FieldType::kLong;
  }
  if (*a == *b) return a;
  return std::nullopt;
}

std::string_view OpText(Op op) {
  switch (op) {
    case Op::kAdd: return "+";
    case Op::kSub: return "-";
    case Op::kMul: return "*";
    case Op::kDiv: return "/";
    case Op::kMod: return "%";
    case Op::kEq: return "=";
    case Op::kNe: return "!=";
    case Op::kLt: return "<";
    case Op::kLe: return "<=";
    case Op::kGt: return ">";
    case Op::kGe: return ">=";
    case Op::kAnd: return "AND";
    case Op::kOr: return "OR";
    default: return "";
  }
}

#define DRIFTD_EXPR_TRY(expr)                                    \
  do {                                                           \
    auto driftd_expr_check_ = (expr);                            \
    if (!driftd_expr_check_) return driftd_expr_check_;          \
  } while (false)

class Checker {
 public:
  explicit Checker(const Schema& schema) : schema_(schema) {}

  Check Run(std::unique_ptr<Node>& node) {
    switch (node->op) {
      case Op::kLiteral: return {};
      case Op::kColumn: return Column(node);
      case Op::kNeg: {
        DRIFTD_EXPR_TRY(Run(node->args[0]));
        auto& arg = node->args[0];
        if (arg->type && !IsNumeric(*arg->type)) {
          return Mismatch(*arg, "unary -", "a number");
        }
        node->type = arg->type;
        return {};
      }
      case Op::kNot: return Boolean(*node, "NOT");
      case Op::kAnd:
      case Op::kOr: return Boolean(*node, OpText(node->op));
      case Op::kAdd:
      case Op::kSub:
      case Op::kMul:
      case Op::kDiv:
      case Op::kMod: return Arithmetic(*node);
      case Op::kEq:
      case Op::kNe:
      case Op::kLt:
      case Op::kLe:
      case Op::kGt:
      case Op::kGe: return Comparison(*node);
      case Op::kIsNull:
      case Op::kIsNotNull:
        DRIFTD_EXPR_TRY(Run(node->args[0]));
        Coerce(node->args[0], FieldType::kBoolean);
        node->type = FieldType::kBoolean;
        return {};
      case Op::kIn:
      case Op::kNotIn: return In(*node);
      case Op::kCase: return Case(*node);
      case Op::kCast: return Cast(*node);
      case Op::kCall: return Call(*node);
      case Op::kIndex: return Index(*node);
    }
    return {};
  }

 private:
  Check Column(std::unique_ptr<Node>& slot) {
    Node& node = *slot;
    node.column = schema_.IndexOf(node.name);
    if (node.column < 0 && node.dotted) {
      // `features.amount` on a map column is `features['amount']` (as in Spark); the longest
      // name that is a map column is the map, the rest its key.
      for (size_t dot = node.name.rfind('.'); dot != std::string::npos && dot > 0;
           dot = node.name.rfind('.', dot - 1)) {
        const int map = schema_.IndexOf(std::string_view(node.name).substr(0, dot));
        if (map < 0 || !IsMap(schema_.fields[static_cast<size_t>(map)].type)) continue;
        auto key = MakeNode(Op::kLiteral, node.offset);
        key->type = FieldType::kString;
        key->s = node.name.substr(dot + 1);
        auto column = MakeNode(Op::kColumn, node.offset);
        column->name = node.name.substr(0, dot);
        column->column = map;
        column->type = schema_.fields[static_cast<size_t>(map)].type;
        auto index = MakeNode(Op::kIndex, node.offset);
        index->args.push_back(std::move(column));
        index->args.push_back(std::move(key));
        slot = std::move(index);
        return Index(*slot);
      }
    }
    if (node.column < 0) {
      ExprError error = ErrorAt(node.offset, fmt::format("unknown column '{}'", node.name));
      error.unknown_name = node.name;
      for (const Field& field : schema_.fields) error.candidates.push_back(field.name);
      return tl::unexpected(std::move(error));
    }
    node.type = schema_.fields[static_cast<size_t>(node.column)].type;
    return {};
  }

  static tl::unexpected<ExprError> Mismatch(const Node& operand, std::string_view context,
                                            std::string_view expected) {
    return tl::unexpected(ErrorAt(operand.offset,
                                  fmt::format("type mismatch: {} needs {}, found {}", context,
                                              expected, TypeName(operand.type))));
  }

  Check Boolean(Node& node, std::string_view context) {
    for (auto& arg : node.args) {
      DRIFTD_EXPR_TRY(Run(arg));
      Coerce(arg, FieldType::kBoolean);
      if (*arg->type != FieldType::kBoolean) return Mismatch(*arg, context, "a boolean");
    }
    node.type = FieldType::kBoolean;
    return {};
  }

  Check Arithmetic(Node& node) {
    for (auto& arg : node.args) {
      DRIFTD_EXPR_TRY(Run(arg));
      if (arg->type && !IsNumeric(*arg->type)) {
        return Mismatch(*arg, fmt::format("'{}'", OpText(node.op)), "numbers");
      }
    }
    std::optional<FieldType> type = CommonType(node.args[0]->type, node.args[1]->type);
    if (node.op == Op::kDiv) type = FieldType::kDouble;  // as Spark: / is always fractional
    for (auto& arg : node.args) Coerce(arg, *type);
    node.type = type;
    return {};
  }

  // Two operands that are compared for equality or order; coerced to their common type.
  static Check Comparable(std::unique_ptr<Node>& a, std::unique_ptr<Node>& b,
                          std::string_view context) {
    auto type = CommonType(a->type, b->type);
    if (!type) {
      return tl::unexpected(ErrorAt(
          b->offset, fmt::format("type mismatch: {} cannot compare {} with {}{}", context,
                                 TypeName(a->type), TypeName(b->type),
                                 (a->type && IsNumeric(*a->type)) || (b->type && IsNumeric(*b->type))
                                     ? "; convert one side with CAST(... AS type)"
                                     : "")));
    }
    if (IsCollection(*type)) {
      return tl::unexpected(
          ErrorAt(a->offset, fmt::format("{} cannot compare {} values; compare an element "
                                         "(column[0], column['key']) or size(column)",
                                         context, FieldTypeName(*type))));
    }
    Coerce(a, *type);
    Coerce(b, *type);
    return {};
  }

  Check Comparison(Node& node) {
    for (auto& arg : node.args) DRIFTD_EXPR_TRY(Run(arg));
    DRIFTD_EXPR_TRY(Comparable(node.args[0], node.args[1], fmt::format("'{}'", OpText(node.op))));
    node.type = FieldType::kBoolean;
    return {};
  }

  Check In(Node& node) {
    for (auto& arg : node.args) DRIFTD_EXPR_TRY(Run(arg));
    // Every item meets the operand in one common type.
    std::optional<FieldType> type = node.args[0]->type;
    for (size_t i = 1; i < node.args.size(); ++i) {
      auto common = CommonType(type, node.args[i]->type);
      if (!common) {
        return tl::unexpected(ErrorAt(
            node.args[i]->offset,
            fmt::format("type mismatch: IN cannot compare {} with {}", TypeName(node.args[0]->type),
                        TypeName(node.args[i]->type))));
      }
      type = common;
    }
    if (IsCollection(*type)) {
      return tl::unexpected(ErrorAt(
          node.offset, fmt::format("IN cannot compare {} values", FieldTypeName(*type))));
    }
    for (auto& arg : node.args) Coerce(arg, *type);
    node.type = FieldType::kBoolean;
    return {};
  }

  // Result branches (CASE's THEN/ELSE, coalesce's arguments) meet in one type.
  Check Branches(Node& node, const std::vector<size_t>& branches, std::string_view context) {
    std::optional<FieldType> type;
    bool any = false;
    for (size_t index : branches) {
      const auto& arg = node.args[index];
      if (!arg->type) continue;
      if (!any) {
        type = arg->type;
        any = true;
        continue;
      }
      auto common = CommonType(type, arg->type);
      if (!common) {
        return tl::unexpected(ErrorAt(
            arg->offset, fmt::format("type mismatch: {} mixes {} and {}", context,
                                     TypeName(type), TypeName(arg->type))));
      }
      type = common;
    }
    if (!any) return {};  // all NULL: NULL-typed, given a type by the context
    for (size_t index : branches) Coerce(node.args[index], *type);
    node.type = type;
    return {};
  }

  Check Case(Node& node) {
    for (auto& arg : node.args) DRIFTD_EXPR_TRY(Run(arg));
    const size_t first = node.case_operand ? 1 : 0;
    const size_t pairs_end = node.args.size() - (node.case_else ? 1 : 0);
    std::vector<size_t> branches;
    for (size_t i = first; i < pairs_end; i += 2) {
      auto& when = node.args[i];
      if (node.case_operand) {
        DRIFTD_EXPR_TRY(Comparable(node.args[0], when, "CASE ... WHEN"));
      } else {
        Coerce(when, FieldType::kBoolean);
        if (*when->type != FieldType::kBoolean) return Mismatch(*when, "WHEN", "a boolean");
      }
      branches.push_back(i + 1);
    }
    if (node.case_operand) {
      // The operand meets every WHEN in one type; coerce WHENs again if the operand widened.
      for (size_t i = first; i < pairs_end; i += 2) {
        DRIFTD_EXPR_TRY(Comparable(node.args[0], node.args[i], "CASE ... WHEN"));
      }
    }
    if (node.case_else) branches.push_back(node.args.size() - 1);
    return Branches(node, branches, "CASE");
  }

  Check Cast(Node& node) {
    DRIFTD_EXPR_TRY(Run(node.args[0]));
    Coerce(node.args[0], node.cast_to);
    const FieldType from = *node.args[0]->type;
    if (IsCollection(from)) {
      return Mismatch(*node.args[0], "CAST", "a scalar value");
    }
    const FieldType to = node.cast_to;
    // Timestamps convert only to and from strings and numbers (seconds), not booleans.
    if ((from == FieldType::kTimestamp && to == FieldType::kBoolean) ||
        (from == FieldType::kBoolean && to == FieldType::kTimestamp)) {
      return tl::unexpected(ErrorAt(node.offset, fmt::format("cannot CAST {} AS {}",
                                                             FieldTypeName(from),
                                                             FieldTypeName(to))));
    }
    node.type = to;
    return {};
  }

  // array[i] (0-based) and map['key'].
  Check Index(Node& node) {
    for (auto& arg : node.args) DRIFTD_EXPR_TRY(Run(arg));
    Coerce(node.args[0], FieldType::kDoubleArray);
    const FieldType container = *node.args[0]->type;
    if (IsMap(container)) {
      Coerce(node.args[1], FieldType::kString);
      if (*node.args[1]->type != FieldType::kString) {
        return Mismatch(*node.args[1], "a map key", "a string");
      }
      node.type = container == FieldType::kDoubleMap ? FieldType::kDouble : FieldType::kString;
      return {};
    }
    Coerce(node.args[1], FieldType::kLong);
    if (container != FieldType::kDoubleArray && container != FieldType::kStringArray) {
      return Mismatch(*node.args[0], "[index]", "an array or a map");
    }
    if (!IsIntegral(*node.args[1]->type)) return Mismatch(*node.args[1], "an array index", "an integer");
    node.type = container == FieldType::kDoubleArray ? FieldType::kDouble : FieldType::kString;
    return {};
  }

  Check Call(Node& node) {
    node.fn = FindFunction(node.name);
    if (node.fn == nullptr) {
      ExprError error = ErrorAt(node.offset, fmt::format("unknown function '{}'", node.name));
      error.unknown_name = Lower(node.name);
      error.candidates = FunctionNames();
      return tl::unexpected(std::move(error));
    }
    const FunctionDef& def = *node.fn;
    if (node.args.size() < def.min_args || node.args.size() > def.max_args) {
      return tl::unexpected(ErrorAt(
          node.offset, fmt::format("{} takes {}, found {} argument{}", def.name, def.signature,
                                   node.args.size(), node.args.size() == 1 ? "" : "s")));
    }
    for (auto& arg : node.args) DRIFTD_EXPR_TRY(Run(arg));
    const std::string context = fmt::format("{}()", def.name);
    switch (def.fn) {
      case Fn::kAbs:
        Coerce(node.args[0], FieldType::kDouble);
        if (!IsNumeric(*node.args[0]->type)) return Mismatch(*node.args[0], context, "a number");
        node.type = node.args[0]->type;
        return {};
      case Fn::kSqrt:
      case Fn::kLog:
      case Fn::kLn:
      case Fn::kLog10:
      case Fn::kExp:
      case Fn::kPow:
        for (auto& arg : node.args) {
          Coerce(arg, FieldType::kDouble);
          if (!IsNumeric(*arg->type)) return Mismatch(*arg, context, "a number");
        }
        node.type = FieldType::kDouble;
        return {};
      case Fn::kLeast:
      case Fn::kGreatest:
      case Fn::kCoalesce: {
        std::vector<size_t> all(node.args.size());
        for (size_t i = 0; i < all.size(); ++i) all[i] = i;
        DRIFTD_EXPR_TRY(Branches(node, all, context));
        if (def.fn != Fn::kCoalesce && node.type &&
            (IsCollection(*node.type) || *node.type == FieldType::kBoolean)) {
          return Mismatch(*node.args[0], context, "numbers, strings or timestamps");
        }
        if (node.type && IsCollection(*node.type) && *node.type != FieldType::kDoubleArray) {
          return Mismatch(*node.args[0], context, "scalar values or array<double>");
        }
        return {};
      }
      case Fn::kSize:
        Coerce(node.args[0], FieldType::kDoubleArray);
        if (!IsCollection(*node.args[0]->type)) {
          return Mismatch(*node.args[0], context, "an array or a map");
        }
        node.type = FieldType::kInt;
        return {};
    }
    return {};
  }

  const Schema& schema_;
};
#undef DRIFTD_EXPR_TRY

}  // namespace

Check CheckTree(std::unique_ptr<Node>& root, const Schema& columns) {
  Checker checker(columns);
  auto checked = checker.Run(root);
  if (!checked) return checked;
  if (!root->type) {
    return tl::unexpected(
        ErrorAt(root->offset, "the expression is always NULL and has no type; write "
                              "CAST(NULL AS double) (or another type)"));
  }
  return {};
}

}  // namespace driftd::expr
