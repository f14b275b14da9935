// ShardedSafetensorsWriter (src/checkpoint/sharded_writer.hpp): what it writes reads back byte for byte,
// through direct I/O (a disk file system) and through the page cache (tmpfs, where O_DIRECT is refused):
// shards smaller than the kept header blocks, tensors larger than a staging buffer and across buffer
// boundaries, odd-sized tensors held to a shard's end, a header reserve larger than one block.
#include <gtest/gtest.h>
#include <unistd.h>

#include <cstring>
#include <filesystem>
#include <random>

#include "checkpoint/sharded_writer.hpp"
#include "qlinear/safetensors.hpp"

namespace qlinear {
namespace {

namespace fs = std::filesystem;

struct Dir {
  explicit Dir(const fs::path& parent) {
    std::string tmpl = (parent / "qlinear-sharded-XXXXXX").string();
    ok = ::mkdtemp(tmpl.data()) != nullptr;
    path = tmpl;
  }
  ~Dir() {
    std::error_code ec;
    fs::remove_all(path, ec);
  }
  bool ok = false;
  std::string path;
};

Tensor random_bytes(DType d, Shape shape, std::mt19937_64& rng) {
  Tensor t = Tensor::empty(d, std::move(shape));
  auto* p = static_cast<uint8_t*>(t.raw());
  for (int64_t i = 0; i < t.nbytes(); ++i) p[i] = static_cast<uint8_t>(rng());
  return t;
}

void write_and_read_back(const std::string& dir, uint64_t max_shard, uint64_t header_reserve,
                         const std::vector<std::pair<std::string, Tensor>>& tensors) {
  detail::ShardedSafetensorsWriter w(dir, max_shard, header_reserve);
  for (const auto& t : tensors) ASSERT_TRUE(w.add({t})) << t.first;
  auto shards = w.close();
  ASSERT_TRUE(shards) << shards.message();
  size_t found = 0;
  for (const auto& shard : *shards) {
    EXPECT_EQ(fs::file_size(shard.staged_path), shard.bytes) << shard.staged_path;
    auto f = SafetensorsFile::open(shard.staged_path);
    ASSERT_TRUE(f) << f.message();
    for (const std::string& name : shard.tensors) {
      const auto it = std::find_if(tensors.begin(), tensors.end(), [&](const auto& t) { return t.first == name; });
      ASSERT_NE(it, tensors.end()) << name;
      auto back = f->tensor(name);
      ASSERT_TRUE(back) << back.message();
      ASSERT_EQ(back->shape(), it->second.shape()) << name;
      ASSERT_EQ(back->dtype(), it->second.dtype()) << name;
      EXPECT_EQ(std::memcmp(back->contiguous().raw(), it->second.raw(), static_cast<size_t>(it->second.nbytes())), 0)
          << name;
      ++found;
    }
  }
  EXPECT_EQ(found, tensors.size());
}

void run_cases(const fs::path& parent) {
  const uint64_t seed = std::random_device{}();
  SCOPED_TRACE("seed " + std::to_string(seed) + ", under " + parent.string());
  std::mt19937_64 rng(seed);
  {
    Dir d(parent);
    ASSERT_TRUE(d.ok);
    // One tiny tensor and an odd one: the whole shard is shorter than the header's kept blocks.
    write_and_read_back(d.path, 5'000'000'000, 256,
                        {{"a", random_bytes(DType::kF32, {3}, rng)}, {"b", random_bytes(DType::kU8, {7}, rng)}});
  }
  {
    Dir d(parent);
    ASSERT_TRUE(d.ok);
    // Tensors beyond one 32 MiB staging buffer, sizes off 4096, odd sizes held back; a 10 000-byte header.
    std::vector<std::pair<std::string, Tensor>> t;
    t.emplace_back("big", random_bytes(DType::kBF16, {5000, 7001}, rng));      // 70 MB
    t.emplace_back("odd", random_bytes(DType::kU8, {3, 333}, rng));
    t.emplace_back("mid", random_bytes(DType::kF32, {1021, 4099}, rng));       // 16.7 MB
    t.emplace_back("small", random_bytes(DType::kI8, {8, 8}, rng));
    write_and_read_back(d.path, 5'000'000'000, 10'000, t);
  }
  {
    Dir d(parent);
    ASSERT_TRUE(d.ok);
    // Several shards (each tensor past the limit starts a new one).
    std::vector<std::pair<std::string, Tensor>> t;
    for (int i = 0; i < 5; ++i) t.emplace_back(std::string(1, static_cast<char>('a' + i)), random_bytes(DType::kF16, {1000, 3001 + i}, rng));
    write_and_read_back(d.path, 10'000'000, 4096, t);
  }
}

TEST(ShardedWriter, ReadsBackThroughDirectIo) { run_cases(fs::temp_directory_path()); }

TEST(ShardedWriter, ReadsBackThroughThePageCache) {
  if (!fs::is_directory("/dev/shm")) GTEST_SKIP() << "no /dev/shm (tmpfs) here";
  run_cases("/dev/shm");
}

}  // namespace
}  // namespace qlinear
