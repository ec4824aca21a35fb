// The expression language: lexer, recursive-descent parser, type checker and column-at-a-time
// evaluator. Operator precedence, loosest first (as Spark SQL):
//   OR; AND; NOT; comparison (= == != <> < <= > >=), IS [NOT] NULL, [NOT] IN, [NOT] BETWEEN;
//   + -; * / %; unary - +; postfix [index].
#include "engine/expr/expr.h"

#include <algorithm>
#include <cctype>
#include <charconv>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <iterator>
#include <limits>
#include <utility>

#include <fmt/format.h>

#include "engine/time_iso8601.h"

namespace driftd::expr {

// ---- tokens -------------------------------------------------------------------------------

namespace {

enum class Tok { kEnd, kIdent, kQuotedIdent, kInteger, kDecimal, kString, kSymbol };

struct Token {
  Tok kind = Tok::kEnd;
  std::string text;  // identifier, string contents or symbol
  size_t offset = 0;
};

ExprError ErrorAt(size_t offset, std::string message) {
  return ExprError{offset, std::move(message), {}, {}};
}

bool IsIdentStart(char c) { return std::isalpha(static_cast<unsigned char>(c)) || c == '_'; }
bool IsIdentChar(char c) { return std::isalnum(static_cast<unsigned char>(c)) || c == '_'; }

std::string Lower(std::string_view text) {
  std::string out(text);
  for (char& c : out) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return out;
}

ExprResult<std::vector<Token>> Lex(std::string_view text) {
  std::vector<Token> tokens;
  size_t i = 0;
  while (true) {
    while (i < text.size() && std::isspace(static_cast<unsigned char>(text[i]))) ++i;
    Token token;
    token.offset = i;
    if (i == text.size()) {
      tokens.push_back(token);
      return tokens;
    }
    const char c = text[i];
    if (IsIdentStart(c)) {
      size_t end = i;
      while (end < text.size() && IsIdentChar(text[end])) ++end;
      token.kind = Tok::kIdent;
      token.text = std::string(text.substr(i, end - i));
      i = end;
    } else if (c == '`') {
      size_t end = i + 1;
      std::string name;
      while (true) {
        if (end >= text.size()) return tl::unexpected(ErrorAt(i, "unterminated `quoted name`"));
        if (text[end] == '`') {
          if (end + 1 < text.size() && text[end + 1] == '`') {  // `` is a literal backtick
            name.push_back('`');
            end += 2;
            continue;
          }
          break;
        }
        name.push_back(text[end++]);
      }
      if (name.empty()) return tl::unexpected(ErrorAt(i, "empty `quoted name`"));
      token.kind = Tok::kQuotedIdent;
      token.text = std::move(name);
      i = end + 1;
    } else if (std::isdigit(static_cast<unsigned char>(c)) ||
               (c == '.' && i + 1 < text.size() &&
                std::isdigit(static_cast<unsigned char>(text[i + 1])))) {
      size_t end = i;
      bool decimal = false;
      while (end < text.size() && std::isdigit(static_cast<unsigned char>(text[end]))) ++end;
      if (end < text.size() && text[end] == '.') {
        decimal = true;
        ++end;
        while (end < text.size() && std::isdigit(static_cast<unsigned char>(text[end]))) ++end;
      }
      if (end < text.size() && (text[end] == 'e' || text[end] == 'E')) {
        size_t exp = end + 1;
        if (exp < text.size() && (text[exp] == '+' || text[exp] == '-')) ++exp;
        if (exp < text.size() && std::isdigit(static_cast<unsigned char>(text[exp]))) {
          decimal = true;
          end = exp;
          while (end < text.size() && std::isdigit(static_cast<unsigned char>(text[end]))) ++end;
        }
      }
      if (end < text.size() && IsIdentChar(text[end])) {
        return tl::unexpected(ErrorAt(i, fmt::format("cannot read number '{}'",
                                                     text.substr(i, end + 1 - i))));
      }
      token.kind = decimal ? Tok::kDecimal : Tok::kInteger;
      token.text = std::string(text.substr(i, end - i));
      i = end;
    } else if (c == '\'' || c == '"') {
      size_t end = i + 1;
      std::string value;
      while (true) {
        if (end >= text.size()) {
          return tl::unexpected(ErrorAt(i, "unterminated string literal"));
        }
        const char d = text[end];
        if (d == c) {
          if (end + 1 < text.size() && text[end + 1] == c) {  // '' inside '...'
            value.push_back(c);
            end += 2;
            continue;
          }
          break;
        }
        if (d == '\\' && end + 1 < text.size()) {
          const char e = text[end + 1];
          value.push_back(e == 'n' ? '\n' : e == 't' ? '\t' : e == 'r' ? '\r' : e == '0' ? '\0' : e);
          end += 2;
          continue;
        }
        value.push_back(d);
        ++end;
      }
      token.kind = Tok::kString;
      token.text = std::move(value);
      i = end + 1;
    } else {
      static constexpr std::string_view kTwo[] = {"<=", ">=", "<>", "!=", "=="};
      token.kind = Tok::kSymbol;
      for (std::string_view two : kTwo) {
        if (text.substr(i, 2) == two) token.text = std::string(two);
      }
      if (token.text.empty()) {
        if (std::string_view("+-*/%()[],=<>.").find(c) == std::string_view::npos) {
          return tl::unexpected(ErrorAt(i, fmt::format("unexpected character '{}'", c)));
        }
        token.text = std::string(1, c);
      }
      i += token.text.size();
    }
    tokens.push_back(std::move(token));
  }
}

}  // namespace

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

namespace {

std::unique_ptr<Node> MakeNode(Op op, size_t offset) {
  auto node = std::make_unique<Node>();
  node->op = op;
  node->offset = offset;
  return node;
}

std::string_view TypeName(const std::optional<FieldType>& type) {
  return type ? FieldTypeName(*type) : std::string_view("null");
}

bool IsKeyword(const Token& token, std::string_view keyword) {
  if (token.kind != Tok::kIdent || token.text.size() != keyword.size()) return false;
  for (size_t i = 0; i < keyword.size(); ++i) {
    if (std::toupper(static_cast<unsigned char>(token.text[i])) != keyword[i]) return false;
  }
  return true;
}

constexpr std::string_view kReserved[] = {"AND", "OR",   "NOT",  "IS",   "NULL", "IN",
                                          "CASE", "WHEN", "THEN", "ELSE", "END",  "CAST",
                                          "AS",  "TRUE", "FALSE", "BETWEEN"};

bool IsReserved(const Token& token) {
  for (std::string_view word : kReserved) {
    if (IsKeyword(token, word)) return true;
  }
  return false;
}

std::optional<FieldType> CastTypeOf(std::string_view name) {
  const std::string lower = Lower(name);
  if (lower == "double" || lower == "float" || lower == "real") return FieldType::kDouble;
  if (lower == "long" || lower == "bigint") return FieldType::kLong;
  if (lower == "int" || lower == "integer" || lower == "smallint" || lower == "tinyint") {
    return FieldType::kInt;
  }
  if (lower == "string" || lower == "varchar") return FieldType::kString;
  if (lower == "boolean" || lower == "bool") return FieldType::kBoolean;
  if (lower == "timestamp") return FieldType::kTimestamp;
  return std::nullopt;
}

std::string Describe(const Token& token) {
  switch (token.kind) {
    case Tok::kEnd: return "the end of the expression";
    case Tok::kString: return fmt::format("string '{}'", token.text);
    case Tok::kQuotedIdent: return fmt::format("`{}`", token.text);
    default: return fmt::format("'{}'", token.text);
  }
}

// Bounds on what a pipeline file may ask for, so that checking, evaluating and freeing a tree
// (all recursive) stay far from the end of the stack whatever the text.
constexpr size_t kMaxExpressionBytes = 8192;
constexpr int kMaxNesting = 64;   // parentheses, NOT, unary minus, arguments within arguments
constexpr int kMaxHeight = 256;   // operators between the root and a leaf

// The tree's height, without recursion.
int HeightOf(const Node& root) {
  int height = 0;
  std::vector<std::pair<const Node*, int>> stack{{&root, 1}};
  while (!stack.empty()) {
    auto [node, depth] = stack.back();
    stack.pop_back();
    height = std::max(height, depth);
    if (height > kMaxHeight) return height;
    for (const auto& arg : node->args) stack.emplace_back(arg.get(), depth + 1);
  }
  return height;
}

class Parser {
 public:
  explicit Parser(std::vector<Token> tokens) : tokens_(std::move(tokens)) {}

  ExprResult<std::unique_ptr<Node>> Expression() {
    Nesting nesting(*this);
    if (depth_ > kMaxNesting) return tl::unexpected(TooDeep());
    return Or();
  }

  const Token& Peek(size_t ahead = 0) const {
    return tokens_[std::min(pos_ + ahead, tokens_.size() - 1)];
  }
  const Token& Next() {
    const Token& token = tokens_[pos_];
    if (pos_ + 1 < tokens_.size()) ++pos_;
    return token;
  }
  bool AtEnd() const { return Peek().kind == Tok::kEnd; }
  bool IsSymbol(std::string_view symbol, size_t ahead = 0) const {
    return Peek(ahead).kind == Tok::kSymbol && Peek(ahead).text == symbol;
  }
  bool Accept(std::string_view keyword) {
    if (!IsKeyword(Peek(), keyword)) return false;
    Next();
    return true;
  }
  bool AcceptSymbol(std::string_view symbol) {
    if (!IsSymbol(symbol)) return false;
    Next();
    return true;
  }
  ExprError Unexpected(std::string_view expected) const {
    return ErrorAt(Peek().offset, fmt::format("expected {}, found {}", expected, Describe(Peek())));
  }
  tl::expected<void, ExprError> ExpectSymbol(std::string_view symbol) {
    if (!AcceptSymbol(symbol)) return tl::unexpected(Unexpected(fmt::format("'{}'", symbol)));
    return {};
  }
  tl::expected<void, ExprError> ExpectKeyword(std::string_view keyword) {
    if (!Accept(keyword)) return tl::unexpected(Unexpected(keyword));
    return {};
  }

 private:
  using NodeResult = ExprResult<std::unique_ptr<Node>>;

  struct Nesting {
    explicit Nesting(Parser& parser) : parser_(parser) { ++parser_.depth_; }
    ~Nesting() { --parser_.depth_; }
    Parser& parser_;
  };

  ExprError TooDeep() const {
    return ErrorAt(Peek().offset,
                   fmt::format("the expression nests more than {} levels deep", kMaxNesting));
  }

  static std::unique_ptr<Node> Binary(Op op, size_t offset, std::unique_ptr<Node> left,
                                      std::unique_ptr<Node> right) {
    auto node = MakeNode(op, offset);
    node->args.push_back(std::move(left));
    node->args.push_back(std::move(right));
    return node;
  }

  NodeResult Or() {
    auto left = And();
    if (!left) return left;
    while (IsKeyword(Peek(), "OR")) {
      const size_t at = Next().offset;
      auto right = And();
      if (!right) return right;
      left = Binary(Op::kOr, at, std::move(*left), std::move(*right));
    }
    return left;
  }

  NodeResult And() {
    auto left = Not();
    if (!left) return left;
    while (IsKeyword(Peek(), "AND")) {
      const size_t at = Next().offset;
      auto right = Not();
      if (!right) return right;
      left = Binary(Op::kAnd, at, std::move(*left), std::move(*right));
    }
    return left;
  }

  NodeResult Not() {
    if (IsKeyword(Peek(), "NOT")) {
      const size_t at = Next().offset;
      Nesting nesting(*this);
      if (depth_ > kMaxNesting) return tl::unexpected(TooDeep());
      auto operand = Not();
      if (!operand) return operand;
      auto node = MakeNode(Op::kNot, at);
      node->args.push_back(std::move(*operand));
      return node;
    }
    return Predicate();
  }

  NodeResult Predicate() {
    auto left = Additive();
    if (!left) return left;
    while (true) {
      const Token& token = Peek();
      const size_t at = token.offset;
      if (token.kind == Tok::kSymbol) {
        std::optional<Op> op;
        if (token.text == "=" || token.text == "==") op = Op::kEq;
        if (token.text == "!=" || token.text == "<>") op = Op::kNe;
        if (token.text == "<") op = Op::kLt;
        if (token.text == "<=") op = Op::kLe;
        if (token.text == ">") op = Op::kGt;
        if (token.text == ">=") op = Op::kGe;
        if (!op) return left;
        Next();
        auto right = Additive();
        if (!right) return right;
        left = Binary(*op, at, std::move(*left), std::move(*right));
        continue;
      }
      if (IsKeyword(token, "IS")) {
        Next();
        const bool negated = Accept("NOT");
        if (!Accept("NULL")) return tl::unexpected(Unexpected(negated ? "NULL" : "NULL or NOT NULL"));
        auto node = MakeNode(negated ? Op::kIsNotNull : Op::kIsNull, at);
        node->args.push_back(std::move(*left));
        left = std::move(node);
        continue;
      }
      bool negated = false;
      if (IsKeyword(token, "NOT") && (IsKeyword(Peek(1), "IN") || IsKeyword(Peek(1), "BETWEEN"))) {
        Next();
        negated = true;
      }
      if (Accept("IN")) {
        auto node = MakeNode(negated ? Op::kNotIn : Op::kIn, at);
        node->args.push_back(std::move(*left));
        if (auto open = ExpectSymbol("("); !open) return tl::unexpected(open.error());
        do {
          auto item = Expression();
          if (!item) return item;
          node->args.push_back(std::move(*item));
        } while (AcceptSymbol(","));
        if (auto close = ExpectSymbol(")"); !close) return tl::unexpected(close.error());
        left = std::move(node);
        continue;
      }
      if (Accept("BETWEEN")) {
        // a BETWEEN lo AND hi is a >= lo AND a <= hi; the operand is evaluated twice.
        auto low = Additive();
        if (!low) return low;
        if (auto and_kw = ExpectKeyword("AND"); !and_kw) return tl::unexpected(and_kw.error());
        auto high = Additive();
        if (!high) return high;
        auto copy = Clone(**left);
        auto range = Binary(Op::kAnd, at, Binary(Op::kGe, at, std::move(*left), std::move(*low)),
                            Binary(Op::kLe, at, std::move(copy), std::move(*high)));
        if (negated) {
          auto node = MakeNode(Op::kNot, at);
          node->args.push_back(std::move(range));
          range = std::move(node);
        }
        left = std::move(range);
        continue;
      }
      return left;
    }
  }

  static std::unique_ptr<Node> Clone(const Node& node) {
    auto copy = MakeNode(node.op, node.offset);
    copy->f = node.f;
    copy->i = node.i;
    copy->s = node.s;
    copy->null = node.null;
    copy->type = node.type;
    copy->name = node.name;
    copy->case_operand = node.case_operand;
    copy->case_else = node.case_else;
    copy->cast_to = node.cast_to;
    for (const auto& arg : node.args) copy->args.push_back(Clone(*arg));
    return copy;
  }

  NodeResult Additive() {
    auto left = Multiplicative();
    if (!left) return left;
    while (IsSymbol("+") || IsSymbol("-")) {
      const Token& token = Next();
      const Op op = token.text == "+" ? Op::kAdd : Op::kSub;
      auto right = Multiplicative();
      if (!right) return right;
      left = Binary(op, token.offset, std::move(*left), std::move(*right));
    }
    return left;
  }

  NodeResult Multiplicative() {
    auto left = Unary();
    if (!left) return left;
    while (IsSymbol("*") || IsSymbol("/") || IsSymbol("%")) {
      const Token& token = Next();
      const Op op = token.text == "*" ? Op::kMul : token.text == "/" ? Op::kDiv : Op::kMod;
      auto right = Unary();
      if (!right) return right;
      left = Binary(op, token.offset, std::move(*left), std::move(*right));
    }
    return left;
  }

  NodeResult Unary() {
    if (IsSymbol("-") || IsSymbol("+")) {
      const Token& token = Next();
      const bool minus = token.text == "-";
      Nesting nesting(*this);
      if (depth_ > kMaxNesting) return tl::unexpected(TooDeep());
      auto operand = Unary();
      if (!operand) return operand;
      if (!minus) return operand;
      Node& value = **operand;
      if (value.op == Op::kLiteral && value.type == FieldType::kDouble) {
        value.f = -value.f;
        value.offset = token.offset;
        return operand;
      }
      auto node = MakeNode(Op::kNeg, token.offset);
      node->args.push_back(std::move(*operand));
      return node;
    }
    return Postfix();
  }

  NodeResult Postfix() {
    auto base = Primary();
    if (!base) return base;
    while (IsSymbol("[") || IsSymbol(".")) {
      if (IsSymbol(".")) {
        // A struct's field or a map's key: the dotted name is resolved by the checker.
        const size_t at = Next().offset;
        const Token& field = Peek();
        if (field.kind != Tok::kIdent && field.kind != Tok::kQuotedIdent) {
          return tl::unexpected(Unexpected("a field name after '.'"));
        }
        if ((*base)->op != Op::kColumn) {
          return tl::unexpected(ErrorAt(at, "'.' names a field of a struct or a key of a map: "
                                            "it must follow a column's name"));
        }
        (*base)->name += "." + field.text;
        (*base)->dotted = true;
        Next();
        continue;
      }
      const size_t at = Next().offset;
      auto index = Expression();
      if (!index) return index;
      if (auto close = ExpectSymbol("]"); !close) return tl::unexpected(close.error());
      base = Binary(Op::kIndex, at, std::move(*base), std::move(*index));
    }
    return base;
  }

  NodeResult Primary() {
    const Token& token = Peek();
    const size_t at = token.offset;
    switch (token.kind) {
      case Tok::kInteger: {
        Next();
        auto node = MakeNode(Op::kLiteral, at);
        int64_t value = 0;
        const auto [end, ec] =
            std::from_chars(token.text.data(), token.text.data() + token.text.size(), value);
        if (ec == std::errc()) {
          node->type = FieldType::kLong;
          node->i = value;
        } else {  // beyond a long: a double, as Spark reads 1e30-sized integers as decimals
          node->type = FieldType::kDouble;
          node->f = std::strtod(token.text.c_str(), nullptr);
        }
        return node;
      }
      case Tok::kDecimal: {
        Next();
        auto node = MakeNode(Op::kLiteral, at);
        node->type = FieldType::kDouble;
        node->f = std::strtod(token.text.c_str(), nullptr);
        return node;
      }
      case Tok::kString: {
        Next();
        auto node = MakeNode(Op::kLiteral, at);
        node->type = FieldType::kString;
        node->s = token.text;
        return node;
      }
      case Tok::kQuotedIdent: {
        Next();
        auto node = MakeNode(Op::kColumn, at);
        node->name = token.text;
        return node;
      }
      case Tok::kSymbol:
        if (token.text == "(") {
          Next();
          auto inner = Expression();
          if (!inner) return inner;
          if (auto close = ExpectSymbol(")"); !close) return tl::unexpected(close.error());
          return inner;
        }
        return tl::unexpected(Unexpected("a value, a column or '('"));
      case Tok::kEnd:
        return tl::unexpected(Unexpected("a value, a column or '('"));
      case Tok::kIdent:
        break;
    }
    if (IsKeyword(token, "NULL") || IsKeyword(token, "TRUE") || IsKeyword(token, "FALSE")) {
      Next();
      auto node = MakeNode(Op::kLiteral, at);
      if (IsKeyword(token, "NULL")) {
        node->null = true;
      } else {
        node->type = FieldType::kBoolean;
        node->i = IsKeyword(token, "TRUE") ? 1 : 0;
      }
      return node;
    }
    if (IsKeyword(token, "CASE")) return Case();
    if (IsKeyword(token, "CAST")) return Cast();
    if (IsReserved(token)) return tl::unexpected(Unexpected("a value, a column or '('"));
    Next();
    if (IsSymbol("(")) {
      Next();
      auto node = MakeNode(Op::kCall, at);
      node->name = token.text;
      if (!AcceptSymbol(")")) {
        do {
          auto arg = Expression();
          if (!arg) return arg;
          node->args.push_back(std::move(*arg));
        } while (AcceptSymbol(","));
        if (auto close = ExpectSymbol(")"); !close) return tl::unexpected(close.error());
      }
      return node;
    }
    auto node = MakeNode(Op::kColumn, at);
    node->name = token.text;
    return node;
  }

  NodeResult Case() {
    auto node = MakeNode(Op::kCase, Next().offset);
    if (!IsKeyword(Peek(), "WHEN")) {
      auto operand = Expression();
      if (!operand) return operand;
      node->case_operand = true;
      node->args.push_back(std::move(*operand));
    }
    if (!IsKeyword(Peek(), "WHEN")) return tl::unexpected(Unexpected("WHEN"));
    while (Accept("WHEN")) {
      auto when = Expression();
      if (!when) return when;
      if (auto then_kw = ExpectKeyword("THEN"); !then_kw) return tl::unexpected(then_kw.error());
      auto then = Expression();
      if (!then) return then;
      node->args.push_back(std::move(*when));
      node->args.push_back(std::move(*then));
    }
    if (Accept("ELSE")) {
      auto otherwise = Expression();
      if (!otherwise) return otherwise;
      node->case_else = true;
      node->args.push_back(std::move(*otherwise));
    }
    if (auto end = ExpectKeyword("END"); !end) return tl::unexpected(end.error());
    return node;
  }

  NodeResult Cast() {
    auto node = MakeNode(Op::kCast, Next().offset);
    if (auto open = ExpectSymbol("("); !open) return tl::unexpected(open.error());
    auto operand = Expression();
    if (!operand) return operand;
    node->args.push_back(std::move(*operand));
    if (auto as = ExpectKeyword("AS"); !as) return tl::unexpected(as.error());
    const Token& type = Peek();
    auto target = type.kind == Tok::kIdent ? CastTypeOf(type.text) : std::nullopt;
    if (!target) {
      return tl::unexpected(ErrorAt(
          type.offset, fmt::format("expected a type (double, bigint, int, string, boolean, "
                                   "timestamp), found {}",
                                   Describe(type))));
    }
    Next();
    node->cast_to = *target;
    if (auto close = ExpectSymbol(")"); !close) return tl::unexpected(close.error());
    return node;
  }

  std::vector<Token> tokens_;
  size_t pos_ = 0;
  int depth_ = 0;
};

ExprResult<std::unique_ptr<Node>> ParseTree(std::string_view text, Parser*& parser_out,
                                            std::unique_ptr<Parser>& parser) {
  if (text.size() > kMaxExpressionBytes) {
    return tl::unexpected(ErrorAt(
        0, fmt::format("the expression is {} bytes long; at most {}", text.size(),
                       kMaxExpressionBytes)));
  }
  auto tokens = Lex(text);
  if (!tokens) return tl::unexpected(tokens.error());
  parser = std::make_unique<Parser>(std::move(*tokens));
  parser_out = parser.get();
  auto root = parser->Expression();
  if (!root) return root;
  if (HeightOf(**root) > kMaxHeight) {
    return tl::unexpected(ErrorAt(
        0, fmt::format("the expression has more than {} operators in a row", kMaxHeight)));
  }
  return root;
}

}  // namespace

// ---- functions ----------------------------------------------------------------------------

enum class Fn { kAbs, kSqrt, kLog, kLn, kLog10, kExp, kPow, kLeast, kGreatest, kCoalesce, kSize };

struct FunctionDef {
  std::string_view name;
  Fn fn;
  size_t min_args;
  size_t max_args;  // SIZE_MAX: any
  std::string_view signature;  // for messages
};

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

using Check = tl::expected<void, ExprError>;

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

// ---- evaluation ---------------------------------------------------------------------------

namespace {

void Prepare(Column& c, FieldType type, size_t rows) {
  c.type = type;
  c.Clear();  // with the leading offsets of variable-width columns
  c.valid.assign(rows, 1);
  switch (type) {
    case FieldType::kDouble: c.f64.resize(rows); break;
    case FieldType::kString: c.str_offsets.reserve(rows + 1); break;
    case FieldType::kDoubleArray:
    case FieldType::kStringArray:
    case FieldType::kDoubleMap:
    case FieldType::kStringMap: c.arr_offsets.reserve(rows + 1); break;
    default: c.i64.resize(rows); break;
  }
}

inline double Num(const Column& c, size_t row) {
  return c.type == FieldType::kDouble ? c.f64[row] : static_cast<double>(c.i64[row]);
}

// Appends row `row` of `src` as the next row of a string or array column, or stores it at
// `at` in a fixed-width one, converting a number to the column's numeric type.
void PutValue(const Column& src, size_t row, Column& out, size_t at) {
  switch (out.type) {
    case FieldType::kString: {
      if (!src.IsNull(row)) out.str_data.append(src.String(row));
      out.str_offsets.push_back(static_cast<uint32_t>(out.str_data.size()));
      break;
    }
    case FieldType::kDoubleArray: {
      if (!src.IsNull(row)) {
        out.f64.insert(out.f64.end(), src.ArrayData(row), src.ArrayData(row) + src.ArraySize(row));
      }
      out.arr_offsets.push_back(static_cast<uint32_t>(out.f64.size()));
      break;
    }
    case FieldType::kDouble: out.f64[at] = src.IsNull(row) ? 0 : Num(src, row); break;
    default: out.i64[at] = src.IsNull(row) ? 0 : src.i64[row]; break;
  }
  out.valid[at] = src.valid[row];
}

// Ends a row of a variable-width column whose value is NULL.
void PutNull(Column& out, size_t at) {
  if (out.type == FieldType::kString) {
    out.str_offsets.push_back(static_cast<uint32_t>(out.str_data.size()));
  } else if (out.type == FieldType::kDoubleArray) {
    out.arr_offsets.push_back(static_cast<uint32_t>(out.f64.size()));
  } else if (IsCollection(out.type)) {
    out.arr_offsets.push_back(static_cast<uint32_t>(out.entry_valid.size()));
  }
  out.valid[at] = 0;
}

int64_t Wrap(uint64_t value) { return static_cast<int64_t>(value); }

// Three-way comparison of row values of two columns of one (common) type.
inline int Compare(const Column& a, const Column& b, size_t row, FieldType type) {
  switch (type) {
    case FieldType::kDouble: {
      const double x = Num(a, row), y = Num(b, row);
      // As Spark: NaN equals NaN and is larger than any other value.
      if (std::isnan(x) || std::isnan(y)) return std::isnan(x) - std::isnan(y);
      return (x > y) - (x < y);
    }
    case FieldType::kString: return a.String(row).compare(b.String(row));
    default: {
      const int64_t x = a.i64[row], y = b.i64[row];
      return (x > y) - (x < y);
    }
  }
}

bool Holds(Op op, int cmp) {
  switch (op) {
    case Op::kEq: return cmp == 0;
    case Op::kNe: return cmp != 0;
    case Op::kLt: return cmp < 0;
    case Op::kLe: return cmp <= 0;
    case Op::kGt: return cmp > 0;
    case Op::kGe: return cmp >= 0;
    default: return false;
  }
}

void AppendDouble(std::string& out, double value) {
  if (std::isnan(value)) {
    out += "NaN";
  } else if (std::isinf(value)) {
    out += value > 0 ? "Infinity" : "-Infinity";
  } else if (value == std::trunc(value) && std::fabs(value) < 1e16) {
    fmt::format_to(std::back_inserter(out), "{:.1f}", value);  // Spark prints 2.0, not 2
  } else {
    fmt::format_to(std::back_inserter(out), "{}", value);
  }
}

std::optional<double> ParseDouble(std::string_view text) {
  while (!text.empty() && std::isspace(static_cast<unsigned char>(text.front()))) text.remove_prefix(1);
  while (!text.empty() && std::isspace(static_cast<unsigned char>(text.back()))) text.remove_suffix(1);
  if (text.empty()) return std::nullopt;
  double value = 0;
  if (text.front() == '+') text.remove_prefix(1);
  const auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), value);
  if (ec != std::errc() || end != text.data() + text.size()) return std::nullopt;
  return value;
}

// A double to an integral type: NULL when it has no value there (NaN, out of range), as
// Spark's non-ANSI cast of an out-of-range double is not a number either.
std::optional<int64_t> ToIntegral(double value, FieldType to) {
  const double truncated = std::trunc(value);
  const double lo = to == FieldType::kInt ? -2147483648.0 : -9223372036854775808.0;
  const double hi = to == FieldType::kInt ? 2147483648.0 : 9223372036854775808.0;
  if (!(truncated >= lo && truncated < hi)) return std::nullopt;
  return static_cast<int64_t>(truncated);
}

constexpr int64_t kMicrosPerSecond = 1'000'000;
// Timestamps a CAST produces or prints: years 0001 to 9999, as Spark's; beyond is NULL.
constexpr int64_t kMinTimestampUs = -62'135'596'800'000'000;  // 0001-01-01T00:00:00Z
constexpr int64_t kMaxTimestampUs = 253'402'300'799'999'999;  // 9999-12-31T23:59:59.999999Z

bool InTimestampRange(int64_t micros) {
  return micros >= kMinTimestampUs && micros <= kMaxTimestampUs;
}

class Evaluator {
 public:
  explicit Evaluator(const RecordBatch& batch) : batch_(batch), rows_(batch.num_rows) {}

  const Column& Eval(Node& node) {
    switch (node.op) {
      case Op::kColumn: return batch_.columns[static_cast<size_t>(node.column)];
      case Op::kLiteral: Literal(node); break;
      case Op::kNeg: Neg(node); break;
      case Op::kNot: Not(node); break;
      case Op::kAnd:
      case Op::kOr: Logic(node); break;
      case Op::kAdd:
      case Op::kSub:
      case Op::kMul:
      case Op::kDiv:
      case Op::kMod: Arithmetic(node); break;
      case Op::kEq:
      case Op::kNe:
      case Op::kLt:
      case Op::kLe:
      case Op::kGt:
      case Op::kGe: Comparison(node); break;
      case Op::kIsNull:
      case Op::kIsNotNull: IsNull(node); break;
      case Op::kIn:
      case Op::kNotIn: In(node); break;
      case Op::kCase: Case(node); break;
      case Op::kCast: Cast(node); break;
      case Op::kCall: Call(node); break;
      case Op::kIndex: Index(node); break;
    }
    return node.out;
  }

 private:
  void Literal(Node& node) {
    if (node.literal_rows == rows_) return;  // constant: filled for this many rows already
    Column& out = node.out;
    Prepare(out, *node.type, rows_);
    for (size_t row = 0; row < rows_; ++row) {
      if (node.null) {
        PutNull(out, row);
        continue;
      }
      switch (out.type) {
        case FieldType::kDouble: out.f64[row] = node.f; break;
        case FieldType::kString:
          out.str_data += node.s;
          out.str_offsets.push_back(static_cast<uint32_t>(out.str_data.size()));
          break;
        case FieldType::kDoubleArray:
        case FieldType::kStringArray:
        case FieldType::kDoubleMap:
        case FieldType::kStringMap: PutNull(out, row); break;  // no collection literals
        default: out.i64[row] = node.i; break;
      }
    }
    node.literal_rows = rows_;
  }

  void Neg(Node& node) {
    const Column& a = Eval(*node.args[0]);
    Column& out = node.out;
    Prepare(out, *node.type, rows_);
    for (size_t row = 0; row < rows_; ++row) {
      out.valid[row] = a.valid[row];
      if (out.type == FieldType::kDouble) {
        out.f64[row] = -a.f64[row];
      } else {
        const int64_t r = Wrap(0 - static_cast<uint64_t>(a.i64[row]));
        out.i64[row] = out.type == FieldType::kInt ? static_cast<int32_t>(r) : r;
      }
    }
  }

  void Not(Node& node) {
    const Column& a = Eval(*node.args[0]);
    Column& out = node.out;
    Prepare(out, FieldType::kBoolean, rows_);
    for (size_t row = 0; row < rows_; ++row) {
      out.valid[row] = a.valid[row];
      out.i64[row] = a.i64[row] == 0;
    }
  }

  // Three-valued: FALSE AND NULL is FALSE, TRUE OR NULL is TRUE, otherwise NULL wins.
  void Logic(Node& node) {
    const Column& a = Eval(*node.args[0]);
    const Column& b = Eval(*node.args[1]);
    Column& out = node.out;
    Prepare(out, FieldType::kBoolean, rows_);
    const bool is_and = node.op == Op::kAnd;
    for (size_t row = 0; row < rows_; ++row) {
      const bool a_known = a.valid[row], b_known = b.valid[row];
      const bool x = a_known && a.i64[row] != 0, y = b_known && b.i64[row] != 0;
      if (is_and) {
        const bool any_false = (a_known && !x) || (b_known && !y);
        out.valid[row] = any_false || (a_known && b_known);
        out.i64[row] = !any_false && x && y;
      } else {
        const bool any_true = x || y;
        out.valid[row] = any_true || (a_known && b_known);
        out.i64[row] = any_true;
      }
    }
  }

  void Arithmetic(Node& node) {
    const Column& a = Eval(*node.args[0]);
    const Column& b = Eval(*node.args[1]);
    Column& out = node.out;
    Prepare(out, *node.type, rows_);
    for (size_t row = 0; row < rows_; ++row) out.valid[row] = a.valid[row] & b.valid[row];
    if (out.type == FieldType::kDouble) {
      for (size_t row = 0; row < rows_; ++row) {
        const double x = Num(a, row), y = Num(b, row);
        double r = 0;
        switch (node.op) {
          case Op::kAdd: r = x + y; break;
          case Op::kSub: r = x - y; break;
          case Op::kMul: r = x * y; break;
          case Op::kDiv:
          case Op::kMod:
            if (y == 0) {  // as Spark: a division by zero is NULL
              out.valid[row] = 0;
              break;
            }
            r = node.op == Op::kDiv ? x / y : std::fmod(x, y);
            break;
          default: break;
        }
        out.f64[row] = r;
      }
      return;
    }
    for (size_t row = 0; row < rows_; ++row) {
      const uint64_t x = static_cast<uint64_t>(a.i64[row]), y = static_cast<uint64_t>(b.i64[row]);
      int64_t r = 0;
      switch (node.op) {
        case Op::kAdd: r = Wrap(x + y); break;  // wraps on overflow, as Spark's non-ANSI mode
        case Op::kSub: r = Wrap(x - y); break;
        case Op::kMul: r = Wrap(x * y); break;
        case Op::kMod: {
          const int64_t sx = a.i64[row], sy = b.i64[row];
          if (sy == 0) {
            out.valid[row] = 0;
          } else if (sy == -1) {
            r = 0;  // INT64_MIN % -1 overflows in C++
          } else {
            r = sx % sy;
          }
          break;
        }
        default: break;
      }
      if (node.type == FieldType::kInt) r = static_cast<int32_t>(r);
      out.i64[row] = r;
    }
  }

  void Comparison(Node& node) {
    const Column& a = Eval(*node.args[0]);
    const Column& b = Eval(*node.args[1]);
    const FieldType type = *node.args[0]->type == FieldType::kDouble ||
                                   *node.args[1]->type == FieldType::kDouble
                               ? FieldType::kDouble
                               : *node.args[0]->type;
    Column& out = node.out;
    Prepare(out, FieldType::kBoolean, rows_);
    for (size_t row = 0; row < rows_; ++row) {
      const bool known = a.valid[row] & b.valid[row];
      out.valid[row] = known;
      out.i64[row] = known && Holds(node.op, Compare(a, b, row, type));
    }
  }

  void IsNull(Node& node) {
    const Column& a = Eval(*node.args[0]);
    Column& out = node.out;
    Prepare(out, FieldType::kBoolean, rows_);
    const bool want_null = node.op == Op::kIsNull;
    for (size_t row = 0; row < rows_; ++row) out.i64[row] = (a.valid[row] == 0) == want_null;
  }

  // x IN (a, b): TRUE if x equals one; else NULL if x or an item is NULL; else FALSE.
  void In(Node& node) {
    auto& inputs = node.inputs;
    inputs.clear();
    for (auto& arg : node.args) inputs.push_back(&Eval(*arg));
    FieldType type = *node.args[0]->type;
    for (const auto& arg : node.args) {
      if (*arg->type == FieldType::kDouble) type = FieldType::kDouble;
    }
    Column& out = node.out;
    Prepare(out, FieldType::kBoolean, rows_);
    const bool negated = node.op == Op::kNotIn;
    const Column& x = *inputs[0];
    for (size_t row = 0; row < rows_; ++row) {
      if (!x.valid[row]) {
        out.valid[row] = 0;
        continue;
      }
      bool found = false, unknown = false;
      for (size_t i = 1; i < inputs.size() && !found; ++i) {
        if (!inputs[i]->valid[row]) {
          unknown = true;
        } else if (Compare(x, *inputs[i], row, type) == 0) {
          found = true;
        }
      }
      out.valid[row] = found || !unknown;
      out.i64[row] = negated ? !found : found;
    }
  }

  void Case(Node& node) {
    auto& inputs = node.inputs;
    inputs.clear();
    for (auto& arg : node.args) inputs.push_back(&Eval(*arg));
    Column& out = node.out;
    Prepare(out, *node.type, rows_);
    const size_t first = node.case_operand ? 1 : 0;
    const size_t pairs_end = node.args.size() - (node.case_else ? 1 : 0);
    FieldType compare_type = FieldType::kBoolean;
    if (node.case_operand) {
      compare_type = *node.args[0]->type;
      for (size_t i = first; i < pairs_end; i += 2) {
        if (*node.args[i]->type == FieldType::kDouble) compare_type = FieldType::kDouble;
      }
    }
    for (size_t row = 0; row < rows_; ++row) {
      const Column* chosen = node.case_else ? inputs.back() : nullptr;
      for (size_t i = first; i < pairs_end; i += 2) {
        const Column& when = *inputs[i];
        bool hit = false;
        if (node.case_operand) {
          hit = inputs[0]->valid[row] && when.valid[row] &&
                Compare(*inputs[0], when, row, compare_type) == 0;
        } else {
          hit = when.valid[row] && when.i64[row] != 0;
        }
        if (hit) {
          chosen = inputs[i + 1];
          break;
        }
      }
      if (chosen == nullptr) {
        PutNull(out, row);
      } else {
        PutValue(*chosen, row, out, row);
      }
    }
  }

  void Cast(Node& node) {
    const Column& a = Eval(*node.args[0]);
    const FieldType from = *node.args[0]->type;
    const FieldType to = node.cast_to;
    Column& out = node.out;
    Prepare(out, to, rows_);
    std::string scratch;
    for (size_t row = 0; row < rows_; ++row) {
      if (!a.valid[row]) {
        PutNull(out, row);
        continue;
      }
      switch (to) {
        case FieldType::kString: {
          switch (from) {
            case FieldType::kString: out.str_data.append(a.String(row)); break;
            case FieldType::kDouble: AppendDouble(out.str_data, a.f64[row]); break;
            case FieldType::kBoolean: out.str_data += a.i64[row] ? "true" : "false"; break;
            case FieldType::kTimestamp:
              if (InTimestampRange(a.i64[row])) {
                out.str_data += FormatIso8601Micros(a.i64[row]);
              } else {
                out.valid[row] = 0;
              }
              break;
            default: fmt::format_to(std::back_inserter(out.str_data), "{}", a.i64[row]); break;
          }
          out.str_offsets.push_back(static_cast<uint32_t>(out.str_data.size()));
          break;
        }
        case FieldType::kDouble: {
          std::optional<double> value;
          switch (from) {
            case FieldType::kString: value = ParseDouble(a.String(row)); break;
            case FieldType::kTimestamp:
              value = static_cast<double>(a.i64[row]) / kMicrosPerSecond;
              break;
            default: value = Num(a, row); break;
          }
          out.valid[row] = value.has_value();
          out.f64[row] = value.value_or(0);
          break;
        }
        case FieldType::kBoolean: {
          std::optional<bool> value;
          if (from == FieldType::kString) {
            const std::string text = Lower(a.String(row));
            if (text == "true" || text == "t" || text == "yes" || text == "y" || text == "1") {
              value = true;
            } else if (text == "false" || text == "f" || text == "no" || text == "n" ||
                       text == "0") {
              value = false;
            }
          } else {
            value = Num(a, row) != 0;
          }
          out.valid[row] = value.has_value();
          out.i64[row] = value.value_or(false);
          break;
        }
        case FieldType::kTimestamp: {
          std::optional<int64_t> value;
          if (from == FieldType::kString) {
            value = ParseIso8601Micros(a.String(row));
          } else if (from == FieldType::kTimestamp) {
            value = a.i64[row];
          } else {  // numbers are seconds since the epoch, as Spark
            const double micros = Num(a, row) * kMicrosPerSecond;
            value = ToIntegral(micros, FieldType::kLong);
            if (value && !InTimestampRange(*value)) value.reset();
          }
          out.valid[row] = value.has_value();
          out.i64[row] = value.value_or(0);
          break;
        }
        case FieldType::kLong:
        case FieldType::kInt: {
          std::optional<int64_t> value;
          switch (from) {
            case FieldType::kString: {
              if (auto parsed = ParseDouble(a.String(row))) value = ToIntegral(*parsed, to);
              break;
            }
            case FieldType::kDouble: value = ToIntegral(a.f64[row], to); break;
            case FieldType::kTimestamp: {
              // Seconds, rounded down, as Spark.
              const int64_t micros = a.i64[row];
              value = micros / kMicrosPerSecond - (micros % kMicrosPerSecond < 0 ? 1 : 0);
              break;
            }
            default: value = a.i64[row]; break;
          }
          if (value && to == FieldType::kInt) value = static_cast<int32_t>(*value);
          out.valid[row] = value.has_value();
          out.i64[row] = value.value_or(0);
          break;
        }
        case FieldType::kDoubleArray:
        case FieldType::kStringArray:
        case FieldType::kDoubleMap:
        case FieldType::kStringMap: PutNull(out, row); break;  // rejected by the checker
      }
    }
  }

  void Index(Node& node) {
    const Column& array = Eval(*node.args[0]);
    const Column& index = Eval(*node.args[1]);
    Column& out = node.out;
    if (array.type != FieldType::kDoubleArray) return Element(array, index, node);
    Prepare(out, FieldType::kDouble, rows_);
    for (size_t row = 0; row < rows_; ++row) {
      // 0-based, as Spark's array[i]; out of range is NULL.
      const bool known = array.valid[row] && index.valid[row] && index.i64[row] >= 0 &&
                         static_cast<uint64_t>(index.i64[row]) < array.ArraySize(row);
      out.valid[row] = known;
      out.f64[row] = known ? array.ArrayData(row)[index.i64[row]] : 0;
    }
  }

  // array<string>[i] and map['key']: NULL when the array, the map, the index or the key is,
  // when the index is out of range or the key absent, and when the element's value is.
  void Element(const Column& container, const Column& index, Node& node) {
    Column& out = node.out;
    Prepare(out, *node.type, rows_);
    const bool map = IsMap(container.type);
    size_t hint = 0;  // maps of one producer list their keys in one order
    for (size_t row = 0; row < rows_; ++row) {
      size_t found = SIZE_MAX;
      if (container.valid[row] && index.valid[row]) {
        const size_t begin = container.EntryBegin(row);
        const size_t count = container.EntryEnd(row) - begin;
        if (!map) {
          if (index.i64[row] >= 0 && static_cast<uint64_t>(index.i64[row]) < count) {
            found = begin + static_cast<size_t>(index.i64[row]);
          }
        } else {
          const std::string_view key = index.String(row);
          for (size_t i = 0; i < count; ++i) {
            const size_t at = begin + (hint + i) % count;
            if (container.Key(at) == key) {
              found = at;
              hint = (hint + i) % count;
              break;
            }
          }
        }
      }
      if (found == SIZE_MAX || container.EntryNull(found)) {
        PutNull(out, row);
      } else if (out.type == FieldType::kDouble) {
        out.f64[row] = container.f64[found];
      } else {
        out.str_data.append(container.String(found));
        out.str_offsets.push_back(static_cast<uint32_t>(out.str_data.size()));
      }
    }
  }

  void Call(Node& node) {
    auto& inputs = node.inputs;
    inputs.clear();
    for (auto& arg : node.args) inputs.push_back(&Eval(*arg));
    Column& out = node.out;
    Prepare(out, *node.type, rows_);
    const Fn fn = node.fn->fn;
    switch (fn) {
      case Fn::kAbs: {
        const Column& a = *inputs[0];
        for (size_t row = 0; row < rows_; ++row) {
          out.valid[row] = a.valid[row];
          if (out.type == FieldType::kDouble) {
            out.f64[row] = std::fabs(a.f64[row]);
          } else {
            const uint64_t v = static_cast<uint64_t>(a.i64[row]);
            out.i64[row] = a.i64[row] < 0 ? Wrap(0 - v) : a.i64[row];
          }
        }
        return;
      }
      case Fn::kSqrt:
      case Fn::kLn:
      case Fn::kLog10:
      case Fn::kExp: {
        const Column& a = *inputs[0];
        for (size_t row = 0; row < rows_; ++row) {
          const double x = Num(a, row);
          bool known = a.valid[row];
          double r = 0;
          switch (fn) {
            case Fn::kSqrt: r = std::sqrt(x); break;  // NaN below 0, as Spark
            case Fn::kExp: r = std::exp(x); break;
            case Fn::kLn:
              known = known && x > 0;  // as Spark: the log of a number <= 0 is NULL
              r = std::log(x);
              break;
            default:
              known = known && x > 0;
              r = std::log10(x);
              break;
          }
          out.valid[row] = known;
          out.f64[row] = known ? r : 0;
        }
        return;
      }
      case Fn::kLog: {
        const bool with_base = inputs.size() == 2;
        const Column& x_col = *inputs[with_base ? 1 : 0];
        for (size_t row = 0; row < rows_; ++row) {
          const double x = Num(x_col, row);
          bool known = x_col.valid[row] && x > 0;
          double r = std::log(x);
          if (with_base) {
            const double base = Num(*inputs[0], row);
            known = known && inputs[0]->valid[row] && base > 0;
            r /= std::log(base);
          }
          out.valid[row] = known;
          out.f64[row] = known ? r : 0;
        }
        return;
      }
      case Fn::kPow: {
        for (size_t row = 0; row < rows_; ++row) {
          out.valid[row] = inputs[0]->valid[row] & inputs[1]->valid[row];
          out.f64[row] = std::pow(Num(*inputs[0], row), Num(*inputs[1], row));
        }
        return;
      }
      case Fn::kLeast:
      case Fn::kGreatest: {
        // NULLs are skipped; NULL only when every argument is (as Spark).
        const bool least = fn == Fn::kLeast;
        for (size_t row = 0; row < rows_; ++row) {
          const Column* best = nullptr;
          for (const Column* input : inputs) {
            if (!input->valid[row]) continue;
            if (best == nullptr) {
              best = input;
              continue;
            }
            const int cmp = Compare(*input, *best, row, out.type);
            if (least ? cmp < 0 : cmp > 0) best = input;
          }
          if (best == nullptr) {
            PutNull(out, row);
          } else {
            PutValue(*best, row, out, row);
          }
        }
        return;
      }
      case Fn::kCoalesce: {
        for (size_t row = 0; row < rows_; ++row) {
          const Column* first = nullptr;
          for (const Column* input : inputs) {
            if (input->valid[row]) {
              first = input;
              break;
            }
          }
          if (first == nullptr) {
            PutNull(out, row);
          } else {
            PutValue(*first, row, out, row);
          }
        }
        return;
      }
      case Fn::kSize: {
        const Column& a = *inputs[0];
        for (size_t row = 0; row < rows_; ++row) {
          out.valid[row] = a.valid[row];  // NULL for a NULL array (Spark's non-legacy size)
          out.i64[row] = a.valid[row] ? static_cast<int64_t>(a.arr_offsets[row + 1] -
                                                              a.arr_offsets[row])
                                      : 0;
        }
        return;
      }
    }
  }

  const RecordBatch& batch_;
  size_t rows_;
};

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

}  // namespace

// ---- Expression ---------------------------------------------------------------------------

Expression::Expression(std::unique_ptr<Node> root) : root_(std::move(root)) {}
Expression::Expression(Expression&&) noexcept = default;
Expression& Expression::operator=(Expression&&) noexcept = default;
Expression::~Expression() = default;

FieldType Expression::type() const { return *root_->type; }

namespace {
void CollectColumns(const Node& node, std::vector<int>& out) {
  if (node.op == Op::kColumn && node.column >= 0) out.push_back(node.column);
  for (const auto& arg : node.args) CollectColumns(*arg, out);
}
}  // namespace

std::vector<int> Expression::ColumnsRead() const {
  std::vector<int> columns;
  CollectColumns(*root_, columns);
  std::sort(columns.begin(), columns.end());
  columns.erase(std::unique(columns.begin(), columns.end()), columns.end());
  return columns;
}

int Expression::column_index() const { return root_->op == Op::kColumn ? root_->column : -1; }

const Column& Expression::Evaluate(const RecordBatch& batch) {
  Evaluator evaluator(batch);
  return evaluator.Eval(*root_);
}

ExprResult<Expression> Expression::Compile(std::string_view text, const Schema& columns) {
  std::unique_ptr<Parser> owner;
  Parser* parser = nullptr;
  auto root = ParseTree(text, parser, owner);
  if (!root) return tl::unexpected(root.error());
  if (!parser->AtEnd()) {
    if (IsKeyword(parser->Peek(), "AS")) {
      return tl::unexpected(ErrorAt(parser->Peek().offset, "AS names a column only in select"));
    }
    return tl::unexpected(parser->Unexpected("an operator or the end of the expression"));
  }
  auto checked = CheckTree(*root, columns);
  if (!checked) return tl::unexpected(checked.error());
  return Expression(std::move(*root));
}

ExprResult<SelectItem> CompileSelectItem(std::string_view text, const Schema& columns) {
  std::unique_ptr<Parser> owner;
  Parser* found = nullptr;
  auto root = ParseTree(text, found, owner);
  if (!root) return tl::unexpected(root.error());
  Parser& parser = *found;
  std::string alias;
  size_t alias_offset = 0;
  if (parser.Accept("AS")) {
    const Token& name = parser.Peek();
    if ((name.kind != Tok::kIdent || IsReserved(name)) && name.kind != Tok::kQuotedIdent) {
      return tl::unexpected(parser.Unexpected("a column name after AS"));
    }
    alias = name.text;
    alias_offset = name.offset;
    parser.Next();
  }
  if (!parser.AtEnd()) {
    return tl::unexpected(parser.Unexpected(alias.empty() ? "an operator, AS name or the end"
                                                          : "the end after the AS name"));
  }
  auto checked = CheckTree(*root, columns);
  if (!checked) return tl::unexpected(checked.error());
  return SelectItem{Expression(std::move(*root)), std::move(alias), alias_offset};
}

}  // namespace driftd::expr
