#include "torch_checkpoint.hpp"

#include <cstring>
#include <map>
#include <set>
#include <optional>

#include "pickle_machine.hpp"
#include "zip_archive.hpp"

namespace embedrt::import {
namespace {

using K = PickleValue::Kind;

constexpr std::size_t kMaxNesting = 64;

struct StorageClass {
  const char* name;
  SourceDType dtype;
};
constexpr StorageClass kStorageClasses[] = {
    {"FloatStorage", SourceDType::kF32},  {"HalfStorage", SourceDType::kF16},
    {"BFloat16Storage", SourceDType::kBF16}, {"DoubleStorage", SourceDType::kF64},
    {"LongStorage", SourceDType::kI64},   {"IntStorage", SourceDType::kI32},
    {"ShortStorage", SourceDType::kI16},  {"CharStorage", SourceDType::kI8},
    {"ByteStorage", SourceDType::kU8},    {"BoolStorage", SourceDType::kBool},
    {"UntypedStorage", SourceDType::kU8},  // numel counts bytes
};

// The globals a state dict needs (shared/notes/checkpoint-formats.md); nothing else resolves.
constexpr const char* kAllowedGlobals[] = {
    "collections.OrderedDict",
    "torch._utils._rebuild_tensor_v2",
    "torch._utils._rebuild_parameter",
    "torch._utils._rebuild_parameter_with_state",
    "torch._tensor._rebuild_from_type_v2",
    "torch.nn.parameter.Parameter",
    "torch.Tensor",
};

struct StorageRef {
  std::string key;
  SourceDType dtype;
  std::uint64_t numel;                 // elements of dtype (bytes for UntypedStorage)
  std::uint64_t view_offset = 0;       // legacy storage views: element offset into the root
  std::span<const std::byte> bytes;    // resolved by the loader
};

struct TensorRef {
  std::size_t storage;
  std::int64_t offset;
  std::vector<std::int64_t> shape, strides;
};

// The allow-list: turns the few calls a state dict makes into inert storage and tensor nodes.
class TorchHooks final : public PickleHooks {
 public:
  explicit TorchHooks(bool legacy) : legacy_(legacy) {}

  std::vector<StorageRef> storages;
  std::vector<TensorRef> tensors;

  Result<PickleValue*> find_global(PickleArena& arena, std::string_view module, std::string_view name) override {
    const std::string full = std::string(module) + "." + std::string(name);
    bool allowed = false;
    for (const char* g : kAllowedGlobals) allowed = allowed || full == g;
    if (module == "torch") {
      for (const StorageClass& c : kStorageClasses) allowed = allowed || name == c.name;
    }
    if (!allowed) {
      return Error(ErrorCode::kMalformed, "global '" + full + "' is not on the allow-list (refused: a pickle may only "
                                          "name the functions a state dict needs)");
    }
    PickleValue* v = arena.make(K::kGlobal);
    if (v == nullptr) return Error(ErrorCode::kMalformed, "too many values");
    v->text = full;
    return v;
  }

  Result<PickleValue*> reduce(PickleArena& arena, PickleValue* callable, PickleValue* args) override {
    if (callable->kind != K::kGlobal) {
      return Error(ErrorCode::kMalformed, "REDUCE on a " + std::string(kind_name(callable->kind)) + ", not a global");
    }
    const std::string& f = callable->text;
    const auto& a = args->items;
    if (f == "collections.OrderedDict") {
      PickleValue* dict = arena.make(K::kDict);
      if (dict == nullptr) return Error(ErrorCode::kMalformed, "too many values");
      if (!a.empty()) return Error(ErrorCode::kMalformed, "OrderedDict called with arguments");
      return dict;
    }
    if (f == "torch._utils._rebuild_tensor_v2") return rebuild_tensor(arena, a);
    if (f == "torch._utils._rebuild_parameter" || f == "torch._utils._rebuild_parameter_with_state") {
      if (a.size() < 3 || a.size() > 4 || a[0]->kind != K::kTensor) {
        return Error(ErrorCode::kMalformed, f + " expects (tensor, requires_grad, hooks[, state])");
      }
      return a[0];
    }
    if (f == "torch._tensor._rebuild_from_type_v2") {
      // (func, type, args, state): rebuild with func(*args); the subclass type is not needed.
      if (a.size() != 4 || a[0]->kind != K::kGlobal || a[1]->kind != K::kGlobal || a[2]->kind != K::kTuple) {
        return Error(ErrorCode::kMalformed, "_rebuild_from_type_v2 expects (func, type, args, state)");
      }
      if (a[0]->text == "torch._tensor._rebuild_from_type_v2") {
        return Error(ErrorCode::kMalformed, "_rebuild_from_type_v2 calling itself is refused");
      }
      return reduce(arena, a[0], a[2]);
    }
    return Error(ErrorCode::kMalformed, "calling '" + f + "' is refused (only tensor rebuilds and OrderedDict are allowed)");
  }

  Status build(PickleValue* object, PickleValue* state) override {
    // state_dict() OrderedDicts carry a _metadata attribute (version numbers); tensors may carry
    // an empty state. Neither affects the weights.
    if (object->kind == K::kDict || object->kind == K::kTensor) return {};
    return Error(ErrorCode::kMalformed, "BUILD on a " + std::string(kind_name(object->kind)) + " (with " +
                                            std::string(kind_name(state->kind)) + " state) is refused");
  }

  Result<PickleValue*> persistent_load(PickleArena& arena, PickleValue* pid) override {
    const auto& t = pid->items;
    const std::size_t arity = legacy_ ? 6 : 5;
    if (pid->kind != K::kTuple || t.size() != arity || t[0]->kind != K::kString || t[0]->text != "storage" ||
        t[1]->kind != K::kGlobal || t[2]->kind != K::kString || t[3]->kind != K::kString || t[4]->kind != K::kInt) {
      return Error(ErrorCode::kMalformed, "persistent id is not ('storage', StorageClass, key, location, numel" +
                                              std::string(legacy_ ? ", view)" : ")"));
    }
    std::optional<SourceDType> dtype;
    for (const StorageClass& c : kStorageClasses) {
      if (t[1]->text == std::string("torch.") + c.name) dtype = c.dtype;
    }
    if (!dtype) return Error(ErrorCode::kMalformed, "persistent id names '" + t[1]->text + "', not a storage class");
    if (t[4]->integer < 0) {
      return Error(ErrorCode::kMalformed, "storage '" + t[2]->text + "' has negative numel " + std::to_string(t[4]->integer));
    }
    StorageRef ref{t[2]->text, *dtype, static_cast<std::uint64_t>(t[4]->integer)};
    if (legacy_ && t[5]->kind != K::kNone) {
      // Legacy storage views: (view_key, offset, size) inside the root storage `key`.
      const auto& v = t[5]->items;
      if (t[5]->kind != K::kTuple || v.size() != 3 || v[0]->kind != K::kString || v[1]->kind != K::kInt ||
          v[2]->kind != K::kInt || v[1]->integer < 0 || v[2]->integer < 0) {
        return Error(ErrorCode::kMalformed, "storage '" + ref.key + "' has a malformed view");
      }
      ref.view_offset = static_cast<std::uint64_t>(v[1]->integer);
      ref.numel = static_cast<std::uint64_t>(v[2]->integer);  // the data lives in the root `key`
    }
    PickleValue* node = arena.make(K::kStorage);
    if (node == nullptr) return Error(ErrorCode::kMalformed, "too many values");
    // Tied weights share one storage: one StorageRef per (key, view offset).
    const std::string id = ref.key + "@" + std::to_string(ref.view_offset) + ":" + std::to_string(ref.numel);
    const auto found = index_.find(id);
    if (found != index_.end()) {
      if (storages[found->second].dtype != ref.dtype) {
        return Error(ErrorCode::kMalformed, "storage '" + ref.key + "' is referenced with two dtypes");
      }
      node->index = found->second;
    } else {
      node->index = storages.size();
      index_[id] = storages.size();
      storages.push_back(std::move(ref));
    }
    return node;
  }

 private:
  Result<PickleValue*> rebuild_tensor(PickleArena& arena, const std::vector<PickleValue*>& a) {
    // (storage, storage_offset, size, stride, requires_grad, backward_hooks[, metadata])
    if (a.size() < 6 || a.size() > 7 || a[0]->kind != K::kStorage || a[1]->kind != K::kInt ||
        a[2]->kind != K::kTuple || a[3]->kind != K::kTuple || a[4]->kind != K::kBool) {
      return Error(ErrorCode::kMalformed,
                   "_rebuild_tensor_v2 expects (storage, offset, size tuple, stride tuple, requires_grad, hooks)");
    }
    TensorRef ref{a[0]->index, a[1]->integer, {}, {}};
    for (int which = 0; which < 2; ++which) {
      for (PickleValue* d : a[2 + which]->items) {
        if (d->kind != K::kInt) return Error(ErrorCode::kMalformed, "tensor size or stride is a " + std::string(kind_name(d->kind)));
        (which == 0 ? ref.shape : ref.strides).push_back(d->integer);
      }
    }
    PickleValue* node = arena.make(K::kTensor);
    if (node == nullptr) return Error(ErrorCode::kMalformed, "too many values");
    node->index = tensors.size();
    tensors.push_back(std::move(ref));
    return node;
  }

  bool legacy_;
  std::map<std::string, std::size_t> index_;
};

// Names every tensor reachable through dicts by its dotted key path.
class Flattener {
 public:
  // The label is copied: callers build it on the fly ("'" + path + "'").
  Flattener(const TorchHooks& hooks, std::string label) : hooks_(hooks), label_(std::move(label)) {}
  std::vector<SourceTensor> tensors;

  Status walk(const PickleValue* v, const std::string& prefix, std::size_t depth) {
    if (depth > kMaxNesting) {
      return Error(ErrorCode::kMalformed, label_ + ": nesting deeper than " + std::to_string(kMaxNesting) +
                                              " levels under '" + prefix + "' (or a cycle)");
    }
    if (v->kind == K::kTensor) return add(hooks_.tensors[v->index], prefix);
    if (v->kind != K::kDict) return {};  // numbers, strings, lists (optimizer state) carry no tables
    for (const auto& [key, value] : v->entries) {
      std::string name;
      if (key->kind == K::kString) {
        name = key->text;
      } else if (key->kind == K::kInt) {
        name = std::to_string(key->integer);
      } else {
        continue;
      }
      if (Status s = walk(value, prefix.empty() ? name : prefix + "." + name, depth + 1); !s) return s;
    }
    return {};
  }

 private:
  Status add(const TensorRef& ref, const std::string& name) {
    const StorageRef& storage = hooks_.storages[ref.storage];
    SourceTensor t;
    t.name = name;
    t.dtype = storage.dtype;
    t.shape = ref.shape;
    t.strides = ref.strides;
    t.storage_offset = ref.offset;
    t.storage = storage.bytes;
    t.origin = label_ + " (storage '" + storage.key + "')";
    if (Status s = validate_view(t); !s) return s;
    if (!names_.insert(name).second) return Error(ErrorCode::kMalformed, label_ + ": two tensors named '" + name + "'");
    tensors.push_back(std::move(t));
    return {};
  }

  const TorchHooks& hooks_;
  const std::string label_;
  std::set<std::string> names_;
};

Status check_record_size(const StorageRef& s, std::uint64_t record_bytes, const std::string& where) {
  std::uint64_t expected = 0;
  if (__builtin_mul_overflow(s.numel, source_dtype_size(s.dtype), &expected)) {
    return Error(ErrorCode::kMalformed, where + ": storage '" + s.key + "' numel " + std::to_string(s.numel) +
                                            " x element size overflows");
  }
  if (record_bytes != expected) {
    return Error(ErrorCode::kMalformed, where + ": storage '" + s.key + "' declares " + std::to_string(s.numel) +
                                            " elements of " + std::string(source_dtype_name(s.dtype)) + " (" +
                                            std::to_string(expected) + " bytes) but its record holds " +
                                            std::to_string(record_bytes) + " bytes");
  }
  return {};
}

}  // namespace

Result<std::vector<SourceTensor>> load_torch_zip(std::span<const std::byte> file, const std::string& label,
                                                 const TorchLoadOptions& options) {
  auto archive = ZipArchive::open(file, label, {.check_crc = options.check_crc});
  if (!archive) return std::move(archive).error();
  // Every entry sits under one top folder; data.pkl is the pickle.
  const auto& entries = archive->entries();
  if (entries.empty()) return Error(ErrorCode::kMalformed, "'" + label + "': empty zip archive");
  const std::string top = entries[0].name.substr(0, entries[0].name.find('/') + 1);
  for (const ZipEntry& e : entries) {
    if (top.empty() || e.name.rfind(top, 0) != 0) {
      return Error(ErrorCode::kMalformed, "'" + label + "': entry '" + e.name + "' is outside the archive's top folder '" + top + "'");
    }
    const std::string rest = e.name.substr(top.size());
    if (rest == "constants.pkl" || rest.rfind("code/", 0) == 0) {
      return Error(ErrorCode::kUnsupported, "'" + label + "' is a TorchScript archive; save and convert model.state_dict() instead");
    }
  }
  const ZipEntry* pickle = archive->find(top + "data.pkl");
  if (pickle == nullptr) return Error(ErrorCode::kMalformed, "'" + label + "': missing record '" + top + "data.pkl'");
  if (const ZipEntry* order = archive->find(top + "byteorder")) {
    const std::string_view text(reinterpret_cast<const char*>(order->data.data()), order->data.size());
    if (text != "little") {
      return Error(ErrorCode::kUnsupported, "'" + label + "': byteorder is '" + std::string(text) + "'; only little-endian checkpoints are supported");
    }
  }

  const std::string record_prefix = top + "data/";
  return load_state_dict_pickle(pickle->data, "'" + label + "': " + pickle->name,
                                [&](const std::string& key) -> std::optional<std::span<const std::byte>> {
                                  const ZipEntry* entry = archive->find(record_prefix + key);
                                  if (entry == nullptr) return std::nullopt;
                                  return entry->data;
                                });
}

Result<std::vector<SourceTensor>> load_state_dict_pickle(std::span<const std::byte> pickle, const std::string& label,
                                                         const StorageLookup& record) {
  TorchHooks hooks(/*legacy=*/false);
  PickleArena arena;
  std::size_t position = 0;
  auto root = unpickle(pickle, position, arena, hooks, label);
  if (!root) return std::move(root).error();
  if (position != pickle.size()) {
    return Error(ErrorCode::kMalformed, label + ": " + std::to_string(pickle.size() - position) + " trailing bytes after STOP");
  }
  for (StorageRef& s : hooks.storages) {
    const auto bytes = record(s.key);
    if (!bytes) return Error(ErrorCode::kMalformed, label + ": missing record 'data/" + s.key + "'");
    if (Status st = check_record_size(s, bytes->size(), label); !st) return std::move(st).error();
    s.bytes = *bytes;
  }
  Flattener flattener(hooks, label);
  if (Status s = flattener.walk(*root, "", 0); !s) return std::move(s).error();
  return std::move(flattener.tensors);
}

bool looks_like_torch_legacy(std::span<const std::byte> file) noexcept {
  // PROTO 2, LONG1 of 10 bytes: the magic number 0x1950a86a20f9469cfc6c.
  static constexpr unsigned char kStart[] = {0x80, 0x02, 0x8a, 0x0a, 0x6c, 0xfc, 0x9c, 0x46, 0xf9, 0x20, 0x6a, 0xa8, 0x50, 0x19};
  return file.size() >= sizeof kStart && std::memcmp(file.data(), kStart, sizeof kStart) == 0;
}

Result<std::vector<SourceTensor>> load_torch_legacy(std::span<const std::byte> file, const std::string& label) {
  // Five pickles (magic number, protocol version, system info, the object, the storage keys),
  // then each storage as a little-endian int64 element count and its raw bytes.
  if (!looks_like_torch_legacy(file)) {
    return Error(ErrorCode::kMalformed, "'" + label + "': not a legacy torch file (magic number missing)");
  }
  TorchHooks hooks(/*legacy=*/true);
  PickleArena arena;
  std::size_t position = 0;
  PickleValue* values[5] = {};
  const char* names[5] = {"magic number", "protocol version", "system info", "object", "storage keys"};
  for (int i = 0; i < 5; ++i) {
    auto v = unpickle(file, position, arena, hooks, "'" + label + "': legacy " + names[i] + " pickle");
    if (!v) return std::move(v).error();
    values[i] = *v;
  }
  if (values[1]->kind != K::kInt || values[1]->integer != 1001) {
    return Error(ErrorCode::kUnsupported, "'" + label + "': legacy protocol version is not 1001");
  }
  if (values[2]->kind == K::kDict) {
    for (const auto& [k, v] : values[2]->entries) {
      if (k->kind == K::kString && k->text == "little_endian" && v->kind == K::kBool && !v->boolean) {
        return Error(ErrorCode::kUnsupported, "'" + label + "': big-endian legacy checkpoints are not supported");
      }
    }
  }
  if (values[4]->kind != K::kList) return Error(ErrorCode::kMalformed, "'" + label + "': legacy storage key list is not a list");

  // Storage data follows in the order of the key list.
  std::map<std::string, std::span<const std::byte>> data;
  std::map<std::string, SourceDType> dtype_of;
  for (const StorageRef& s : hooks.storages) dtype_of.emplace(s.key, s.dtype);
  for (const PickleValue* key : values[4]->items) {
    if (key->kind != K::kString) return Error(ErrorCode::kMalformed, "'" + label + "': a legacy storage key is not a string");
    const auto dtype = dtype_of.find(key->text);
    if (dtype == dtype_of.end()) {
      return Error(ErrorCode::kMalformed, "'" + label + "': storage '" + key->text + "' is listed but never used");
    }
    std::uint64_t numel = 0;
    if (file.size() - position < 8) return Error(ErrorCode::kMalformed, "'" + label + "': storage '" + key->text + "' is truncated at offset " + std::to_string(position));
    std::memcpy(&numel, file.data() + position, 8);
    position += 8;
    std::uint64_t bytes = 0;
    if (__builtin_mul_overflow(numel, source_dtype_size(dtype->second), &bytes) || bytes > file.size() - position) {
      return Error(ErrorCode::kMalformed, "'" + label + "': storage '" + key->text + "' of " + std::to_string(numel) +
                                              " elements at offset " + std::to_string(position) + " runs past the end of the file");
    }
    if (!data.emplace(key->text, file.subspan(position, bytes)).second) {
      return Error(ErrorCode::kMalformed, "'" + label + "': storage '" + key->text + "' is listed twice");
    }
    position += bytes;
  }
  if (position != file.size()) {
    return Error(ErrorCode::kMalformed, "'" + label + "': " + std::to_string(file.size() - position) + " trailing bytes after the last storage");
  }
  for (StorageRef& s : hooks.storages) {
    const auto found = data.find(s.key);
    if (found == data.end()) return Error(ErrorCode::kMalformed, "'" + label + "': missing storage '" + s.key + "'");
    const std::size_t element = source_dtype_size(s.dtype);
    const std::uint64_t root_numel = found->second.size() / element;
    if (s.view_offset > root_numel || s.numel > root_numel - s.view_offset) {
      return Error(ErrorCode::kMalformed, "'" + label + "': storage view of '" + s.key + "' reaches past its root");
    }
    if (s.view_offset == 0 && s.numel != root_numel) {
      if (Status st = check_record_size(s, found->second.size(), "'" + label + "'"); !st) return std::move(st).error();
    }
    s.bytes = found->second.subspan(s.view_offset * element, s.numel * element);
  }
  Flattener flattener(hooks, "'" + label + "'");
  if (Status s = flattener.walk(values[3], "", 0); !s) return std::move(s).error();
  return std::move(flattener.tensors);
}

}  // namespace embedrt::import
