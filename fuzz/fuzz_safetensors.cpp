// libFuzzer target: SafetensorsFile::open on arbitrary bytes, then every accessor, then a write/re-open round
// trip of whatever opened. Beyond "no crash, no sanitizer report", it checks the reader's promises
// (include/qlinear/safetensors.hpp): every accepted tensor lies inside the data section, has exactly the
// bytes its dtype and shape need, overlaps no other, and survives write_safetensors unchanged.
//
// The reader has no in-memory entry point (it maps a path), so each input goes to a memfd and is opened as
// /proc/self/fd/N: no file is left behind whatever happens.
#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "qlinear/safetensors.hpp"

namespace {

[[noreturn]] void broken_promise(const char* what, const std::string& detail) {
  std::fprintf(stderr, "fuzz_safetensors: broken promise: %s: %s\n", what, detail.c_str());
  std::abort();
}

// A scratch directory for the round trip, made once per process (tmpfs when there is one) and removed at
// exit. Leaked on purpose: an atexit handler may run after static destructors.
void remove_scratch_dir();
const std::string& scratch_dir() {
  static const std::string* dir = [] {
    for (const char* base : {"/dev/shm", "/tmp"}) {
      std::string tmpl = std::string(base) + "/qlinear-fuzz-XXXXXX";
      if (::mkdtemp(tmpl.data()) != nullptr) {
        std::atexit(remove_scratch_dir);
        return new std::string(tmpl);
      }
    }
    return new std::string(".");
  }();
  return *dir;
}
void remove_scratch_dir() {
  if (scratch_dir() != ".") ::rmdir(scratch_dir().c_str());
}

void check_and_round_trip(const qlinear::SafetensorsFile& f) {
  using namespace qlinear;
  const uint64_t data_size = f.file_size() - f.data_offset();
  std::vector<std::pair<uint64_t, uint64_t>> ranges;
  std::vector<std::pair<std::string, Tensor>> tensors;
  uint32_t checksum = 0;
  for (const std::string& name : f.names()) {
    if (!f.has(name)) broken_promise("names() lists a tensor has() denies", name);
    auto e = f.entry(name);
    if (!e) broken_promise("entry() fails for a listed name", e.message());
    if (e->begin > e->end || e->end > data_size) broken_promise("range outside the data section", name);
    if (storage_bytes(e->dtype, [&] {
          int64_t n = 1;
          for (int64_t d : e->shape) n *= d;
          return n;
        }()) != static_cast<int64_t>(e->end - e->begin)) {
      broken_promise("byte range does not match dtype x shape", name);
    }
    if (e->end > e->begin) ranges.emplace_back(e->begin, e->end);
    auto t = f.tensor(name);
    if (!t) broken_promise("tensor() fails for a validated entry", t.message());
    // Touch every byte: ASan sees a read past the mapping or the aligned copy.
    const auto* p = static_cast<const uint8_t*>(t->raw());
    for (uint64_t i = 0; i < e->end - e->begin; ++i) checksum = checksum * 31 + p[i];
    tensors.emplace_back(name, *t);
  }
  std::sort(ranges.begin(), ranges.end());
  for (size_t i = 1; i < ranges.size(); ++i) {
    if (ranges[i].first < ranges[i - 1].second) broken_promise("overlapping ranges accepted", f.path());
  }
  if (Status s = f.verify_unchanged(); !s) broken_promise("verify_unchanged() on an unchanged file", s.message());
  for (const auto& [key, value] : f.metadata()) checksum += static_cast<uint32_t>(key.size() + value.size());
  (void)checksum;

  // Round trip: what the reader accepted, the writer writes and the reader reads back identically.
  const std::string path = scratch_dir() + "/roundtrip.safetensors";
  if (Status s = write_safetensors(path, tensors, f.metadata()); !s) {
    broken_promise("write_safetensors refuses what the reader accepted", s.message());
  }
  auto back = SafetensorsFile::open(path);
  ::unlink(path.c_str());  // the mapping keeps the bytes
  if (!back) broken_promise("the writer's file does not open", back.message());
  if (back->names() != f.names()) broken_promise("round trip changed the names", path);
  if (back->metadata() != f.metadata()) broken_promise("round trip changed the metadata", path);
  for (const auto& [name, t] : tensors) {
    auto a = f.entry(name);
    auto b = back->entry(name);
    if (!b || a->dtype != b->dtype || a->shape != b->shape || a->end - a->begin != b->end - b->begin) {
      broken_promise("round trip changed an entry", name);
    }
    auto tb = back->tensor(name);
    if (!tb || std::memcmp(t.raw(), tb->raw(), a->end - a->begin) != 0) {
      broken_promise("round trip changed the bytes", name);
    }
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const int fd = ::memfd_create("fuzz.safetensors", MFD_CLOEXEC);
  if (fd < 0) return 0;
  size_t done = 0;
  while (done < size) {
    const ssize_t n = ::write(fd, data + done, size - done);
    if (n <= 0) {
      ::close(fd);
      return 0;
    }
    done += static_cast<size_t>(n);
  }
  const std::string path = "/proc/self/fd/" + std::to_string(fd);
  auto file = qlinear::SafetensorsFile::open(path);
  if (file) {
    check_and_round_trip(*file);
  } else if (file.message().find(path) == std::string::npos) {
    broken_promise("an error that does not name the file", file.message());
  }
  ::close(fd);  // the mapping, if any, outlives the descriptor; `file` unmaps it when it goes
  return 0;
}
