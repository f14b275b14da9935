// Fused q/k/v and gate/up shards whose row counts are not multiples of the 128x128 weight block, loaded with
// each shard's own block grid: written by quantize_checkpoint, loaded fused, and sliced for tensor
// parallelism where the blocks allow it (each rank's columns computed as the one-GPU layer computes them);
// where they do not, the refusal names the row and the block.
#include <gtest/gtest.h>
#include <unistd.h>

#include <cstring>
#include <filesystem>
#include <fstream>

#include "backends/reference/reference_kernels.hpp"
#include "qlinear/checkpoint_writer.hpp"
#include "qlinear/make_layer.hpp"
#include "qlinear/loader.hpp"
#include "qlinear/quantize_checkpoint.hpp"
#include "qlinear/random.hpp"
#include "qlinear/safetensors.hpp"

namespace qlinear {
namespace {

namespace fs = std::filesystem;

struct Model {
  int64_t hidden, intermediate, heads, kv_heads;
};

// One decoder layer of BF16 weights quantized to w8a8-fp8-block into `dir`.
void write_fp8_block_model(const fs::path& dir, const Model& m) {
  const fs::path in = dir / "bf16";
  fs::create_directories(in);
  const int64_t kv = m.kv_heads * (m.hidden / m.heads);
  std::vector<std::pair<std::string, Tensor>> t;
  uint64_t seed = 71;
  auto add = [&](const std::string& name, Shape shape) {
    t.emplace_back("model.layers.0." + name, random_normal(DType::kBF16, std::move(shape), seed++, 0.05));
  };
  add("self_attn.q_proj.weight", {m.hidden, m.hidden});
  add("self_attn.k_proj.weight", {kv, m.hidden});
  add("self_attn.v_proj.weight", {kv, m.hidden});
  add("mlp.gate_proj.weight", {m.intermediate, m.hidden});
  add("mlp.up_proj.weight", {m.intermediate, m.hidden});
  ASSERT_TRUE(write_safetensors((in / "model.safetensors").string(), t));
  std::ofstream(in / "config.json") << "{\"hidden_size\": " << m.hidden << ", \"num_attention_heads\": " << m.heads
                                    << ", \"num_key_value_heads\": " << m.kv_heads << "}";
  auto s = quantize_checkpoint(in.string(), (dir / "q").string(), *find_scheme("w8a8-fp8-block"), {});
  ASSERT_TRUE(s) << s.message();
}

struct TempDir {
  fs::path path = fs::temp_directory_path() / ("qlinear-partial-" + std::to_string(::getpid()) + "-" +
                                               std::to_string(counter++));
  static inline int counter = 0;
  ~TempDir() { fs::remove_all(path); }
};

LoadOptions slice(int rank, int size, const std::string& layers) {
  LoadOptions o;
  o.tp_rank = rank;
  o.tp_size = size;
  o.layer_regex = layers;
  o.out_dtype = DType::kF32;
  return o;
}

Tensor reference_output(const LoadedLayer& l, const Tensor& x) {
  LinearLayer layer = l.layer;
  EXPECT_TRUE(reference::kFp8BlockScaled.process_weights_after_loading(layer));
  auto y = reference::kFp8BlockScaled.apply(layer, Activation::dense(x));
  EXPECT_TRUE(y) << y.message();
  return y ? *y : Tensor();
}

TEST(PartialBlocks, SmolLm2ShapesLoadFused) {
  TempDir dir;
  write_fp8_block_model(dir.path, {576, 1536, 9, 3});
  auto model = load_checkpoint((dir.path / "q").string());
  ASSERT_TRUE(model) << model.message();
  ASSERT_EQ(model->layers.size(), 2u);
  const bool qkv_first = model->layers[0].layer.name.ends_with("qkv_proj");
  const LinearLayer& qkv = model->layers[qkv_first ? 0 : 1].layer;
  const LinearLayer& gate_up = model->layers[qkv_first ? 1 : 0].layer;
  EXPECT_EQ(qkv.name, "model.layers.0.self_attn.qkv_proj");
  EXPECT_EQ(gate_up.config.logical_widths, (std::vector<int64_t>{1536, 1536}));
  EXPECT_TRUE(scale_row_grid(gate_up.config).uniform);
  EXPECT_EQ(qkv.config.logical_widths, (std::vector<int64_t>{576, 192, 192}));
  EXPECT_EQ(qkv.params.at("weight_scale").shape(), (Shape{9, 5}));
  EXPECT_FALSE(scale_row_grid(qkv.config).uniform);
  // 3 ranks: q's 192 rows per rank start inside a block (rank 1 at row 192).
  auto three = load_checkpoint((dir.path / "q").string(), slice(1, 3, "qkv"));
  ASSERT_FALSE(three);
  EXPECT_NE(three.message().find("q_proj: this rank's slice of 192 of its 576 output rows starts at row 192, inside "
                                 "a 128-row block of the 128x128 weight blocks"),
            std::string::npos)
      << three.message();
}

// Hidden 512, one KV head of 64 rows (replicated on every rank), intermediate 1408 (11 blocks).
TEST(PartialBlocks, TensorParallelSlicesKeepEachShardsGrid) {
  TempDir dir;
  write_fp8_block_model(dir.path, {512, 1408, 8, 1});
  const std::string ckpt = (dir.path / "q").string();
  auto full = load_checkpoint(ckpt, slice(0, 1, "qkv"));
  ASSERT_TRUE(full) << full.message();
  const Tensor x = random_normal(DType::kBF16, {5, 512}, 3, 1.0);
  const Tensor want = reference_output(full->layers[0], x);
  for (const int tp : {2, 4}) {
    for (int rank = 0; rank < tp; ++rank) {
      SCOPED_TRACE("rank " + std::to_string(rank) + " of " + std::to_string(tp));
      auto part = load_checkpoint(ckpt, slice(rank, tp, "qkv"));
      ASSERT_TRUE(part) << part.message();
      const LinearLayer& l = part->layers[0].layer;
      const int64_t q = 512 / tp;
      EXPECT_EQ(l.config.logical_widths, (std::vector<int64_t>{q, 64, 64}));
      EXPECT_EQ(l.params.at("weight_scale").size(0), (q + 127) / 128 + 2);
      const Tensor got = reference_output(part->layers[0], x);
      // This rank's q columns, then the replicated k and v: the one-GPU layer's, bit for bit.
      for (int64_t i = 0; i < 5; ++i) {
        const float* g = got.data<float>() + i * (q + 128);
        const float* w = want.data<float>() + i * 640;
        EXPECT_EQ(std::memcmp(g, w + rank * q, sizeof(float) * q), 0) << "q, row " << i;
        EXPECT_EQ(std::memcmp(g + q, w + 512, sizeof(float) * 128), 0) << "k/v, row " << i;
      }
    }
  }
  // gate/up: 704 rows per rank of 2; rank 1's slice starts inside block 5.
  auto gate_up = load_checkpoint(ckpt, slice(1, 2, "gate_up"));
  ASSERT_FALSE(gate_up);
  EXPECT_NE(gate_up.message().find("gate_proj: this rank's slice of 704 of its 1408 output rows starts at row 704, "
                                   "inside a 128-row block"),
            std::string::npos)
      << gate_up.message();
}

// A fused layer with per-shard grids written as one module would be read back with one grid: refused, naming
// the grid; its shards written as modules of their own load fused.
TEST(PartialBlocks, WriterRefusesAFusedModuleWithPerShardGrids) {
  TempDir dir;
  MakeLayerOptions opt;
  opt.logical_widths = {144, 32, 32};
  const Scheme& s = *find_scheme("w8a8-fp8-block");
  auto fused = quantize_layer("qkv", s, random_normal(DType::kF32, {208, 256}, 8, 0.1), opt);
  ASSERT_TRUE(fused) << fused.message();
  const Status w =
      write_quantized_checkpoint(dir.path.string(), s, {{"model.layers.0.self_attn.qkv_proj", &*fused, {}}}, {});
  ASSERT_FALSE(w);
  EXPECT_NE(w.message().find("qkv_proj is a fused layer of 3 shards with their own weight-block grids (per-shard "
                             "128-row grids: 144->2, 32->1, 32->1 scale rows); write each shard as a module of its "
                             "own"),
            std::string::npos)
      << w.message();
  EXPECT_FALSE(fs::exists(dir.path / "config.json"));
}

}  // namespace
}  // namespace qlinear
