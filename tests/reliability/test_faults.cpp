// Faults: files that change under a mapping, writes that fail half-way or are killed, allocations that cannot
// succeed. What must hold: a changed checkpoint is detected before use (no SIGBUS), a failed or interrupted
// write never leaves a partial file at the target path, and an impossible allocation is std::bad_alloc in
// the library and "out of memory" (exit 1) from the qlinear command.
#include <signal.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/time.h>

#include <climits>
#include <filesystem>

#include "qlinear/checkpoint_writer.hpp"
#include "qlinear/loader.hpp"
#include "qlinear/safetensors.hpp"
#include "reliability_util.hpp"

// ASan refuses impossible allocations by aborting unless told to return null (then Tensor::empty throws
// std::bad_alloc, which is what these tests check). Only read when the program is built with ASan.
extern "C" const char* __asan_default_options() { return "allocator_may_return_null=1"; }

namespace qlinear::reliability {
namespace {

namespace fs = std::filesystem;

std::vector<std::pair<std::string, Tensor>> some_tensors(int64_t rows, uint64_t seed) {
  return {{"a.weight", random_normal(DType::kF32, {rows, 256}, seed)},
          {"a.bias", random_normal(DType::kBF16, {rows}, seed + 1)}};
}

void expect_contains(const std::string& text, const std::string& piece) {
  EXPECT_NE(text.find(piece), std::string::npos) << "missing \"" << piece << "\" in: " << text;
}

// ---- A checkpoint that changes after it was opened ---------------------------------------------------

TEST(Faults, TruncatedAfterOpenIsDetectedByVerifyUnchanged) {
  TempDir dir;
  const std::string path = dir / "model.safetensors";
  ASSERT_TRUE(write_safetensors(path, some_tensors(64, 1)));
  auto f = SafetensorsFile::open(path);
  ASSERT_TRUE(f) << f.message();
  ASSERT_TRUE(f->verify_unchanged());
  const uint64_t size = f->file_size();
  ASSERT_EQ(::truncate(path.c_str(), static_cast<off_t>(size / 2)), 0);
  Status s = f->verify_unchanged();
  ASSERT_FALSE(s);
  expect_contains(s.message(), path);
  expect_contains(s.message(), "size went from " + std::to_string(size) + " to " + std::to_string(size / 2));
}

TEST(Faults, ReplacedOrRewrittenAfterOpenIsDetected) {
  TempDir dir;
  const std::string path = dir / "model.safetensors";
  ASSERT_TRUE(write_safetensors(path, some_tensors(64, 1)));
  auto f = SafetensorsFile::open(path);
  ASSERT_TRUE(f) << f.message();
  // Replaced: write_safetensors renames a new file over the old one (a new inode).
  ASSERT_TRUE(write_safetensors(path, some_tensors(64, 2)));
  expect_contains(f->verify_unchanged().message(), "it was replaced by another file");
  // The old mapping still reads the old bytes: replacing never disturbs a reader.
  EXPECT_TRUE(f->tensor("a.weight"));

  // Rewritten in place with the same size: only the modification time tells.
  auto g = SafetensorsFile::open(path);
  ASSERT_TRUE(g) << g.message();
  struct stat st {};
  ASSERT_EQ(::stat(path.c_str(), &st), 0);
  const timespec later[2] = {st.st_atim, {st.st_mtim.tv_sec + 1, st.st_mtim.tv_nsec}};
  ASSERT_EQ(::utimensat(AT_FDCWD, path.c_str(), later, 0), 0);
  expect_contains(g->verify_unchanged().message(), "it was modified");

  // Removed.
  ASSERT_EQ(::unlink(path.c_str()), 0);
  expect_contains(g->verify_unchanged().message(), "cannot stat");
}

TEST(Faults, CheckpointTruncatedAfterLoadIsDetectedBeforeProcessing) {
  // load_checkpoint's tensors may be views into the mapping; an engine calls verify_unchanged() before
  // processing them (safetensors.hpp, LIMITATION). This is the check that keeps it from a SIGBUS.
  TempDir dir;
  const Scheme& scheme = *find_scheme("w8a8-fp8-channel");
  const LinearLayer layer = make_layer(scheme, kN, kK, 3);
  ASSERT_TRUE(write_quantized_checkpoint(dir.path(), scheme, {{"model.layers.0.mlp.down_proj", &layer, {}}}, {},
                                         R"({"model_type": "llama"})"));
  auto model = load_checkpoint(dir.path());
  ASSERT_TRUE(model) << model.message();
  ASSERT_EQ(model->layers.size(), 1u);
  ASSERT_TRUE(model->checkpoint.verify_unchanged());
  ASSERT_EQ(::truncate((dir / "model.safetensors").c_str(), 100), 0);
  Status s = model->checkpoint.verify_unchanged();
  ASSERT_FALSE(s);
  expect_contains(s.message(), "model.safetensors");
  expect_contains(s.message(), "to 100 bytes");
  // Opened afresh, the truncated file is refused with a reason, never mapped past its end.
  auto again = load_checkpoint(dir.path());
  ASSERT_FALSE(again);
  expect_contains(again.message(), "model.safetensors");
}

// ---- Writes that fail or are interrupted -------------------------------------------------------------

// Caps the size of any file this process writes (RLIMIT_FSIZE) for the scope: a write beyond it fails with
// EFBIG, the way a full disk fails one with ENOSPC. SIGXFSZ is ignored so that the failure is an error.
class FileSizeLimit {
 public:
  explicit FileSizeLimit(rlim_t bytes) {
    ::getrlimit(RLIMIT_FSIZE, &saved_);
    old_handler_ = ::signal(SIGXFSZ, SIG_IGN);
    rlimit lim = saved_;
    lim.rlim_cur = bytes;
    ok_ = ::setrlimit(RLIMIT_FSIZE, &lim) == 0;
  }
  ~FileSizeLimit() {
    ::setrlimit(RLIMIT_FSIZE, &saved_);
    ::signal(SIGXFSZ, old_handler_);
  }
  bool ok() const { return ok_; }

 private:
  rlimit saved_{};
  sighandler_t old_handler_;
  bool ok_ = false;
};

TEST(Faults, WriteFailingHalfWayLeavesTheOldFileAndNoTemporary) {
  TempDir dir;
  const std::string path = dir / "model.safetensors";
  ASSERT_TRUE(write_safetensors(path, some_tensors(4, 1)));  // ~4 KiB: under the limit below
  const std::string before = read_all(path);
  Status s;
  {
    FileSizeLimit limit(16 * 1024);
    ASSERT_TRUE(limit.ok());
    s = write_safetensors(path, some_tensors(256, 2));  // 256 KiB: fails after 16 KiB
  }
  ASSERT_FALSE(s);
  expect_contains(s.message(), path);
  expect_contains(s.message(), "write failed");
  EXPECT_EQ(list_dir(dir.path()), std::vector<std::string>{"model.safetensors"});
  EXPECT_EQ(read_all(path), before) << "the old file changed";
  EXPECT_TRUE(SafetensorsFile::open(path));
}

TEST(Faults, WriteIntoAnUnwritablePlaceFailsCleanly) {
  // /proc refuses new files whoever we are (a read-only directory would not stop root).
  Status s = write_safetensors("/proc/self/qlinear-test.safetensors", some_tensors(4, 1));
  ASSERT_FALSE(s);
  expect_contains(s.message(), "/proc/self/qlinear-test.safetensors");
  expect_contains(s.message(), "cannot create temporary file");
  EXPECT_FALSE(fs::exists("/proc/self/qlinear-test.safetensors"));

  TempDir dir;
  Status missing = write_safetensors(dir / "no/such/dir/model.safetensors", some_tensors(4, 1));
  ASSERT_FALSE(missing);
  expect_contains(missing.message(), "No such file or directory");
  EXPECT_TRUE(list_dir(dir.path()).empty());

  // The target is a directory: the rename fails and the temporary file goes.
  ASSERT_TRUE(fs::create_directory(dir / "model.safetensors"));
  ASSERT_TRUE(fs::create_directory(dir / "model.safetensors/keep"));
  Status onto_dir = write_safetensors(dir / "model.safetensors", some_tensors(4, 1));
  ASSERT_FALSE(onto_dir);
  expect_contains(onto_dir.message(), "cannot rename the temporary file into place");
  EXPECT_EQ(list_dir(dir.path()), std::vector<std::string>{"model.safetensors"});
}

TEST(Faults, IndexWriteFailingLeavesNoPartialIndex) {
  TempDir dir;
  ASSERT_TRUE(write_index_json(dir.path(), {{"a.weight", "model-1.safetensors"}}, 123));
  const std::string before = read_all(dir / kSafetensorsIndexName);
  std::map<std::string, std::string> big;
  for (int i = 0; i < 2000; ++i) big["model.layers." + std::to_string(i) + ".weight"] = "model-2.safetensors";
  Status s;
  {
    FileSizeLimit limit(4096);
    ASSERT_TRUE(limit.ok());
    s = write_index_json(dir.path(), big, 456);
  }
  ASSERT_FALSE(s);
  EXPECT_EQ(list_dir(dir.path()), std::vector<std::string>{kSafetensorsIndexName});
  EXPECT_EQ(read_all(dir / kSafetensorsIndexName), before);
}

TEST(Faults, QuantizedCheckpointWriteFailingLeavesNoPartialCheckpoint) {
  TempDir dir;
  const std::string out = dir / "ckpt";
  const Scheme& scheme = *find_scheme("w8a16-mxfp8");
  const LinearLayer layer = make_layer(scheme, 512, 512, 4);  // ~270 KiB of codes and scales
  Status s;
  {
    FileSizeLimit limit(64 * 1024);
    ASSERT_TRUE(limit.ok());
    s = write_quantized_checkpoint(out, scheme, {{"model.layers.0.mlp.down_proj", &layer, {}}}, {});
  }
  ASSERT_FALSE(s);
  expect_contains(s.message(), "model.safetensors");
  // Neither file, nor a temporary, is left: loading says what is missing instead of reading half a file.
  EXPECT_TRUE(!fs::exists(out) || list_dir(out).empty()) << "left: " << ::testing::PrintToString(list_dir(out));
}

TEST(Faults, QuantizedCheckpointWriteFailingKeepsTheCheckpointThatWasThere) {
  TempDir dir;
  const std::string out = dir / "ckpt";
  const Scheme& scheme = *find_scheme("w8a16-mxfp8");
  const LinearLayer small = make_layer(scheme, 64, 128, 5);
  ASSERT_TRUE(write_quantized_checkpoint(out, scheme, {{"model.layers.0.mlp.down_proj", &small, {}}}, {}));
  const std::string config = read_all(out + "/config.json"), weights = read_all(out + "/model.safetensors");
  const LinearLayer big = make_layer(scheme, 512, 512, 4);  // ~270 KiB of codes and scales
  Status s;
  {
    FileSizeLimit limit(64 * 1024);
    ASSERT_TRUE(limit.ok());
    s = write_quantized_checkpoint(out, scheme, {{"model.layers.0.mlp.down_proj", &big, {}}}, {});
  }
  ASSERT_FALSE(s);
  expect_contains(s.message(), "model.safetensors");
  EXPECT_EQ(list_dir(out), (std::vector<std::string>{"config.json", "model.safetensors"}));
  EXPECT_EQ(read_all(out + "/config.json"), config);
  EXPECT_EQ(read_all(out + "/model.safetensors"), weights);
  auto model = load_checkpoint(out);
  ASSERT_TRUE(model) << model.message();
  EXPECT_EQ(model->layers.at(0).layer.config.n, 64);
}

TEST(Faults, BadBaseConfigIsRefusedBeforeAnythingIsWritten) {
  // The base config is checked before the weights are written: refusing it afterwards would leave new
  // weights beside the old config.json.
  TempDir dir;
  const std::string out = dir / "ckpt";
  const Scheme& scheme = *find_scheme("w8a8-fp8-channel");
  const LinearLayer a = make_layer(scheme, 64, 128, 5), b = make_layer(scheme, 128, 128, 6);
  ASSERT_TRUE(write_quantized_checkpoint(out, scheme, {{"model.layers.0.mlp.down_proj", &a, {}}}, {}));
  const std::string config = read_all(out + "/config.json"), weights = read_all(out + "/model.safetensors");
  for (const std::string& base : {std::string("[1, 2]"), std::string("{\"x\": "),
                                  "{\"x\": " + std::string(100000, '[') + std::string(100000, ']') + "}"}) {
    Status s = write_quantized_checkpoint(out, scheme, {{"model.layers.0.mlp.down_proj", &b, {}}}, {}, base);
    ASSERT_FALSE(s);
    expect_contains(s.message(), "base config.json is not a JSON object");
    EXPECT_EQ(list_dir(out), (std::vector<std::string>{"config.json", "model.safetensors"}));
    EXPECT_EQ(read_all(out + "/config.json"), config);
    EXPECT_EQ(read_all(out + "/model.safetensors"), weights);
  }
  Status s = write_quantized_checkpoint(dir / "fresh", scheme, {{"m.down_proj", &b, {}}}, {}, "[]");
  ASSERT_FALSE(s);
  EXPECT_FALSE(fs::exists(dir / "fresh"));
}

TEST(Faults, QuantizedCheckpointWriterKilledLeavesALoadableOrARefusedDirectory) {
  // A child rewrites one directory in a loop, alternating two schemes whose tensors differ (FP8 per-channel
  // and MXFP8: the weight_scale dtype and shape): new weights read with the old config would fail to load
  // with a tensor error. Killed at varying moments, the directory must load (as one of the two) or be
  // refused for want of config.json; staged files may remain, hidden.
  TempDir dir;
  const std::string out = dir / "ckpt";
  const Scheme& fp8 = *find_scheme("w8a8-fp8-channel");
  const Scheme& mx = *find_scheme("w8a16-mxfp8");
  const LinearLayer a = make_layer(fp8, 256, 256, 7), b = make_layer(mx, 256, 256, 8);
  int loaded = 0, refused = 0;
  for (int round = 0; round < 12; ++round) {
    const pid_t pid = ::fork();
    if (pid == 0) {
      for (int i = 0;; ++i) {
        const bool odd = i % 2 == 1;
        if (!write_quantized_checkpoint(out, odd ? mx : fp8, {{"model.layers.0.mlp.down_proj", odd ? &b : &a, {}}},
                                        {})) {
          ::_exit(3);
        }
      }
    }
    ASSERT_GT(pid, 0);
    std::this_thread::sleep_for(std::chrono::microseconds(3000 + 2711 * round));
    ::kill(pid, SIGKILL);
    int status = 0;
    ::waitpid(pid, &status, 0);
    ASSERT_TRUE(WIFSIGNALED(status)) << "the writer stopped by itself (status " << status << ")";
    // Killed before it made the directory (a slow start, as under ASan): nothing was written, nothing to check.
    if (!std::filesystem::exists(out)) {
      ++refused;
      continue;
    }
    for (const std::string& name : list_dir(out)) {
      EXPECT_TRUE(name == "config.json" || name == "model.safetensors" || name[0] == '.') << name;
    }
    auto model = load_checkpoint(out);
    if (model) {
      ++loaded;
      ASSERT_EQ(model->layers.size(), 1u);
      const std::string_view scheme = model->layers[0].scheme->name;
      EXPECT_TRUE(scheme == fp8.name || scheme == mx.name) << scheme;
    } else {
      ++refused;
      expect_contains(model.message(), "config.json");
    }
  }
  std::printf("killed writer: %d rounds loaded, %d refused (no config.json)\n", loaded, refused);
}

TEST(Faults, WriterKilledMidWriteNeverLeavesAPartialTarget) {
  // A child rewrites the same 32 MiB file in a loop; it is SIGKILLed while a temporary file is being
  // written. The target must be absent or a complete, valid file; the temporary may stay behind (a
  // killed process cannot clean up), hidden and named after the target.
  TempDir dir;
  const std::string path = dir / "model.safetensors";
  const auto tensors = some_tensors(32 * 1024, 9);  // 32 MiB of f32
  const pid_t pid = ::fork();
  if (pid == 0) {
    for (;;) {
      if (!write_safetensors(path, tensors)) ::_exit(3);
    }
  }
  ASSERT_GT(pid, 0);
  bool saw_temporary = false;
  for (int i = 0; i < 20000 && !saw_temporary; ++i) {
    for (const std::string& name : list_dir(dir.path())) {
      if (name.rfind(".model.safetensors.tmp.", 0) == 0 && fs::file_size(dir / name) > 1024 * 1024) {
        saw_temporary = true;
      }
    }
    if (!saw_temporary) std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  ::kill(pid, SIGKILL);
  int status = 0;
  ::waitpid(pid, &status, 0);
  ASSERT_TRUE(WIFSIGNALED(status)) << "the writer stopped by itself (status " << status << ")";
  EXPECT_TRUE(saw_temporary);
  if (fs::exists(path)) {
    auto f = SafetensorsFile::open(path);
    ASSERT_TRUE(f) << "a partial target: " << f.message();
    auto w = f->tensor("a.weight");
    ASSERT_TRUE(w);
    EXPECT_TRUE(same_bytes(*w, tensors[0].second)) << "the target holds other bytes";
  }
  for (const std::string& name : list_dir(dir.path())) {
    EXPECT_TRUE(name == "model.safetensors" || name.rfind(".model.safetensors.tmp.", 0) == 0) << name;
  }
}

// ---- Allocation failure ------------------------------------------------------------------------------

TEST(Faults, ImpossibleHostAllocationThrowsBadAlloc) {
  // 2^50 f32 elements (4 PiB): representable, never allocatable.
  EXPECT_THROW(Tensor::empty(DType::kF32, {int64_t{1} << 40, int64_t{1} << 10}), std::bad_alloc);
  EXPECT_THROW(Tensor::zeros(DType::kBF16, {int64_t{1} << 50}), std::bad_alloc);
}

TEST(Faults, CliReportsOutOfMemoryCleanly) {
  const std::vector<std::string> env = {"ASAN_OPTIONS=allocator_may_return_null=1"};
  const std::vector<std::vector<std::string>> cases = {
      // The largest sizes the options take (2^20 each): a 2^40-element weight, 4 TiB of f32.
      {"bench", "--scheme", "w8a16-mxfp8", "--n", "1048576", "--k", "1048576", "--m", "1", "--reps", "1"},
      {"bench", "--scheme", "w8a8-int8-dynamic", "--n", "1048576", "--k", "1048576", "--m", "1", "--reps", "1"},
  };
  for (const auto& args : cases) {
    SCOPED_TRACE(::testing::PrintToString(args));
    const CliResult r = run_cli(args, env);
    EXPECT_EQ(r.signal, 0) << r.describe();
    EXPECT_EQ(r.exit_code, 1) << r.describe();
    expect_contains(r.err, "qlinear " + args[0] + ": out of memory");
  }
}

}  // namespace
}  // namespace qlinear::reliability
