// The expression language's text: lexer and recursive-descent parser, and Expression, which
// checks the parsed tree (expr_check.cc) and evaluates it (expr_eval.cc). Operator precedence,
// loosest first (as Spark SQL):
//   OR; AND; NOT; comparison (= == != <> < <= > >=), IS [NOT] NULL, [NOT] IN, [NOT] BETWEEN;
//   + -; * / %; unary - +; postfix [index].
#include "engine/expr/expr_tree.h"

#include <algorithm>
#include <cctype>
#include <charconv>
#include <cstdint>
#include <cstdlib>
#include <utility>

#include <fmt/format.h>

namespace driftd::expr {

// ---- tokens -------------------------------------------------------------------------------

namespace {

enum class Tok { kEnd, kIdent, kQuotedIdent, kInteger, kDecimal, kString, kSymbol };

struct Token {
  Tok kind = Tok::kEnd;
  std::string text;  // identifier, string contents or symbol
  size_t offset = 0;
};

bool IsIdentStart(char c) { return std::isalpha(static_cast<unsigned char>(c)) || c == '_'; }
bool IsIdentChar(char c) { return std::isalnum(static_cast<unsigned char>(c)) || c == '_'; }

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

// ---- the parser ---------------------------------------------------------------------------

namespace {

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
