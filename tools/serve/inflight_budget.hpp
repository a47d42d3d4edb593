// A global budget of bytes the server holds for requests in flight (bodies, parsed inputs,
// embeddings and response text). A request reserves what it will need before it allocates; past
// the budget it is refused with 503 instead of growing the process. This is what bounds the
// server's memory: peak RSS <= mapped table + budget + a fixed overhead per connection.
#pragma once

#include <atomic>
#include <cstdint>
#include <utility>

namespace embedrt::serve {

class InflightBudget;

// A reservation, returned to the budget when destroyed. Move-only.
class BudgetLease {
 public:
  BudgetLease() = default;
  BudgetLease(BudgetLease&& other) noexcept : budget_(std::exchange(other.budget_, nullptr)), bytes_(other.bytes_) {}
  BudgetLease& operator=(BudgetLease&& other) noexcept {
    if (this != &other) {
      release();
      budget_ = std::exchange(other.budget_, nullptr);
      bytes_ = other.bytes_;
    }
    return *this;
  }
  BudgetLease(const BudgetLease&) = delete;
  BudgetLease& operator=(const BudgetLease&) = delete;
  ~BudgetLease() { release(); }

  explicit operator bool() const noexcept { return budget_ != nullptr; }
  std::uint64_t bytes() const noexcept { return bytes_; }
  inline void release() noexcept;

 private:
  friend class InflightBudget;
  BudgetLease(InflightBudget* budget, std::uint64_t bytes) : budget_(budget), bytes_(bytes) {}
  InflightBudget* budget_ = nullptr;
  std::uint64_t bytes_ = 0;
};

class InflightBudget {
 public:
  explicit InflightBudget(std::uint64_t limit) : limit_(limit) {}

  // A lease of `bytes`, or an empty lease when the budget cannot hold them now.
  BudgetLease try_reserve(std::uint64_t bytes) noexcept {
    std::uint64_t used = used_.load(std::memory_order_relaxed);
    do {
      if (bytes > limit_ - used) return {};
    } while (!used_.compare_exchange_weak(used, used + bytes, std::memory_order_relaxed));
    return BudgetLease(this, bytes);
  }

  std::uint64_t limit() const noexcept { return limit_; }
  std::uint64_t in_use() const noexcept { return used_.load(std::memory_order_relaxed); }

 private:
  friend class BudgetLease;
  const std::uint64_t limit_;
  std::atomic<std::uint64_t> used_{0};
};

inline void BudgetLease::release() noexcept {
  if (budget_ != nullptr) budget_->used_.fetch_sub(bytes_, std::memory_order_relaxed);
  budget_ = nullptr;
}

}  // namespace embedrt::serve
