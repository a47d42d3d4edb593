// A pickle interpreter that executes nothing. It builds an inert tree of values; every GLOBAL,
// REDUCE, BUILD and persistent id is handed to a PickleHooks allow-list, which may refuse it.
// Opcodes that exist only to run code (INST, OBJ, NEWOBJ, NEWOBJ_EX) and the text-protocol
// opcodes are refused outright.
#pragma once

#include <cstdint>
#include <deque>
#include <span>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "embedrt/error.hpp"

namespace embedrt::import {

struct PickleValue {
  enum class Kind : std::uint8_t {
    kNone, kBool, kInt, kBigInt, kFloat, kString, kBytes, kTuple, kList, kDict,
    kGlobal,   // an allow-listed global, text = "module.name"
    kStorage,  // produced by the hooks' persistent_load; index into the hooks' storages
    kTensor,   // produced by the hooks' reduce; index into the hooks' tensors
  };
  Kind kind = Kind::kNone;
  bool boolean = false;
  std::int64_t integer = 0;
  double real = 0;
  std::string text;  // string, bytes, global name, or a big integer's little-endian bytes
  std::vector<PickleValue*> items;                            // tuple, list
  std::vector<std::pair<PickleValue*, PickleValue*>> entries;  // dict, in insertion order
  std::size_t index = 0;                                       // storage or tensor index
};

std::string_view kind_name(PickleValue::Kind kind) noexcept;

// Owns every value of one unpickling run; values are never freed individually, so trees that
// share nodes (memo) or even contain cycles cannot leak or double-free.
class PickleArena {
 public:
  explicit PickleArena(std::size_t max_values = std::size_t{1} << 24) : max_values_(max_values) {}
  PickleValue* make(PickleValue::Kind kind);  // nullptr when the limit is reached
  std::size_t size() const noexcept { return values_.size(); }

 private:
  std::deque<PickleValue> values_;
  std::size_t max_values_;
};

class PickleHooks {
 public:
  virtual ~PickleHooks() = default;
  virtual Result<PickleValue*> find_global(PickleArena& arena, std::string_view module, std::string_view name) = 0;
  virtual Result<PickleValue*> reduce(PickleArena& arena, PickleValue* callable, PickleValue* args) = 0;
  virtual Status build(PickleValue* object, PickleValue* state) = 0;
  virtual Result<PickleValue*> persistent_load(PickleArena& arena, PickleValue* pid) = 0;
};

// Runs one pickle from `position` to its STOP opcode and advances `position` past it.
// `label` names the input in messages ("model.pt: data.pkl").
Result<PickleValue*> unpickle(std::span<const std::byte> input, std::size_t& position, PickleArena& arena,
                              PickleHooks& hooks, const std::string& label);

}  // namespace embedrt::import
