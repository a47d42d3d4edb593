// A progress bar on stderr, redrawn at most a few times a second; silent unless enabled (the
// convert command enables it when stderr is a terminal, or with --progress).
#pragma once

#include <chrono>
#include <cstdint>
#include <cstdio>
#include <string>

namespace embedrt::cli {

class ProgressBar {
 public:
  ProgressBar(bool enabled, std::string label) : enabled_(enabled), label_(std::move(label)) {}
  ~ProgressBar() { finish(); }

  void update(std::uint64_t done, std::uint64_t total) {
    if (!enabled_ || total == 0) return;
    const auto now = std::chrono::steady_clock::now();
    if (drawn_ && done < total && now - last_ < std::chrono::milliseconds(250)) return;
    last_ = now;
    drawn_ = true;
    const double fraction = static_cast<double>(done) / static_cast<double>(total);
    const int width = 30, filled = static_cast<int>(fraction * width);
    std::fprintf(stderr, "\r%s [%s%s] %3d%% %.1f/%.1f MB", label_.c_str(), std::string(static_cast<std::size_t>(filled), '#').c_str(),
                 std::string(static_cast<std::size_t>(width - filled), ' ').c_str(), static_cast<int>(fraction * 100),
                 static_cast<double>(done) / 1e6, static_cast<double>(total) / 1e6);
    std::fflush(stderr);
  }

  void finish() {
    if (enabled_ && drawn_) std::fputc('\n', stderr);
    drawn_ = false;
  }

 private:
  bool enabled_;
  bool drawn_ = false;
  std::string label_;
  std::chrono::steady_clock::time_point last_{};
};

}  // namespace embedrt::cli
