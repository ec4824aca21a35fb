// The column-at-a-time evaluator: every node of a checked tree computes its whole column for the
// batch before its parent reads it, with NULLs, divisions by zero and failed CASTs as Spark's
// non-ANSI mode (expr.h states the semantics, expr_tree.h the tree).
#include "engine/expr/expr_tree.h"

#include <cctype>
#include <charconv>
#include <cmath>
#include <cstdint>
#include <iterator>
#include <optional>
#include <string>
#include <string_view>

#include <fmt/format.h>

#include "engine/time_iso8601.h"

namespace driftd::expr {

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

}  // namespace

const Column& Expression::Evaluate(const RecordBatch& batch) {
  Evaluator evaluator(batch);
  return evaluator.Eval(*root_);
}

}  // namespace driftd::expr
