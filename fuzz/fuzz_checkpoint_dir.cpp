// libFuzzer target: a checkpoint directory image, opened by Checkpoint::open (the index.json path of
// safetensors_index.cpp) and loaded end to end by load_checkpoint (config.json, quantization_config, layer
// grouping, fusion, shapes, scales). The input is split at each "\n\x01\n" into config.json, index.json
// (absent when empty) and up to 3 shard files a.safetensors, b.safetensors, c.safetensors, written into a
// scratch directory that is emptied before each input.
//
// Beyond "no crash, no sanitizer report, no hang": every error is a value with a message; an opened
// checkpoint's every listed tensor has a readable entry; a loaded model has at least one layer whose name is
// a tensor prefix of the checkpoint.
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>
#include <string_view>
#include <vector>

#include "qlinear/loader.hpp"
#include "qlinear/safetensors.hpp"

namespace {

[[noreturn]] void broken_promise(const char* what, const std::string& detail) {
  std::fprintf(stderr, "fuzz_checkpoint_dir: broken promise: %s: %s\n", what, detail.c_str());
  std::abort();
}

void remove_scratch_dir();
const std::string& scratch_dir() {
  static const std::string* dir = [] {
    for (const char* base : {"/dev/shm", "/tmp"}) {
      std::string tmpl = std::string(base) + "/qlinear-fuzz-dir-XXXXXX";
      if (::mkdtemp(tmpl.data()) != nullptr) {
        std::atexit(remove_scratch_dir);
        return new std::string(tmpl);
      }
    }
    std::abort();
  }();
  return *dir;
}
void remove_scratch_dir() {
  std::error_code ec;
  std::filesystem::remove_all(scratch_dir(), ec);
}

std::vector<std::string_view> sections(std::string_view in) {
  constexpr std::string_view kSep = "\n\x01\n";
  std::vector<std::string_view> out;
  while (out.size() < 4) {
    const size_t at = in.find(kSep);
    out.push_back(in.substr(0, at));
    if (at == std::string_view::npos) return out;
    in.remove_prefix(at + kSep.size());
  }
  out.push_back(in);
  return out;
}

void write_file(const std::string& path, std::string_view bytes) {
  std::ofstream f(path, std::ios::binary);
  f.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string& dir = scratch_dir();
  std::error_code ec;
  for (const auto& e : std::filesystem::directory_iterator(dir, ec)) std::filesystem::remove(e.path(), ec);
  const std::vector<std::string_view> parts = sections(std::string_view(reinterpret_cast<const char*>(data), size));
  write_file(dir + "/config.json", parts[0]);
  if (parts.size() > 1 && !parts[1].empty()) write_file(dir + "/model.safetensors.index.json", parts[1]);
  const char* shard_names[] = {"a.safetensors", "b.safetensors", "c.safetensors"};
  for (size_t i = 2; i < parts.size() && i < 5; ++i) write_file(dir + "/" + shard_names[i - 2], parts[i]);

  auto ckpt = qlinear::Checkpoint::open(dir);
  if (!ckpt) {
    if (ckpt.message().empty()) broken_promise("Checkpoint::open error without a message", "");
  } else {
    for (const std::string& name : ckpt->names()) {
      if (!ckpt->entry(name)) broken_promise("listed tensor without an entry", name);
      auto file = ckpt->file_of(name);
      if (!file) broken_promise("listed tensor without a file", name);
    }
  }
  auto model = qlinear::load_checkpoint(dir);
  if (!model) {
    if (model.message().empty()) broken_promise("load_checkpoint error without a message", "");
    return 0;
  }
  if (model->layers.empty()) broken_promise("a loaded model without layers", dir);
  return 0;
}
