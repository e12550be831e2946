// A fresh directory per test program, removed at its end: for the tests that write files.
#pragma once

#include <filesystem>
#include <random>
#include <string>
#include <system_error>

namespace test_support {

struct temp_dir {
  std::filesystem::path dir;
  explicit temp_dir(const std::string& prefix) {
    std::random_device rd;
    dir = std::filesystem::temp_directory_path() / (prefix + std::to_string(rd()) + std::to_string(rd()));
    std::filesystem::create_directories(dir);
  }
  temp_dir(const temp_dir&) = delete;
  temp_dir& operator=(const temp_dir&) = delete;
  ~temp_dir() {
    std::error_code ec;
    std::filesystem::remove_all(dir, ec);
  }
  std::filesystem::path operator/(const std::string& name) const { return dir / name; }
};

}  // namespace test_support
