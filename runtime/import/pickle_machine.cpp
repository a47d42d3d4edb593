#include "pickle_machine.hpp"

#include <bit>
#include <cstring>
#include <unordered_map>

#include "byte_cursor.hpp"

namespace embedrt::import {

std::string_view kind_name(PickleValue::Kind kind) noexcept {
  using K = PickleValue::Kind;
  switch (kind) {
    case K::kNone: return "None";
    case K::kBool: return "bool";
    case K::kInt: return "int";
    case K::kBigInt: return "big int";
    case K::kFloat: return "float";
    case K::kString: return "str";
    case K::kBytes: return "bytes";
    case K::kTuple: return "tuple";
    case K::kList: return "list";
    case K::kDict: return "dict";
    case K::kGlobal: return "global";
    case K::kStorage: return "storage";
    case K::kTensor: return "tensor";
  }
  return "?";
}

PickleValue* PickleArena::make(PickleValue::Kind kind) {
  if (values_.size() >= max_values_) return nullptr;
  values_.emplace_back();
  values_.back().kind = kind;
  return &values_.back();
}

namespace {

using K = PickleValue::Kind;

constexpr std::size_t kMaxMarkDepth = 4096;
constexpr std::size_t kMaxStack = std::size_t{1} << 22;
constexpr std::size_t kMaxBigIntBytes = 64;
constexpr std::size_t kMaxGlobalName = 256;

class Machine {
 public:
  Machine(std::span<const std::byte> input, std::size_t position, PickleArena& arena, PickleHooks& hooks,
          const std::string& label)
      : cursor_(input, position), arena_(arena), hooks_(hooks), label_(label) {}

  Result<PickleValue*> run();
  std::size_t position() const { return cursor_.position(); }

 private:
  Error fail(const std::string& what) const {
    return Error(ErrorCode::kMalformed,
                 label_ + ": pickle offset " + std::to_string(opcode_offset_) + ": " + what);
  }
  Error truncated(const char* opcode) const { return fail(std::string(opcode) + " runs past the end of the input"); }

  Status push(PickleValue* v) {
    if (v == nullptr) return fail("more than " + std::to_string(arena_.size()) + " values (limit reached)");
    if (stack_.size() >= kMaxStack) return fail("stack deeper than " + std::to_string(kMaxStack));
    stack_.push_back(v);
    return {};
  }
  Result<PickleValue*> pop(const char* opcode) {
    if (stack_.size() <= frame_base()) return fail(std::string(opcode) + " with an empty stack (stack underflow)");
    PickleValue* v = stack_.back();
    stack_.pop_back();
    return v;
  }
  std::size_t frame_base() const { return marks_.empty() ? 0 : marks_.back(); }
  // Pops everything above the last MARK, and the MARK.
  Result<std::vector<PickleValue*>> pop_mark(const char* opcode) {
    if (marks_.empty()) return fail(std::string(opcode) + " without a MARK (mark mismatch)");
    const std::size_t base = marks_.back();
    marks_.pop_back();
    std::vector<PickleValue*> items(stack_.begin() + static_cast<std::ptrdiff_t>(base), stack_.end());
    stack_.resize(base);
    return items;
  }
  Result<PickleValue*> make_string(K kind, std::uint64_t length, const char* opcode) {
    std::string_view text;
    if (length > cursor_.remaining() || !cursor_.read_string(static_cast<std::size_t>(length), text)) {
      return fail(std::string(opcode) + " of " + std::to_string(length) + " bytes is longer than the " +
                  std::to_string(cursor_.remaining()) + " bytes left in the input");
    }
    PickleValue* v = arena_.make(kind);
    if (v == nullptr) return fail("too many values");
    v->text = std::string(text);
    return v;
  }
  PickleValue* make_int(std::int64_t value) {
    PickleValue* v = arena_.make(K::kInt);
    if (v) v->integer = value;
    return v;
  }
  Status memo_put(std::uint64_t index) {
    if (stack_.size() <= frame_base()) return fail("memo store with an empty stack (stack underflow)");
    if (index > kMaxStack * 4) return fail("memo index " + std::to_string(index) + " is oversized");
    memo_[index] = stack_.back();
    return {};
  }
  Status memo_get(std::uint64_t index) {
    const auto it = memo_.find(index);
    if (it == memo_.end()) return fail("memo slot " + std::to_string(index) + " is undefined");
    return push(it->second);
  }
  Status set_items(PickleValue* dict, const std::vector<PickleValue*>& pairs, const char* opcode) {
    if (dict->kind != K::kDict) {
      return fail(std::string(opcode) + " on a " + std::string(kind_name(dict->kind)) + ", not a dict");
    }
    if (pairs.size() % 2 != 0) return fail(std::string(opcode) + " with an odd number of items");
    for (std::size_t i = 0; i < pairs.size(); i += 2) dict->entries.emplace_back(pairs[i], pairs[i + 1]);
    return {};
  }
  Status do_global(std::string_view module, std::string_view name) {
    auto v = hooks_.find_global(arena_, module, name);
    if (!v) return fail(v.error().message());
    return push(*v);
  }

  ByteCursor cursor_;
  PickleArena& arena_;
  PickleHooks& hooks_;
  const std::string label_;
  std::vector<PickleValue*> stack_;
  std::vector<std::size_t> marks_;
  std::unordered_map<std::uint64_t, PickleValue*> memo_;
  std::size_t opcode_offset_ = 0;
};

#define EMBEDRT_TRY(expr)              \
  do {                                 \
    if (Status s_ = (expr); !s_) return std::move(s_).error(); \
  } while (0)

#define EMBEDRT_POP(var, opcode)          \
  auto var##_result = pop(opcode);        \
  if (!var##_result) return std::move(var##_result).error(); \
  PickleValue* var = *var##_result

Result<PickleValue*> Machine::run() {
  while (true) {
    opcode_offset_ = cursor_.position();
    std::uint8_t op = 0;
    if (!cursor_.read_le(op)) return fail("input ends before STOP");
    switch (op) {
      case 0x80: {  // PROTO
        std::uint8_t protocol = 0;
        if (!cursor_.read_le(protocol)) return truncated("PROTO");
        if (protocol < 2 || protocol > 5) return fail("pickle protocol " + std::to_string(protocol) + " is not supported (2 to 5)");
        break;
      }
      case 0x95: {  // FRAME: a length prefix only; the framed opcodes follow inline.
        std::uint64_t length = 0;
        if (!cursor_.read_le(length)) return truncated("FRAME");
        if (length > cursor_.remaining()) return fail("FRAME of " + std::to_string(length) + " bytes is longer than the input");
        break;
      }
      case '.': {  // STOP
        if (!marks_.empty()) return fail("STOP with " + std::to_string(marks_.size()) + " unclosed MARK(s)");
        if (stack_.size() != 1) return fail("STOP with " + std::to_string(stack_.size()) + " values on the stack, expected 1");
        return stack_.back();
      }
      case '(':  // MARK
        if (marks_.size() >= kMaxMarkDepth) return fail("MARKs nested deeper than " + std::to_string(kMaxMarkDepth));
        marks_.push_back(stack_.size());
        break;
      case '0': {  // POP
        EMBEDRT_POP(ignored, "POP");
        (void)ignored;
        break;
      }
      case '1': {  // POP_MARK
        auto items = pop_mark("POP_MARK");
        if (!items) return std::move(items).error();
        break;
      }
      case '2': {  // DUP
        if (stack_.size() <= frame_base()) return fail("DUP with an empty stack (stack underflow)");
        EMBEDRT_TRY(push(stack_.back()));
        break;
      }
      case 'N': EMBEDRT_TRY(push(arena_.make(K::kNone))); break;
      case 0x88:
      case 0x89: {  // NEWTRUE, NEWFALSE
        PickleValue* v = arena_.make(K::kBool);
        if (v) v->boolean = op == 0x88;
        EMBEDRT_TRY(push(v));
        break;
      }
      case 'J': {  // BININT
        std::int32_t v = 0;
        if (!cursor_.read_le(v)) return truncated("BININT");
        EMBEDRT_TRY(push(make_int(v)));
        break;
      }
      case 'K': {  // BININT1
        std::uint8_t v = 0;
        if (!cursor_.read_le(v)) return truncated("BININT1");
        EMBEDRT_TRY(push(make_int(v)));
        break;
      }
      case 'M': {  // BININT2
        std::uint16_t v = 0;
        if (!cursor_.read_le(v)) return truncated("BININT2");
        EMBEDRT_TRY(push(make_int(v)));
        break;
      }
      case 0x8a:
      case 0x8b: {  // LONG1, LONG4: little-endian two's complement of n bytes
        std::uint64_t n = 0;
        if (op == 0x8a) {
          std::uint8_t n8 = 0;
          if (!cursor_.read_le(n8)) return truncated("LONG1");
          n = n8;
        } else {
          std::int32_t n32 = 0;
          if (!cursor_.read_le(n32)) return truncated("LONG4");
          if (n32 < 0) return fail("LONG4 with negative length " + std::to_string(n32));
          n = static_cast<std::uint64_t>(n32);
        }
        if (n > kMaxBigIntBytes) return fail("integer of " + std::to_string(n) + " bytes is oversized");
        std::span<const std::byte> raw;
        if (!cursor_.read_bytes(static_cast<std::size_t>(n), raw)) return truncated("LONG");
        if (n <= 8) {
          std::uint64_t u = 0;
          std::memcpy(&u, raw.data(), n);
          if (n > 0 && n < 8 && (std::to_integer<unsigned>(raw[n - 1]) & 0x80)) u |= ~std::uint64_t{0} << (8 * n);
          EMBEDRT_TRY(push(make_int(static_cast<std::int64_t>(u))));
        } else {
          PickleValue* v = arena_.make(K::kBigInt);
          if (v) v->text.assign(reinterpret_cast<const char*>(raw.data()), raw.size());
          EMBEDRT_TRY(push(v));
        }
        break;
      }
      case 'G': {  // BINFLOAT, big-endian
        std::uint64_t bits = 0;
        if (!cursor_.read_le(bits)) return truncated("BINFLOAT");
        PickleValue* v = arena_.make(K::kFloat);
        if (v) v->real = std::bit_cast<double>(__builtin_bswap64(bits));
        EMBEDRT_TRY(push(v));
        break;
      }
      case 'X':
      case 'T':
      case 'B': {  // BINUNICODE, BINSTRING, BINBYTES: 4-byte length
        std::uint32_t n = 0;
        if (!cursor_.read_le(n)) return truncated("string length");
        auto v = make_string(op == 'B' ? K::kBytes : K::kString, n, op == 'B' ? "BINBYTES" : "BINUNICODE");
        if (!v) return std::move(v).error();
        EMBEDRT_TRY(push(*v));
        break;
      }
      case 0x8c:
      case 'U':
      case 'C': {  // SHORT_BINUNICODE, SHORT_BINSTRING, SHORT_BINBYTES: 1-byte length
        std::uint8_t n = 0;
        if (!cursor_.read_le(n)) return truncated("string length");
        auto v = make_string(op == 'C' ? K::kBytes : K::kString, n, op == 'C' ? "SHORT_BINBYTES" : "SHORT_BINUNICODE");
        if (!v) return std::move(v).error();
        EMBEDRT_TRY(push(*v));
        break;
      }
      case 0x8d:
      case 0x8e: {  // BINUNICODE8, BINBYTES8
        std::uint64_t n = 0;
        if (!cursor_.read_le(n)) return truncated("string length");
        auto v = make_string(op == 0x8e ? K::kBytes : K::kString, n, op == 0x8e ? "BINBYTES8" : "BINUNICODE8");
        if (!v) return std::move(v).error();
        EMBEDRT_TRY(push(*v));
        break;
      }
      case ')': EMBEDRT_TRY(push(arena_.make(K::kTuple))); break;
      case ']': EMBEDRT_TRY(push(arena_.make(K::kList))); break;
      case '}': EMBEDRT_TRY(push(arena_.make(K::kDict))); break;
      case 't':
      case 'l': {  // TUPLE, LIST
        auto items = pop_mark(op == 't' ? "TUPLE" : "LIST");
        if (!items) return std::move(items).error();
        PickleValue* v = arena_.make(op == 't' ? K::kTuple : K::kList);
        if (v) v->items = std::move(*items);
        EMBEDRT_TRY(push(v));
        break;
      }
      case 'd': {  // DICT
        auto items = pop_mark("DICT");
        if (!items) return std::move(items).error();
        PickleValue* v = arena_.make(K::kDict);
        if (v == nullptr) return fail("too many values");
        EMBEDRT_TRY(set_items(v, *items, "DICT"));
        EMBEDRT_TRY(push(v));
        break;
      }
      case 0x85:
      case 0x86:
      case 0x87: {  // TUPLE1..3
        const std::size_t n = static_cast<std::size_t>(op - 0x84);
        if (stack_.size() < frame_base() + n) return fail("TUPLE" + std::to_string(n) + " with too few values (stack underflow)");
        PickleValue* v = arena_.make(K::kTuple);
        if (v == nullptr) return fail("too many values");
        v->items.assign(stack_.end() - static_cast<std::ptrdiff_t>(n), stack_.end());
        stack_.resize(stack_.size() - n);
        EMBEDRT_TRY(push(v));
        break;
      }
      case 'a': {  // APPEND
        EMBEDRT_POP(item, "APPEND");
        EMBEDRT_POP(list, "APPEND");
        if (list->kind != K::kList) return fail("APPEND to a " + std::string(kind_name(list->kind)) + ", not a list");
        list->items.push_back(item);
        EMBEDRT_TRY(push(list));
        break;
      }
      case 'e': {  // APPENDS
        auto items = pop_mark("APPENDS");
        if (!items) return std::move(items).error();
        EMBEDRT_POP(list, "APPENDS");
        if (list->kind != K::kList) return fail("APPENDS to a " + std::string(kind_name(list->kind)) + ", not a list");
        list->items.insert(list->items.end(), items->begin(), items->end());
        EMBEDRT_TRY(push(list));
        break;
      }
      case 's': {  // SETITEM
        EMBEDRT_POP(value, "SETITEM");
        EMBEDRT_POP(key, "SETITEM");
        EMBEDRT_POP(dict, "SETITEM");
        EMBEDRT_TRY(set_items(dict, {key, value}, "SETITEM"));
        EMBEDRT_TRY(push(dict));
        break;
      }
      case 'u': {  // SETITEMS
        auto items = pop_mark("SETITEMS");
        if (!items) return std::move(items).error();
        EMBEDRT_POP(dict, "SETITEMS");
        EMBEDRT_TRY(set_items(dict, *items, "SETITEMS"));
        EMBEDRT_TRY(push(dict));
        break;
      }
      case 'c': {  // GLOBAL "module\nname\n"
        std::string_view module, name;
        if (!cursor_.read_line(kMaxGlobalName, module) || !cursor_.read_line(kMaxGlobalName, name)) {
          return fail("GLOBAL name is unterminated or longer than " + std::to_string(kMaxGlobalName) + " bytes");
        }
        EMBEDRT_TRY(do_global(module, name));
        break;
      }
      case 0x93: {  // STACK_GLOBAL
        EMBEDRT_POP(name, "STACK_GLOBAL");
        EMBEDRT_POP(module, "STACK_GLOBAL");
        if (module->kind != K::kString || name->kind != K::kString) return fail("STACK_GLOBAL needs two strings");
        EMBEDRT_TRY(do_global(module->text, name->text));
        break;
      }
      case 'R': {  // REDUCE
        EMBEDRT_POP(args, "REDUCE");
        EMBEDRT_POP(callable, "REDUCE");
        if (args->kind != K::kTuple) return fail("REDUCE with " + std::string(kind_name(args->kind)) + " arguments, expected a tuple");
        auto v = hooks_.reduce(arena_, callable, args);
        if (!v) return fail(v.error().message());
        EMBEDRT_TRY(push(*v));
        break;
      }
      case 'b': {  // BUILD
        EMBEDRT_POP(state, "BUILD");
        if (stack_.size() <= frame_base()) return fail("BUILD with an empty stack (stack underflow)");
        if (Status s = hooks_.build(stack_.back(), state); !s) return fail(s.error().message());
        break;
      }
      case 'Q': {  // BINPERSID
        EMBEDRT_POP(pid, "BINPERSID");
        auto v = hooks_.persistent_load(arena_, pid);
        if (!v) return fail(v.error().message());
        EMBEDRT_TRY(push(*v));
        break;
      }
      case 'q': {  // BINPUT
        std::uint8_t i = 0;
        if (!cursor_.read_le(i)) return truncated("BINPUT");
        EMBEDRT_TRY(memo_put(i));
        break;
      }
      case 'r': {  // LONG_BINPUT
        std::uint32_t i = 0;
        if (!cursor_.read_le(i)) return truncated("LONG_BINPUT");
        EMBEDRT_TRY(memo_put(i));
        break;
      }
      case 0x94: EMBEDRT_TRY(memo_put(memo_.size())); break;  // MEMOIZE
      case 'h': {  // BINGET
        std::uint8_t i = 0;
        if (!cursor_.read_le(i)) return truncated("BINGET");
        EMBEDRT_TRY(memo_get(i));
        break;
      }
      case 'j': {  // LONG_BINGET
        std::uint32_t i = 0;
        if (!cursor_.read_le(i)) return truncated("LONG_BINGET");
        EMBEDRT_TRY(memo_get(i));
        break;
      }
      case 'i': return fail("opcode INST (0x69) is refused: it instantiates arbitrary classes");
      case 'o': return fail("opcode OBJ (0x6f) is refused: it instantiates arbitrary classes");
      case 0x81: return fail("opcode NEWOBJ (0x81) is refused: it instantiates arbitrary classes");
      case 0x92: return fail("opcode NEWOBJ_EX (0x92) is refused: it instantiates arbitrary classes");
      default: {
        char hex[8];
        std::snprintf(hex, sizeof hex, "0x%02x", op);
        return fail(std::string("unknown or unsupported opcode ") + hex);
      }
    }
  }
}

#undef EMBEDRT_TRY
#undef EMBEDRT_POP

}  // namespace

Result<PickleValue*> unpickle(std::span<const std::byte> input, std::size_t& position, PickleArena& arena,
                              PickleHooks& hooks, const std::string& label) {
  Machine machine(input, position, arena, hooks, label);
  auto result = machine.run();
  if (result) position = machine.position();
  return result;
}

}  // namespace embedrt::import
