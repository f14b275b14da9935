// ScaleRowGrid: how a fused layer's 128x128 weight scales are laid out when shards keep their own block grids,
// and the family contract's check of that layout.
#include <gtest/gtest.h>

#include "qlinear/kernel.hpp"
#include "qlinear/make_layer.hpp"
#include "qlinear/random.hpp"

namespace qlinear {
namespace {

LinearConfig block_config(int64_t k, std::vector<int64_t> widths) {
  int64_t n = 0;
  for (const int64_t w : widths) n += w;
  LinearConfig c = make_config(*find_scheme("w8a8-fp8-block"), n, k);
  c.logical_widths = std::move(widths);
  return c;
}

TEST(ScaleRowGrid, SmolLm2QkvKeepsEachShardsGrid) {
  const ScaleRowGrid g = scale_row_grid(block_config(576, {576, 192, 192}));
  EXPECT_FALSE(g.uniform);
  EXPECT_EQ(g.block, 128);
  EXPECT_EQ(g.rows, 5 + 2 + 2);
  EXPECT_EQ(g.scale_row_begin, (std::vector<int64_t>{0, 5, 7}));
  const std::vector<std::pair<int64_t, int64_t>> rows = {{0, 0},   {127, 0}, {128, 1}, {575, 4}, {576, 5},
                                                         {703, 5}, {704, 6}, {767, 6}, {768, 7}, {959, 8}};
  for (const auto& [n, want] : rows) EXPECT_EQ(g.scale_row(n), want) << "row " << n;
  EXPECT_EQ(g.shard_of(767), 1);
  EXPECT_EQ(g.boundary_off(16), -1);
  EXPECT_EQ(g.boundary_off(128), 576);
  EXPECT_EQ(g.to_string(), "per-shard 128-row grids: 576->5, 192->2, 192->2 scale rows");
  EXPECT_NE(block_config(576, {576, 192, 192}).to_string().find("weight_scale=per-shard"), std::string::npos);
}

TEST(ScaleRowGrid, ShardsOnBlockBoundariesAreThePlainGrid) {
  // Qwen2.5-0.5B's q/k/v (896 | 128 | 128) and a last shard ending in a partial block.
  for (const auto& widths : {std::vector<int64_t>{896, 128, 128}, std::vector<int64_t>{256, 200}}) {
    const ScaleRowGrid g = scale_row_grid(block_config(896, widths));
    EXPECT_TRUE(g.uniform);
    int64_t n = 0;
    for (const int64_t w : widths) n += w;
    EXPECT_EQ(g.rows, (n + 127) / 128);
    for (int64_t r = 0; r < n; r += 37) EXPECT_EQ(g.scale_row(r), r / 128);
  }
  // Keys without row blocks: one scale row per output row.
  LinearConfig channel = make_config(*find_scheme("w8a8-fp8-channel"), 48, 64);
  channel.logical_widths = {16, 32};
  const ScaleRowGrid g = scale_row_grid(channel);
  EXPECT_EQ(g.block, 1);
  EXPECT_EQ(g.rows, 48);
  EXPECT_TRUE(g.uniform);
}

TEST(ScaleRowGrid, TheContractWantsEveryShardsRows) {
  MakeLayerOptions opt;
  opt.logical_widths = {144, 32, 32};
  auto layer = quantize_layer("qkv", *find_scheme("w8a8-fp8-block"), random_normal(DType::kF32, {208, 256}, 5, 0.1),
                              opt);
  ASSERT_TRUE(layer) << layer.message();
  EXPECT_EQ(layer->params.at("weight_scale").shape(), (Shape{4, 2}));
  EXPECT_TRUE(validate_layer_tensors(*layer)) << validate_layer_tensors(*layer).message();
  // One grid over the fused rows (2 scale rows) is not this layer's layout.
  layer->params["weight_scale"] = Tensor::zeros(DType::kF32, {2, 2});
  const Status s = validate_layer_tensors(*layer);
  EXPECT_FALSE(s);
  EXPECT_NE(s.message().find("expected [4, 2]"), std::string::npos) << s.message();
}

}  // namespace
}  // namespace qlinear
