// safetensors reader, writer and multi-file checkpoint: round trips of every dtype, files written by the
// official Python package (tests/data/safetensors, from tools/gen_safetensors_fixtures.py), and bad inputs,
// each of which must come back as an error naming what is wrong.
#include <gtest/gtest.h>
#include <stdlib.h>
#include <unistd.h>

#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "qlinear/formats.hpp"
#include "qlinear/safetensors.hpp"
#include "qlinear/tensor.hpp"

namespace qlinear {
namespace {

namespace fs = std::filesystem;

// A fresh directory, removed with everything in it at the end of the test.
class TempDir {
 public:
  TempDir() {
    std::string tmpl = (fs::temp_directory_path() / "qlinear_st_XXXXXX").string();
    path_ = ::mkdtemp(tmpl.data());
  }
  ~TempDir() {
    std::error_code ec;
    fs::remove_all(path_, ec);
  }
  std::string operator/(const std::string& name) const { return (path_ / name).string(); }
  const fs::path& path() const { return path_; }

 private:
  fs::path path_;
};

void write_bytes(const std::string& path, const std::string& bytes) {
  std::ofstream(path, std::ios::binary).write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
}

std::string le64(uint64_t v) {
  std::string s(8, '\0');
  for (int i = 0; i < 8; ++i) s[i] = static_cast<char>(v >> (8 * i));
  return s;
}

// A safetensors file from a header text and `data_size` data bytes (i & 0xFF).
std::string raw_file(const std::string& header, size_t data_size) {
  std::string data(data_size, '\0');
  for (size_t i = 0; i < data_size; ++i) data[i] = static_cast<char>(i);
  return le64(header.size()) + header + data;
}

// The fixture generator's bit patterns: ((i * 0x9E3779B97F4A7C15 + seed) mod 2^64) >> (64 - bits).
std::vector<uint8_t> pattern_bytes(int bits, int64_t count, uint64_t seed) {
  std::vector<uint8_t> out;
  for (int64_t i = 0; i < count; ++i) {
    const uint64_t v = (static_cast<uint64_t>(i) * 0x9E3779B97F4A7C15ull + seed) >> (64 - bits);
    for (int b = 0; b < bits / 8; ++b) out.push_back(static_cast<uint8_t>(v >> (8 * b)));
  }
  return out;
}

std::vector<uint8_t> bytes_of(const Tensor& t) {
  const auto* p = static_cast<const uint8_t*>(t.raw());
  return std::vector<uint8_t>(p, p + t.nbytes());
}

// Opens `content` as a safetensors file and expects an error containing `expected` and the file's path.
void expect_open_error(const std::string& content, const std::string& expected) {
  TempDir dir;
  const std::string path = dir / "bad.safetensors";
  write_bytes(path, content);
  const auto f = SafetensorsFile::open(path);
  ASSERT_FALSE(f.is_ok()) << "opened a bad file; expected an error containing: " << expected;
  EXPECT_NE(f.message().find(expected), std::string::npos) << "message: " << f.message();
  EXPECT_NE(f.message().find(path), std::string::npos) << "message does not name the file: " << f.message();
}

std::string one_tensor(const std::string& entry) { return "{\"w\": " + entry + "}"; }

// ---- Bad single files ---------------------------------------------------------------------------------------

TEST(SafetensorsBadInput, EmptyFile) { expect_open_error("", "0 bytes, shorter than the 8-byte header length"); }

TEST(SafetensorsBadInput, TruncatedLength) {
  expect_open_error(std::string("\x10\0\0\0\0", 5), "5 bytes, shorter than the 8-byte header length");
}

TEST(SafetensorsBadInput, HeaderLengthPastEndOfFile) {
  expect_open_error(le64(1000) + "{}" + std::string(10, ' '), "header length 1000 runs past the end of the file");
}

TEST(SafetensorsBadInput, HeaderLengthAboveCap) {
  expect_open_error(le64(uint64_t{1} << 40) + "{}", "above the 100000000-byte limit");
}

TEST(SafetensorsBadInput, HeaderLengthZero) { expect_open_error(le64(0), "invalid JSON"); }

TEST(SafetensorsBadInput, InvalidJson) { expect_open_error(raw_file("{\"w\": {\"dtype\": ", 0), "invalid JSON"); }

TEST(SafetensorsBadInput, TrailingGarbageAfterJson) { expect_open_error(raw_file("{} x", 0), "invalid JSON"); }

TEST(SafetensorsBadInput, InvalidUtf8) { expect_open_error(raw_file("{\"w\xff\": 1}", 0), "invalid JSON"); }

TEST(SafetensorsBadInput, HeaderNotAnObject) {
  expect_open_error(raw_file("[1, 2]", 0), "header is not a JSON object (got array)");
}

TEST(SafetensorsBadInput, EntryNotAnObject) {
  expect_open_error(raw_file(one_tensor("3"), 0), "tensor 'w': entry is not an object (got number)");
}

TEST(SafetensorsBadInput, MissingDtype) {
  expect_open_error(raw_file(one_tensor(R"({"shape": [1], "data_offsets": [0, 1]})"), 1), "tensor 'w': missing 'dtype'");
}

TEST(SafetensorsBadInput, MissingShape) {
  expect_open_error(raw_file(one_tensor(R"({"dtype": "U8", "data_offsets": [0, 1]})"), 1), "tensor 'w': missing 'shape'");
}

TEST(SafetensorsBadInput, MissingDataOffsets) {
  expect_open_error(raw_file(one_tensor(R"({"dtype": "U8", "shape": [1]})"), 1), "tensor 'w': missing 'data_offsets'");
}

TEST(SafetensorsBadInput, DtypeNotAString) {
  expect_open_error(raw_file(one_tensor(R"({"dtype": 8, "shape": [1], "data_offsets": [0, 1]})"), 1),
                    "tensor 'w': 'dtype' is not a string");
}

TEST(SafetensorsBadInput, UnknownDtype) {
  expect_open_error(raw_file(one_tensor(R"({"dtype": "F7", "shape": [1], "data_offsets": [0, 1]})"), 1),
                    "tensor 'w': unknown dtype 'F7' (supported: ");
}

TEST(SafetensorsBadInput, UnsupportedSafetensorsDtype) {
  expect_open_error(raw_file(one_tensor(R"({"dtype": "BOOL", "shape": [1], "data_offsets": [0, 1]})"), 1),
                    "unknown dtype 'BOOL'");
}

TEST(SafetensorsBadInput, QlinearNameIsNotASafetensorsDtype) {
  // dtype_from_name also accepts qlinear's own names; a header must use the safetensors spelling.
  expect_open_error(raw_file(one_tensor(R"({"dtype": "f32", "shape": [1], "data_offsets": [0, 4]})"), 4),
                    "unknown dtype 'f32'");
}

TEST(SafetensorsBadInput, NegativeShape) {
  expect_open_error(raw_file(one_tensor(R"({"dtype": "U8", "shape": [2, -2], "data_offsets": [0, 4]})"), 4),
                    "tensor 'w': shape[1] = -2 is not a non-negative integer");
}

TEST(SafetensorsBadInput, FractionalShape) {
  expect_open_error(raw_file(one_tensor(R"({"dtype": "U8", "shape": [2.5], "data_offsets": [0, 2]})"), 2),
                    "shape[0] = 2.5 is not a non-negative integer");
}

TEST(SafetensorsBadInput, ShapeNotAnArray) {
  expect_open_error(raw_file(one_tensor(R"({"dtype": "U8", "shape": 4, "data_offsets": [0, 4]})"), 4),
                    "'shape' is not an array");
}

TEST(SafetensorsBadInput, ShapeDoesNotMatchByteRange) {
  expect_open_error(raw_file(one_tensor(R"({"dtype": "BF16", "shape": [2, 2], "data_offsets": [0, 6]})"), 8),
                    "tensor 'w': shape BF16 [2, 2] needs 8 bytes but data_offsets [0, 6] hold 6");
}

TEST(SafetensorsBadInput, ShapeProductOverflows) {
  const std::string big = std::to_string(uint64_t{1} << 62);
  expect_open_error(
      raw_file(one_tensor(R"({"dtype": "F32", "shape": [)" + big + ", " + big + R"(], "data_offsets": [0, 4]})"), 4),
      "needs more bytes than the whole data section");
}

TEST(SafetensorsBadInput, OffsetsEndBeforeBegin) {
  expect_open_error(raw_file(one_tensor(R"({"dtype": "U8", "shape": [0], "data_offsets": [4, 2]})"), 8),
                    "data_offsets [4, 2]: end is before begin");
}

TEST(SafetensorsBadInput, OffsetsPastDataSection) {
  expect_open_error(raw_file(one_tensor(R"({"dtype": "U8", "shape": [8], "data_offsets": [4, 12]})"), 8),
                    "data_offsets [4, 12] run past the end of the data section (8 bytes)");
}

TEST(SafetensorsBadInput, OffsetsNotTwoIntegers) {
  expect_open_error(raw_file(one_tensor(R"({"dtype": "U8", "shape": [1], "data_offsets": [0, 1, 2]})"), 2),
                    "'data_offsets' must be two non-negative integers");
  expect_open_error(raw_file(one_tensor(R"({"dtype": "U8", "shape": [1], "data_offsets": [-1, 0]})"), 2),
                    "'data_offsets' must be two non-negative integers");
}

TEST(SafetensorsBadInput, OverlappingRanges) {
  expect_open_error(raw_file(R"({"a": {"dtype": "U8", "shape": [8], "data_offsets": [0, 8]},
                                 "b": {"dtype": "U8", "shape": [4], "data_offsets": [6, 10]}})",
                             10),
                    "byte ranges of tensors 'a' [0, 8) and 'b' [6, 10) overlap");
}

TEST(SafetensorsBadInput, SameRangeTwice) {
  expect_open_error(raw_file(R"({"a": {"dtype": "U8", "shape": [4], "data_offsets": [0, 4]},
                                 "b": {"dtype": "U8", "shape": [4], "data_offsets": [0, 4]}})",
                             4),
                    "overlap");
}

TEST(SafetensorsBadInput, DuplicateTensorNames) {
  // nlohmann::json alone would keep the second entry silently.
  expect_open_error(raw_file(R"({"w": {"dtype": "U8", "shape": [4], "data_offsets": [0, 4]},
                                 "w": {"dtype": "U8", "shape": [4], "data_offsets": [4, 8]}})",
                             8),
                    "duplicate tensor name 'w' in the header");
}

TEST(SafetensorsBadInput, DuplicateFieldInEntry) {
  expect_open_error(raw_file(one_tensor(R"({"dtype": "U8", "dtype": "F32", "shape": [4], "data_offsets": [0, 4]})"), 4),
                    "duplicate key 'dtype' in the header entry 'w'");
}

TEST(SafetensorsBadInput, MetadataNotAnObject) {
  expect_open_error(raw_file(R"({"__metadata__": ["format", "pt"]})", 0), "'__metadata__' is not an object (got array)");
}

TEST(SafetensorsBadInput, MetadataValueNotAString) {
  expect_open_error(raw_file(R"({"__metadata__": {"format": "pt", "n": 3}})", 0),
                    "'__metadata__' value for key 'n' is not a string");
}

TEST(SafetensorsBadInput, MissingFile) {
  TempDir dir;
  const auto f = SafetensorsFile::open(dir / "nope.safetensors");
  ASSERT_FALSE(f.is_ok());
  EXPECT_NE(f.message().find("nope.safetensors': cannot open: No such file"), std::string::npos) << f.message();
}

TEST(SafetensorsBadInput, DirectoryIsNotAFile) {
  TempDir dir;
  const auto f = SafetensorsFile::open(dir.path().string());
  ASSERT_FALSE(f.is_ok());
  EXPECT_NE(f.message().find("not a regular file"), std::string::npos) << f.message();
}

TEST(SafetensorsBadInput, EveryTruncationIsAnError) {
  TempDir dir;
  const std::string good = dir / "good.safetensors";
  ASSERT_TRUE(write_safetensors(good, {{"a", Tensor::zeros(DType::kBF16, {3, 5})}, {"b", Tensor::scalar_f32(2)}},
                                {{"format", "pt"}})
                  .is_ok());
  std::ifstream in(good, std::ios::binary);
  const std::string content((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  for (size_t n = 0; n < content.size(); ++n) {
    write_bytes(dir / "cut.safetensors", content.substr(0, n));
    EXPECT_FALSE(SafetensorsFile::open(dir / "cut.safetensors").is_ok()) << "prefix of " << n << " bytes";
  }
}

TEST(SafetensorsBadInput, RandomCorruptionNeverCrashes) {
  // Flips bytes of a valid file's header; whatever opens must give back tensors inside the file.
  TempDir dir;
  const std::string good = dir / "good.safetensors";
  ASSERT_TRUE(write_safetensors(good, {{"w", Tensor::zeros(DType::kF8E4M3, {4, 4})},
                                       {"s", Tensor::zeros(DType::kF32, {4, 1})},
                                       {"i", Tensor::zeros(DType::kI64, {2})}})
                  .is_ok());
  std::ifstream in(good, std::ios::binary);
  const std::string content((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  uint64_t state = 12345;
  auto next = [&] { return (state = state * 6364136223846793005ull + 1442695040888963407ull) >> 33; };
  int opened = 0;
  for (int iter = 0; iter < 500; ++iter) {
    std::string bad = content;
    const int flips = 1 + static_cast<int>(next() % 3);
    for (int k = 0; k < flips; ++k) {
      const size_t at = next() % std::min<size_t>(bad.size(), 8 + 200);
      bad[at] = static_cast<char>(next() % 4 == 0 ? next() : "0123456789[]{},:\"-e."[next() % 20]);
    }
    write_bytes(dir / "bad.safetensors", bad);
    const auto f = SafetensorsFile::open(dir / "bad.safetensors");
    if (!f.is_ok()) {
      EXPECT_NE(f.message().find("bad.safetensors"), std::string::npos) << f.message();
      continue;
    }
    ++opened;
    for (const std::string& name : f->names()) {
      const auto t = f->tensor(name);
      ASSERT_TRUE(t.is_ok()) << t.message();
      const auto e = f->entry(name).value();
      EXPECT_LE(f->data_offset() + e.end, f->file_size());
      volatile uint8_t sink = 0;
      for (uint8_t b : bytes_of(*t)) sink = sink ^ b;
    }
  }
  EXPECT_GT(opened, 0) << "some flips (inside a name, say) leave a valid file";
}

// ---- Good single files --------------------------------------------------------------------------------------

TEST(Safetensors, RequiredDtypesHaveSafetensorsNames) {
  for (const char* n : {"F8_E4M3", "F8_E5M2", "U8", "I8", "I16", "I32", "I64", "BF16", "F16", "F32", "F64"}) {
    const auto d = dtype_from_name(n);
    ASSERT_TRUE(d.has_value()) << n;
    EXPECT_EQ(traits(*d).safetensors_name, n);
  }
}

TEST(Safetensors, RoundTripEveryDtype) {
  // One tensor of each dtype that has a safetensors name, in an order that would misalign wider tensors if the
  // writer kept it in the data section; plus an empty and a scalar tensor.
  std::vector<std::pair<std::string, Tensor>> tensors;
  std::vector<std::vector<uint8_t>> expected;
  uint64_t seed = 100;
  for (const FormatTraits& t : all_formats()) {
    if (t.safetensors_name.empty()) continue;
    const Shape shape = {3, 8};
    Tensor x = Tensor::empty(t.dtype, shape);
    const std::vector<uint8_t> bytes = pattern_bytes(8, x.nbytes(), ++seed);
    std::memcpy(x.raw(), bytes.data(), bytes.size());
    tensors.emplace_back("t." + std::string(t.safetensors_name), x);
    expected.push_back(bytes);
  }
  ASSERT_GE(tensors.size(), 11u);
  tensors.emplace_back("empty", Tensor::empty(DType::kF32, {0, 5}));
  expected.emplace_back();
  tensors.emplace_back("scalar", Tensor::scalar_f32(1.5f));
  expected.push_back({0x00, 0x00, 0xC0, 0x3F});  // 1.5f
  const std::map<std::string, std::string> metadata = {{"format", "pt"}, {"quant_method", "fp8"}, {"empty", ""}};

  TempDir dir;
  const std::string path = dir / "all.safetensors";
  ASSERT_TRUE(write_safetensors(path, tensors, metadata).is_ok());

  const auto f = SafetensorsFile::open(path);
  ASSERT_TRUE(f.is_ok()) << f.message();
  EXPECT_EQ(f->metadata(), metadata);
  EXPECT_EQ(f->data_offset() % 8, 0u);
  ASSERT_EQ(f->names().size(), tensors.size());
  uint64_t covered = 0;
  for (size_t i = 0; i < tensors.size(); ++i) {
    const auto& [name, t] = tensors[i];
    EXPECT_EQ(f->names()[i], name) << "header order is the given order";
    const auto e = f->entry(name);
    ASSERT_TRUE(e.is_ok());
    covered += e->end - e->begin;
    const auto r = f->tensor(name);
    ASSERT_TRUE(r.is_ok()) << r.message();
    EXPECT_EQ(r->dtype(), t.dtype()) << name;
    EXPECT_EQ(r->shape(), t.shape()) << name;
    EXPECT_EQ(bytes_of(*r), expected[i]) << name;
    EXPECT_EQ(reinterpret_cast<uintptr_t>(r->raw()) % std::max(1, element_size(t.dtype())), 0u) << name;
    // Aligned tensors are views of the mapping: the same bytes every time, no copy.
    EXPECT_EQ(f->tensor(name)->raw(), r->raw()) << name;
  }
  EXPECT_EQ(f->data_offset() + covered, f->file_size()) << "the writer leaves no holes";
}

TEST(Safetensors, ViewOutlivesTheFileObject) {
  TempDir dir;
  const std::string path = dir / "a.safetensors";
  Tensor x = Tensor::empty(DType::kI32, {4});
  for (int i = 0; i < 4; ++i) x.data<int32_t>()[i] = 10 * i - 7;
  ASSERT_TRUE(write_safetensors(path, {{"x", x}}).is_ok());
  Tensor view;
  {
    auto f = SafetensorsFile::open(path);
    ASSERT_TRUE(f.is_ok());
    view = f->tensor("x").value();
  }
  fs::remove(path);  // the mapping keeps the inode
  for (int i = 0; i < 4; ++i) EXPECT_EQ(view.data<int32_t>()[i], 10 * i - 7);
}

TEST(Safetensors, HolesAreAllowedAndMisalignedTensorsAreCopied) {
  // 3 bytes of hole, a U8, an F32 at data offset 4 + 1 = 5 (misaligned), a hole, an F16; 4 trailing bytes.
  const std::string header = R"({"u": {"dtype": "U8", "shape": [1], "data_offsets": [3, 4]},
    "f": {"dtype": "F32", "shape": [2], "data_offsets": [5, 13]},
    "h": {"dtype": "F16", "shape": [1], "data_offsets": [14, 16]}})";
  std::string padded = header + std::string((8 - header.size() % 8) % 8, ' ');
  std::string data(20, '\0');
  data[3] = 42;
  const float fv[2] = {3.25f, -0.5f};
  std::memcpy(&data[5], fv, 8);
  data[14] = 0x00;
  data[15] = 0x3C;  // f16 1.0
  TempDir dir;
  const std::string path = dir / "holes.safetensors";
  write_bytes(path, le64(padded.size()) + padded + data);

  const auto f = SafetensorsFile::open(path);
  ASSERT_TRUE(f.is_ok()) << f.message();
  EXPECT_EQ((std::vector<std::string>{"u", "f", "h"}), f->names());
  EXPECT_EQ(f->tensor("u")->data<uint8_t>()[0], 42);
  const Tensor t = f->tensor("f").value();
  ASSERT_EQ(reinterpret_cast<uintptr_t>(t.raw()) % 4, 0u);
  EXPECT_EQ(t.data<float>()[0], 3.25f);
  EXPECT_EQ(t.data<float>()[1], -0.5f);
  EXPECT_EQ(f->tensor("h")->data<uint16_t>()[0], 0x3C00);
}

TEST(Safetensors, EmptyRangesMayTouchOthers) {
  // The official writer gives an empty tensor the offset of its neighbour: [8, 8] next to [8, 14].
  const auto content = raw_file(R"({"a": {"dtype": "U8", "shape": [8], "data_offsets": [0, 8]},
                                   "e": {"dtype": "F32", "shape": [2, 0], "data_offsets": [8, 8]},
                                   "b": {"dtype": "U8", "shape": [6], "data_offsets": [8, 14]}})",
                                14);
  TempDir dir;
  write_bytes(dir / "e.safetensors", content);
  const auto f = SafetensorsFile::open(dir / "e.safetensors");
  ASSERT_TRUE(f.is_ok()) << f.message();
  EXPECT_EQ(f->tensor("e")->numel(), 0);
  EXPECT_TRUE(f->metadata().empty());
}

TEST(Safetensors, MissingTensorIsAnError) {
  TempDir dir;
  ASSERT_TRUE(write_safetensors(dir / "a.safetensors", {{"x", Tensor::scalar_f32(1)}}).is_ok());
  const auto f = SafetensorsFile::open(dir / "a.safetensors");
  ASSERT_TRUE(f.is_ok());
  EXPECT_FALSE(f->has("y"));
  const auto t = f->tensor("y");
  ASSERT_FALSE(t.is_ok());
  EXPECT_NE(t.message().find("a.safetensors': no tensor 'y'"), std::string::npos) << t.message();
}

TEST(Safetensors, VerifyUnchangedDetectsTruncationAndReplacement) {
  TempDir dir;
  const std::string path = dir / "a.safetensors";
  ASSERT_TRUE(write_safetensors(path, {{"x", Tensor::zeros(DType::kF32, {64})}}).is_ok());
  {
    const auto f = SafetensorsFile::open(path);
    ASSERT_TRUE(f.is_ok());
    EXPECT_TRUE(f->verify_unchanged().is_ok());
    fs::resize_file(path, f->file_size() - 100);
    const Status s = f->verify_unchanged();
    ASSERT_FALSE(s.is_ok());
    EXPECT_NE(s.message().find("changed since it was opened: size went from"), std::string::npos) << s.message();
  }
  {
    ASSERT_TRUE(write_safetensors(path, {{"x", Tensor::zeros(DType::kF32, {64})}}).is_ok());
    const auto f = SafetensorsFile::open(path);
    ASSERT_TRUE(f.is_ok());
    // write_safetensors renames a new file over the old one: a different inode.
    ASSERT_TRUE(write_safetensors(path, {{"x", Tensor::zeros(DType::kF32, {64})}}).is_ok());
    const Status s = f->verify_unchanged();
    ASSERT_FALSE(s.is_ok());
    EXPECT_NE(s.message().find("replaced by another file"), std::string::npos) << s.message();
    EXPECT_EQ(f->tensor("x")->data<float>()[63], 0.0f) << "the old mapping stays readable";
  }
  {
    const auto f = SafetensorsFile::open(path);
    ASSERT_TRUE(f.is_ok());
    fs::last_write_time(path, fs::last_write_time(path) - std::chrono::hours(1));
    const Status s = f->verify_unchanged();
    ASSERT_FALSE(s.is_ok());
    EXPECT_NE(s.message().find("modification time differs"), std::string::npos) << s.message();
  }
}

// ---- Writer errors ------------------------------------------------------------------------------------------

void expect_write_error(const std::vector<std::pair<std::string, Tensor>>& tensors, const std::string& expected) {
  TempDir dir;
  const Status s = write_safetensors(dir / "w.safetensors", tensors);
  ASSERT_FALSE(s.is_ok()) << "expected: " << expected;
  EXPECT_NE(s.message().find(expected), std::string::npos) << s.message();
  EXPECT_TRUE(fs::is_empty(dir.path())) << "a failed write leaves nothing behind";
}

TEST(SafetensorsWriter, RejectsDuplicateNames) {
  expect_write_error({{"a", Tensor::scalar_f32(1)}, {"a", Tensor::scalar_f32(2)}}, "tensor 'a': duplicate tensor name");
}

TEST(SafetensorsWriter, RejectsReservedName) {
  expect_write_error({{"__metadata__", Tensor::scalar_f32(1)}}, "the name is reserved for the metadata");
}

TEST(SafetensorsWriter, RejectsUndefinedTensor) {
  expect_write_error({{"a", Tensor::scalar_f32(1)}, {"b", Tensor()}}, "tensor 'b': undefined tensor");
}

TEST(SafetensorsWriter, RejectsNonContiguousTensor) {
  const Tensor x = Tensor::zeros(DType::kF32, {4, 4});
  expect_write_error({{"a", x.narrow(1, 0, 2).value()}}, "is not contiguous");
}

TEST(SafetensorsWriter, MissingDirectoryLeavesNothing) {
  TempDir dir;
  const Status s = write_safetensors(dir / "no/such/dir/w.safetensors", {{"a", Tensor::scalar_f32(1)}});
  ASSERT_FALSE(s.is_ok());
  EXPECT_NE(s.message().find("cannot create temporary file"), std::string::npos) << s.message();
}

TEST(SafetensorsWriter, FailedRenameLeavesTargetAndNoTemporary) {
  TempDir dir;
  fs::create_directory(dir / "target");
  write_bytes(dir / "target/keep", "x");
  const Status s = write_safetensors(dir / "target", {{"a", Tensor::scalar_f32(1)}});
  ASSERT_FALSE(s.is_ok());
  EXPECT_NE(s.message().find("cannot rename the temporary file into place"), std::string::npos) << s.message();
  int entries = 0;
  for (const auto& e : fs::directory_iterator(dir.path())) {
    (void)e;
    ++entries;
  }
  EXPECT_EQ(entries, 1) << "only 'target' remains";
  EXPECT_TRUE(fs::exists(dir / "target/keep"));
}

TEST(SafetensorsWriter, IndexRejectsEscapingFileName) {
  TempDir dir;
  const Status s = write_index_json(dir.path().string(), {{"w", "../elsewhere.safetensors"}});
  ASSERT_FALSE(s.is_ok());
  EXPECT_NE(s.message().find("not a relative path inside"), std::string::npos) << s.message();
}

// ---- Files written by the official Python package ------------------------------------------------------------

struct Pattern {
  const char* name;
  DType dtype;
  Shape shape;
  uint64_t seed;
};

// Mirrors PATTERNS in tools/gen_safetensors_fixtures.py.
const std::vector<Pattern>& python_patterns() {
  static const std::vector<Pattern> p = {
      {"f64", DType::kF64, {3, 5}, 1},        {"f32", DType::kF32, {2, 3, 4}, 2},
      {"f16", DType::kF16, {7}, 3},           {"bf16", DType::kBF16, {4, 3}, 4},
      {"f8_e4m3", DType::kF8E4M3, {5, 4}, 5}, {"f8_e5m2", DType::kF8E5M2, {3, 3}, 6},
      {"i64", DType::kI64, {4}, 7},           {"i32", DType::kI32, {2, 2}, 8},
      {"i16", DType::kI16, {6}, 9},           {"i8", DType::kI8, {9}, 10},
      {"u8", DType::kU8, {2, 8}, 11},         {"scalar_f32", DType::kF32, {}, 12},
      {"empty_bf16", DType::kBF16, {0, 4}, 13},
  };
  return p;
}

void expect_pattern(const Tensor& t, DType dtype, const Shape& shape, uint64_t seed, const std::string& what) {
  EXPECT_EQ(t.dtype(), dtype) << what;
  EXPECT_EQ(t.shape(), shape) << what;
  EXPECT_EQ(bytes_of(t), pattern_bytes(8 * element_size(dtype), t.numel(), seed)) << what;
}

const std::string kPythonDir = std::string(QLINEAR_TEST_DATA) + "/safetensors";

TEST(SafetensorsPython, ReadsEveryTensorBitExactly) {
  const auto f = SafetensorsFile::open(kPythonDir + "/python_dtypes.safetensors");
  ASSERT_TRUE(f.is_ok()) << f.message();
  EXPECT_EQ(f->metadata(), (std::map<std::string, std::string>{{"format", "pt"}}));
  EXPECT_EQ(f->names().size(), python_patterns().size() + 2);
  for (const Pattern& p : python_patterns()) {
    const auto t = f->tensor(p.name);
    ASSERT_TRUE(t.is_ok()) << t.message();
    expect_pattern(*t, p.dtype, p.shape, p.seed, p.name);
  }
  // Bytes from numpy and ml_dtypes, spelled out.
  const Tensor v = f->tensor("values_f32").value();
  EXPECT_EQ(v.shape(), (Shape{2, 3}));
  const uint32_t f32_bits[6] = {0x3F800000, 0x40200000, 0xC0400000, 0x00000000, 0x3A83126F, 0x43E00000};
  EXPECT_EQ(std::memcmp(v.raw(), f32_bits, sizeof f32_bits), 0);
  const Tensor e = f->tensor("values_f8_e4m3").value();
  EXPECT_EQ(e.dtype(), DType::kF8E4M3);
  EXPECT_EQ(bytes_of(e), (std::vector<uint8_t>{0x00, 0x30, 0xBE, 0x7E, 0xFE, 0x01}));  // 0 .5 -1.75 448 -448 2^-9
}

TEST(SafetensorsPython, ShardedCheckpointThroughItsIndex) {
  const auto c = Checkpoint::open(kPythonDir + "/sharded");
  ASSERT_TRUE(c.is_ok()) << c.message();
  EXPECT_EQ(c->names(), (std::vector<std::string>{"layers.0.weight", "layers.0.weight_scale", "layers.1.weight"}));
  EXPECT_EQ(c->files().size(), 2u);
  EXPECT_NE(c->file_of("layers.1.weight")->find("model-00002-of-00002.safetensors"), std::string::npos);
  expect_pattern(c->tensor("layers.0.weight").value(), DType::kF8E4M3, {4, 8}, 21, "layers.0.weight");
  expect_pattern(c->tensor("layers.0.weight_scale").value(), DType::kF32, {4, 1}, 22, "layers.0.weight_scale");
  expect_pattern(c->tensor("layers.1.weight").value(), DType::kBF16, {2, 4}, 23, "layers.1.weight");
  EXPECT_TRUE(c->verify_unchanged().is_ok());
  EXPECT_FALSE(c->has("layers.2.weight"));
  EXPECT_FALSE(c->tensor("layers.2.weight").is_ok());
  EXPECT_FALSE(c->file_of("layers.2.weight").is_ok());
}

TEST(SafetensorsPython, SingleFileCheckpoint) {
  const auto c = Checkpoint::open(kPythonDir + "/python_dtypes.safetensors");
  ASSERT_TRUE(c.is_ok()) << c.message();
  EXPECT_EQ(c->names().size(), python_patterns().size() + 2);
  expect_pattern(c->tensor("bf16").value(), DType::kBF16, {4, 3}, 4, "bf16");
}

// The official reader must accept what we write (no holes, padded header) and see the same tensors.
TEST(SafetensorsPython, OfficialReaderAcceptsOurFiles) {
  if (std::system("python3 -c 'import safetensors' >/dev/null 2>&1") != 0) {
    GTEST_SKIP() << "Python package safetensors not installed";
  }
  TempDir dir;
  const std::string path = dir / "ours.safetensors";
  std::vector<std::pair<std::string, Tensor>> tensors;
  for (const Pattern& p : python_patterns()) {
    Tensor t = Tensor::empty(p.dtype, p.shape);
    const auto bytes = pattern_bytes(8 * element_size(p.dtype), t.numel(), p.seed);
    if (!bytes.empty()) std::memcpy(t.raw(), bytes.data(), bytes.size());
    tensors.emplace_back(p.name, t);
  }
  ASSERT_TRUE(write_safetensors(path, tensors, {{"format", "pt"}}).is_ok());
  const std::string cmd = "python3 -c \"import safetensors, sys; "
                          "[print(n, v['dtype'], v['shape'], bytes(v['data']).hex()) "
                          "for n, v in safetensors.deserialize(open(sys.argv[1], 'rb').read())]\" " + path;
  FILE* pipe = ::popen(cmd.c_str(), "r");
  ASSERT_NE(pipe, nullptr);
  std::string out;
  char buf[4096];
  for (size_t n; (n = std::fread(buf, 1, sizeof buf, pipe)) > 0;) out.append(buf, n);
  ASSERT_EQ(::pclose(pipe), 0) << out;
  for (const auto& [name, t] : tensors) {
    std::string hex;
    for (uint8_t b : bytes_of(t)) {
      char h[3];
      std::snprintf(h, sizeof h, "%02x", b);
      hex += h;
    }
    std::string shape = "[";
    for (size_t i = 0; i < t.shape().size(); ++i) shape += (i ? ", " : "") + std::to_string(t.shape()[i]);
    const std::string line = name + " " + std::string(traits(t.dtype()).safetensors_name) + " " + shape + "] " + hex;
    EXPECT_NE(out.find(line + "\n"), std::string::npos) << "missing: " << line << "\nin:\n" << out;
  }
}

// ---- Checkpoints ---------------------------------------------------------------------------------------------

void write_small(const std::string& path, const std::vector<std::string>& names) {
  std::vector<std::pair<std::string, Tensor>> tensors;
  for (const std::string& n : names) tensors.emplace_back(n, Tensor::zeros(DType::kBF16, {2, 2}));
  ASSERT_TRUE(write_safetensors(path, tensors).is_ok());
}

void expect_checkpoint_error(const std::string& path, const std::string& expected) {
  const auto c = Checkpoint::open(path);
  ASSERT_FALSE(c.is_ok()) << "expected: " << expected;
  EXPECT_NE(c.message().find(expected), std::string::npos) << c.message();
}

TEST(Checkpoint, OurWriterAndIndexRoundTrip) {
  TempDir dir;
  write_small(dir / "a.safetensors", {"x", "y"});
  write_small(dir / "b.safetensors", {"z"});
  ASSERT_TRUE(write_index_json(dir.path().string(), {{"x", "a.safetensors"}, {"y", "a.safetensors"}, {"z", "b.safetensors"}},
                               24)
                  .is_ok());
  const auto c = Checkpoint::open(dir.path().string());
  ASSERT_TRUE(c.is_ok()) << c.message();
  EXPECT_EQ(c->names(), (std::vector<std::string>{"x", "y", "z"}));
  EXPECT_EQ(c->file_of("z").value(), dir / "b.safetensors");
  EXPECT_EQ(c->entry("y")->dtype, DType::kBF16);
}

TEST(Checkpoint, DirectoryWithoutIndexUsesEveryFile) {
  TempDir dir;
  write_small(dir / "a.safetensors", {"x"});
  write_small(dir / "b.safetensors", {"y"});
  write_bytes(dir / "notes.txt", "not a shard");
  const auto c = Checkpoint::open(dir.path().string());
  ASSERT_TRUE(c.is_ok()) << c.message();
  EXPECT_EQ(c->names(), (std::vector<std::string>{"x", "y"}));
  EXPECT_EQ(c->file_of("y").value(), dir / "b.safetensors");
}

TEST(CheckpointBadInput, PathDoesNotExist) {
  TempDir dir;
  expect_checkpoint_error(dir / "missing", "missing' does not exist");
}

TEST(CheckpointBadInput, DirectoryWithoutShards) {
  TempDir dir;
  expect_checkpoint_error(dir.path().string(), "has neither model.safetensors.index.json nor any *.safetensors file");
}

TEST(CheckpointBadInput, SameTensorInTwoFiles) {
  TempDir dir;
  write_small(dir / "a.safetensors", {"x", "w"});
  write_small(dir / "b.safetensors", {"w"});
  expect_checkpoint_error(dir.path().string(), "tensor 'w' is in both '" + (dir / "a.safetensors") + "' and '" +
                                                   (dir / "b.safetensors") + "'");
}

TEST(CheckpointBadInput, SameTensorInTwoShardsOfAnIndex) {
  // The index names one holder of 'w', but two shards hold it: which bytes are right is unknowable.
  TempDir dir;
  write_small(dir / "a.safetensors", {"w", "v"});
  write_small(dir / "b.safetensors", {"w"});
  write_bytes(dir / "model.safetensors.index.json", R"({"weight_map": {"w": "b.safetensors", "v": "a.safetensors"}})");
  expect_checkpoint_error(dir.path().string(), "tensor 'w' is in both");
}

TEST(CheckpointBadInput, IndexNotJson) {
  TempDir dir;
  write_bytes(dir / "model.safetensors.index.json", "{\"weight_map\": ");
  expect_checkpoint_error(dir.path().string(), "model.safetensors.index.json': invalid JSON");
}

TEST(CheckpointBadInput, IndexNotAnObject) {
  TempDir dir;
  write_bytes(dir / "model.safetensors.index.json", "[]");
  expect_checkpoint_error(dir.path().string(), "not a JSON object (got array)");
}

TEST(CheckpointBadInput, WeightMapMissing) {
  TempDir dir;
  write_bytes(dir / "model.safetensors.index.json", R"({"metadata": {"total_size": 8}})");
  expect_checkpoint_error(dir.path().string(), "index.json': missing 'weight_map'");
}

TEST(CheckpointBadInput, WeightMapValueNotAString) {
  TempDir dir;
  write_bytes(dir / "model.safetensors.index.json", R"({"weight_map": {"w": 1}})");
  expect_checkpoint_error(dir.path().string(), "'weight_map' entry for tensor 'w' is not a file name");
}

TEST(CheckpointBadInput, TensorListedTwiceInWeightMap) {
  TempDir dir;
  write_small(dir / "a.safetensors", {"w"});
  write_small(dir / "b.safetensors", {"v"});
  write_bytes(dir / "model.safetensors.index.json", R"({"weight_map": {"w": "a.safetensors", "w": "b.safetensors"}})");
  expect_checkpoint_error(dir.path().string(), "tensor 'w' is listed twice in 'weight_map'");
}

TEST(CheckpointBadInput, IndexNamesMissingShard) {
  TempDir dir;
  write_small(dir / "a.safetensors", {"w"});
  write_bytes(dir / "model.safetensors.index.json",
              R"({"weight_map": {"w": "a.safetensors", "v": "model-00002.safetensors"}})");
  expect_checkpoint_error(dir.path().string(), "shard 'model-00002.safetensors' (holding tensor 'v') does not exist");
}

TEST(CheckpointBadInput, TensorMissingFromItsShard) {
  TempDir dir;
  write_small(dir / "a.safetensors", {"w"});
  write_bytes(dir / "model.safetensors.index.json", R"({"weight_map": {"w": "a.safetensors", "v": "a.safetensors"}})");
  expect_checkpoint_error(dir.path().string(), "tensor 'v' is assigned to shard 'a.safetensors', which does not hold it");
}

TEST(CheckpointBadInput, IndexEscapesTheDirectory) {
  TempDir dir;
  write_bytes(dir / "model.safetensors.index.json", R"({"weight_map": {"w": "../a.safetensors"}})");
  expect_checkpoint_error(dir.path().string(), "maps to '../a.safetensors', which is not a relative path inside");
}

TEST(CheckpointBadInput, BrokenShardIsNamed) {
  TempDir dir;
  write_small(dir / "a.safetensors", {"w"});
  write_bytes(dir / "b.safetensors", le64(3) + "{}");
  expect_checkpoint_error(dir.path().string(), "safetensors file '" + (dir / "b.safetensors") + "': header length 3");
}

}  // namespace
}  // namespace qlinear
