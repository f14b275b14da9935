// The loader: checkpoints written by qlinear's writer load back bit-exactly in every scheme; fused shards;
// tensor-parallel slices that recombine into the full layer; and bad checkpoints refused with reasons.
#include <gtest/gtest.h>
#include <unistd.h>

#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>

#include "backends/reference/reference_kernels.hpp"
#include "qlinear/checkpoint_writer.hpp"
#include "qlinear/loader.hpp"
#include "qlinear/make_layer.hpp"
#include "qlinear/random.hpp"
#include "qlinear/registry.hpp"
#include "qlinear/safetensors.hpp"

namespace qlinear {
namespace {

namespace fs = std::filesystem;

class TempDir {
 public:
  TempDir() : path_(fs::temp_directory_path() / ("qlinear-loader-" + std::to_string(::getpid()) + "-" +
                                                 std::to_string(counter_++))) {
    fs::create_directories(path_);
  }
  ~TempDir() { fs::remove_all(path_); }
  std::string str() const { return path_.string(); }

 private:
  static inline int counter_ = 0;
  fs::path path_;
};

bool same_bytes(const Tensor& a, const Tensor& b) {
  return a.nbytes() == b.nbytes() && std::memcmp(a.contiguous().raw(), b.contiguous().raw(), a.nbytes()) == 0;
}

// y = reference(layer)(x), f32 output.
Tensor reference_output(LinearLayer layer, const Tensor& x, const Tensor* bias = nullptr) {
  layer.config.out_dtype = DType::kF32;
  const LinearKernel& ref = *find_kernel("reference_" + std::string(family_name(layer.config.family)));
  EXPECT_TRUE(ref.process_weights_after_loading(layer));
  return ref.apply(layer, Activation::dense(x), bias).value();
}

TEST(Loader, EverySchemeRoundTripsBitExactly) {
  for (const Scheme& s : all_schemes()) {
    SCOPED_TRACE(std::string(s.name));
    TempDir dir;
    const std::string module = "model.layers.3.mlp.up_proj";
    LinearLayer layer = quantize_layer(module, s, random_normal(DType::kF32, {64, 256}, 11, 0.1)).value();
    const Tensor bias = random_normal(DType::kF32, {64}, 12, 0.1);
    ASSERT_TRUE(write_quantized_checkpoint(dir.str(), s, {{module, &layer, bias}}, {}));
    auto model = load_checkpoint(dir.str());
    ASSERT_TRUE(model) << model.message();
    ASSERT_EQ(model->layers.size(), 1u);
    const LoadedLayer& l = model->layers[0];
    EXPECT_EQ(l.scheme, &s);
    EXPECT_EQ(l.layer.name, module);
    EXPECT_TRUE(same_bytes(l.bias, bias));
    for (const auto& [name, t] : layer.params) {
      ASSERT_TRUE(l.layer.has(name)) << name;
      EXPECT_TRUE(same_bytes(l.layer.params.at(name), t)) << name;
    }
  }
}

// Writes q/k/v (or gate/up) shards of one scheme and returns the full weights.
std::vector<Tensor> write_shards(const std::string& dir, const Scheme& s, const std::string& parent,
                                 const std::vector<std::string>& leaves, const std::vector<int64_t>& rows, int64_t k,
                                 const std::string& config_json = "{}") {
  std::vector<LinearLayer> layers;
  std::vector<Tensor> weights;
  for (size_t i = 0; i < leaves.size(); ++i) {
    weights.push_back(random_normal(DType::kF32, {rows[i], k}, 20 + i, 0.05 * (i + 1)));
    layers.push_back(quantize_layer(parent + leaves[i], s, weights.back()).value());
  }
  std::vector<CheckpointModule> modules;
  for (size_t i = 0; i < leaves.size(); ++i) modules.push_back({parent + leaves[i], &layers[i], Tensor()});
  EXPECT_TRUE(write_quantized_checkpoint(dir, s, modules, {}, config_json));
  return weights;
}

TEST(Loader, FusesQkvWithPerShardScalesAndMatchesTheShards) {
  TempDir dir;
  const Scheme& s = *find_scheme("w8a8-fp8-tensor");
  write_shards(dir.str(), s, "model.layers.0.self_attn.", {"q_proj", "k_proj", "v_proj"}, {64, 32, 32}, 128);
  auto model = load_checkpoint(dir.str());
  ASSERT_TRUE(model) << model.message();
  ASSERT_EQ(model->layers.size(), 1u);
  const LoadedLayer& fused = model->layers[0];
  EXPECT_EQ(fused.layer.name, "model.layers.0.self_attn.qkv_proj");
  EXPECT_EQ(fused.layer.config.logical_widths, (std::vector<int64_t>{64, 32, 32}));
  EXPECT_EQ(fused.layer.params.at("weight_scale").shape(), Shape{3});
  EXPECT_EQ(fused.layer.params.at("input_scale").shape(), Shape{3});
  // The fused layer's output is the shards' outputs side by side.
  LoadOptions unfused;
  unfused.fuse = false;
  auto parts = load_checkpoint(dir.str(), unfused);
  ASSERT_TRUE(parts) << parts.message();
  ASSERT_EQ(parts->layers.size(), 3u);
  const Tensor x = random_normal(DType::kBF16, {5, 128}, 3);
  const Tensor y = reference_output(fused.layer, x);
  int64_t col = 0;
  for (const char* leaf : {"q_proj", "k_proj", "v_proj"}) {  // the fused layer's shard order
    const LoadedLayer& p = *std::find_if(parts->layers.begin(), parts->layers.end(), [&](const LoadedLayer& l) {
      return l.layer.name == std::string("model.layers.0.self_attn.") + leaf;
    });
    // Static input scale: the fused layer uses the max over shards (vLLM); give each shard that scale too.
    LinearLayer shard = p.layer;
    shard.params["input_scale"] = Tensor::scalar_f32(*std::max_element(
        fused.layer.params.at("input_scale").data<float>(), fused.layer.params.at("input_scale").data<float>() + 3))
                                      .reshape({1})
                                      .value();
    const Tensor ys = reference_output(shard, x);
    for (int64_t i = 0; i < 5; ++i) {
      for (int64_t j = 0; j < shard.config.n; ++j) {
        ASSERT_EQ(ys.data<float>()[i * shard.config.n + j], y.data<float>()[i * 128 + col + j]) << p.layer.name;
      }
    }
    col += shard.config.n;
  }
}

TEST(Loader, ColumnParallelSlicesConcatenateToTheFullLayer) {
  for (const char* scheme : {"w8a8-fp8-channel", "w8a8-mxfp8", "w8a8-fp8-block", "w4a4-nvfp4", "w6a16-mxfp6-e3m2"}) {
    SCOPED_TRACE(scheme);
    TempDir dir;
    write_shards(dir.str(), *find_scheme(scheme), "model.layers.0.mlp.", {"gate_proj", "up_proj"}, {256, 256}, 256);
    auto full = load_checkpoint(dir.str());
    ASSERT_TRUE(full) << full.message();
    const Tensor x = random_normal(DType::kBF16, {3, 256}, 4);
    const Tensor y = reference_output(full->layers[0].layer, x);
    for (int rank = 0; rank < 2; ++rank) {
      LoadOptions o;
      o.tp_rank = rank;
      o.tp_size = 2;
      auto part = load_checkpoint(dir.str(), o);
      ASSERT_TRUE(part) << part.message();
      const LinearLayer& l = part->layers[0].layer;
      EXPECT_EQ(l.config.n, 256);
      EXPECT_EQ(l.config.logical_widths, (std::vector<int64_t>{128, 128}));
      const Tensor yp = reference_output(l, x);
      // Rank r holds rows [128r, 128r+128) of gate and of up.
      for (int64_t i = 0; i < 3; ++i) {
        for (int64_t j = 0; j < 256; ++j) {
          const int64_t full_col = (j < 128 ? 0 : 256) + rank * 128 + j % 128;
          ASSERT_EQ(yp.data<float>()[i * 256 + j], y.data<float>()[i * 512 + full_col]);
        }
      }
    }
  }
}

TEST(Loader, RowParallelPartialsSumToTheFullLayerWithBiasOnce) {
  for (const char* scheme : {"w8a16-fp8", "w8a16-mxfp8", "w4a16-mxfp4", "w8a8-fp8-block"}) {
    SCOPED_TRACE(scheme);
    TempDir dir;
    const Scheme& s = *find_scheme(scheme);
    LinearLayer layer = quantize_layer("model.layers.0.mlp.down_proj", s, random_normal(DType::kF32, {64, 512}, 5, 0.1))
                            .value();
    const Tensor bias = random_normal(DType::kF32, {64}, 6, 1.0);
    ASSERT_TRUE(write_quantized_checkpoint(dir.str(), s, {{"model.layers.0.mlp.down_proj", &layer, bias}}, {}));
    auto full = load_checkpoint(dir.str());
    ASSERT_TRUE(full) << full.message();
    const Tensor x = random_normal(DType::kBF16, {2, 512}, 7);
    const Tensor y = reference_output(full->layers[0].layer, x, &full->layers[0].bias);
    std::vector<double> sum(2 * 64, 0.0);
    for (int rank = 0; rank < 2; ++rank) {
      LoadOptions o;
      o.tp_rank = rank;
      o.tp_size = 2;
      auto part = load_checkpoint(dir.str(), o);
      ASSERT_TRUE(part) << part.message();
      const LoadedLayer& l = part->layers[0];
      EXPECT_EQ(l.parallelism, Parallelism::kRow);
      EXPECT_EQ(l.layer.config.k, 256);
      EXPECT_EQ(l.bias.defined(), rank == 0);
      auto xs = x.narrow(1, rank * 256, 256).value().contiguous();
      const Tensor yp = reference_output(l.layer, xs, l.bias.defined() ? &l.bias : nullptr);
      for (int64_t i = 0; i < 2 * 64; ++i) sum[i] += yp.data<float>()[i];
    }
    for (int64_t i = 0; i < 2 * 64; ++i) {
      EXPECT_NEAR(sum[i], y.data<float>()[i], 1e-5 * (1 + std::fabs(y.data<float>()[i])));
    }
  }
}

TEST(Loader, KvHeadsAreReplicatedWhenRanksOutnumberThem) {
  TempDir dir;
  // 4 query heads and 2 KV heads of size 16; tp=4 gives each KV head to two ranks.
  const std::string config = R"({"num_attention_heads": 4, "num_key_value_heads": 2})";
  auto w = write_shards(dir.str(), *find_scheme("w8a8-fp8-channel"), "model.layers.0.self_attn.",
                        {"q_proj", "k_proj", "v_proj"}, {64, 32, 32}, 64, config);
  for (int rank = 0; rank < 4; ++rank) {
    LoadOptions o;
    o.tp_rank = rank;
    o.tp_size = 4;
    auto part = load_checkpoint(dir.str(), o);
    ASSERT_TRUE(part) << part.message();
    const LinearLayer& l = part->layers[0].layer;
    EXPECT_EQ(l.config.logical_widths, (std::vector<int64_t>{16, 16, 16}));
    // The k rows of this rank are KV head rank/2.
    const int8_t* got = static_cast<const int8_t*>(l.params.at("weight").raw()) + 16 * 64;
    auto full = load_checkpoint(dir.str()).value();
    const int8_t* want = static_cast<const int8_t*>(full.layers[0].layer.params.at("weight").raw()) +
                         (64 + (rank / 2) * 16) * 64;
    EXPECT_EQ(std::memcmp(got, want, 16 * 64), 0) << "rank " << rank;
  }
}

struct BadCase {
  const char* what;
  std::function<void(const std::string& dir)> make;  // writes a checkpoint, then breaks it
  LoadOptions options;
  const char* message;
};

void write_one(const std::string& dir, const char* scheme, int64_t n = 64, int64_t k = 256,
               const std::string& module = "model.layers.0.mlp.down_proj") {
  const Scheme& s = *find_scheme(scheme);
  LinearLayer layer = quantize_layer(module, s, random_normal(DType::kF32, {n, k}, 9, 0.1)).value();
  ASSERT_TRUE(write_quantized_checkpoint(dir, s, {{module, &layer, Tensor()}}, {}));
}

// Rewrites model.safetensors with `edit` applied to its tensor list.
void rewrite(const std::string& dir, const std::function<void(std::vector<std::pair<std::string, Tensor>>&)>& edit) {
  auto f = SafetensorsFile::open(dir + "/model.safetensors").value();
  std::vector<std::pair<std::string, Tensor>> tensors;
  for (const std::string& n : f.names()) tensors.emplace_back(n, f.tensor(n).value().clone());
  edit(tensors);
  ASSERT_TRUE(write_safetensors(dir + "/model.safetensors", tensors));
}

LoadOptions tp(int rank, int size) {
  LoadOptions o;
  o.tp_rank = rank;
  o.tp_size = size;
  return o;
}

TEST(Loader, BadCheckpointsAreRefusedWithReasons) {
  const std::vector<BadCase> cases = {
      {"no config.json", [](const std::string& d) { write_one(d, "w8a8-mxfp8"); fs::remove(d + "/config.json"); }, {},
       "is not a checkpoint: the directory has no config.json"},
      {"config without quantization_config",
       [](const std::string& d) { write_one(d, "w8a8-mxfp8"); std::ofstream(d + "/config.json") << "{}"; }, {},
       "quantization_config"},
      {"missing weight scale",
       [](const std::string& d) {
         write_one(d, "w8a8-fp8-channel");
         rewrite(d, [](auto& t) { std::erase_if(t, [](auto& p) { return p.first.ends_with("weight_scale"); }); });
       },
       {}, "no quantized linear layer found"},
      {"missing input scale of a static scheme",
       [](const std::string& d) {
         write_one(d, "w8a8-int8-static");
         rewrite(d, [](auto& t) { std::erase_if(t, [](auto& p) { return p.first.ends_with("input_scale"); }); });
       },
       {}, "input_scale"},
      {"weight of the wrong dtype",
       [](const std::string& d) {
         write_one(d, "w8a8-fp8-channel");
         rewrite(d, [](auto& t) {
           for (auto& p : t) {
             if (p.first.ends_with(".weight")) p.second = Tensor::zeros(DType::kI8, p.second.shape());
           }
         });
       },
       {}, "expected 2-D f8e4m3fn"},
      {"MX scales of the wrong shape",
       [](const std::string& d) {
         write_one(d, "w8a8-mxfp8");
         rewrite(d, [](auto& t) {
           for (auto& p : t) {
             if (p.first.ends_with("weight_scale")) p.second = Tensor::zeros(DType::kU8, {64, 7});
           }
         });
       },
       {}, "expected [64, 8]"},
      {"float MX scales",
       [](const std::string& d) {
         write_one(d, "w8a8-mxfp8");
         rewrite(d, [](auto& t) {
           for (auto& p : t) {
             if (p.first.ends_with("weight_scale")) p.second = Tensor::zeros(DType::kF32, {64, 8});
           }
         });
       },
       {}, "expected u8 scales"},
      {"rows that do not split over ranks", [](const std::string& d) { write_one(d, "w8a8-fp8-channel", 66, 256,
                                                                                  "model.layers.0.mlp.up_proj"); },
       tp(0, 4), "66 output features do not split evenly over tensor-parallel size 4"},
      {"MX blocks cut by row parallelism", [](const std::string& d) { write_one(d, "w8a8-mxfp8", 64, 192); },
       tp(1, 4), "not a multiple of the 1x32 scale block"},
      {"128-blocks cut by column parallelism",
       [](const std::string& d) { write_one(d, "w8a8-fp8-block", 256, 256, "model.layers.0.mlp.up_proj"); }, tp(1, 4),
       "slice of 64 of its 256 output rows starts at row 64, inside a 128-row block"},
      {"invalid layer regex", [](const std::string& d) { write_one(d, "w8a8-mxfp8"); },
       [] { LoadOptions o; o.layer_regex = "(["; return o; }(), "layer regex (--layers): regex \"([\" does not compile: missing ]"},
      {"regex that selects nothing", [](const std::string& d) { write_one(d, "w8a8-mxfp8"); },
       [] { LoadOptions o; o.layer_regex = "attn"; return o; }(), "no quantized linear layer matches --layers 'attn'"},
      {"rank beyond size", [](const std::string& d) { write_one(d, "w8a8-mxfp8"); }, tp(2, 2),
       "tensor-parallel rank 2 of size 2 is invalid"},
  };
  for (const BadCase& c : cases) {
    SCOPED_TRACE(c.what);
    TempDir dir;
    c.make(dir.str());
    auto r = load_checkpoint(dir.str(), c.options);
    ASSERT_FALSE(r) << "loaded";
    EXPECT_NE(r.message().find(c.message), std::string::npos) << r.message();
  }
  auto missing = load_checkpoint("/nonexistent/ckpt");
  EXPECT_NE(missing.message().find("no such file or directory"), std::string::npos);
}

}  // namespace
}  // namespace qlinear
