// processed_io::StateSchema: a state declared once exports its fields and tensors in declaration order,
// imports them back, refuses a checked field that differs from the plan (naming it) and a tensor of the
// wrong shape, and skips the tensors a layer does not have.
#include <gtest/gtest.h>

#include "core/processed_io.hpp"

namespace qlinear {
namespace {

struct ToyState {
  int64_t rows = 0;      // planned: checked on import
  bool flag = false;     // read back
  float scale = 1.0f;    // read back
  bool has_extra = false;
  Tensor w;              // f32 [rows]
  Tensor extra;          // i64 [2], only when has_extra
};

const processed_io::StateSchema<ToyState>& toy_schema() {
  using S = ToyState;
  static const processed_io::StateSchema<ToyState> schema{
      .i64_groups = {{"meta", {{"rows", [](const S& s) { return s.rows; }}}},
                     {"flags",
                      {{"flag", [](const S& s) -> int64_t { return s.flag ? 1 : 0; },
                        [](S& s, int64_t v) { s.flag = v != 0; }}}}},
      .f32_groups = {{"scalars", {{"scale", [](const S& s) { return s.scale; }, [](S& s, float v) { s.scale = v; }}}}},
      .tensors = {{"w", &S::w, [](const S&) { return DType::kF32; }, [](const S& s) { return Shape{s.rows}; }},
                  {"extra", &S::extra, [](const S&) { return DType::kI64; }, [](const S&) { return Shape{2}; },
                   [](const S& s) { return s.has_extra; }}},
  };
  return schema;
}

ToyState planned(int64_t rows, bool has_extra) {
  ToyState s;
  s.rows = rows;
  s.has_extra = has_extra;
  return s;
}

Result<Tensor> same(const Tensor& t) { return t; }

TEST(ProcessedIo, SchemaRoundTripsInDeclarationOrder) {
  for (const bool has_extra : {false, true}) {
    ToyState st = planned(3, has_extra);
    st.flag = true;
    st.scale = 0.25f;
    st.w = Tensor::zeros(DType::kF32, {3});
    st.w.data<float>()[1] = 7.0f;
    st.extra = Tensor::zeros(DType::kI64, {2});
    auto w = processed_io::export_state(toy_schema(), st, same);
    ASSERT_TRUE(w) << w.message();
    std::vector<std::string> names;
    for (const auto& [n, t] : w->tensors) names.push_back(n);
    std::vector<std::string> want = {"meta", "flags", "scalars", "w"};
    if (has_extra) want.push_back("extra");
    EXPECT_EQ(names, want);

    ToyState back = planned(3, has_extra);
    ASSERT_TRUE(processed_io::import_state(toy_schema(), *w, back).is_ok());
    EXPECT_TRUE(back.flag);
    EXPECT_EQ(back.scale, 0.25f);
    EXPECT_EQ(back.w.data<float>()[1], 7.0f);
    EXPECT_EQ(back.extra.defined(), has_extra);
  }
}

TEST(ProcessedIo, SchemaRefusesWhatThePlanDoesNotImply) {
  ToyState st = planned(3, true);
  st.w = Tensor::zeros(DType::kF32, {3});
  st.extra = Tensor::zeros(DType::kI64, {2});
  auto w = processed_io::export_state(toy_schema(), st, same);
  ASSERT_TRUE(w) << w.message();
  ToyState other = planned(4, true);  // another layer: the checked field differs
  const Status s = processed_io::import_state(toy_schema(), *w, other);
  ASSERT_FALSE(s.is_ok());
  EXPECT_NE(s.message().find("processed field rows is 3, the layer implies 4"), std::string::npos) << s.message();

  ProcessedWeights bad = *w;
  for (auto& [n, t] : bad.tensors) {
    if (n == "extra") t = Tensor::zeros(DType::kI64, {3});
  }
  ToyState again = planned(3, true);
  const Status e = processed_io::import_state(toy_schema(), bad, again);
  ASSERT_FALSE(e.is_ok());
  EXPECT_NE(e.message().find("'extra'"), std::string::npos) << e.message();
}

}  // namespace
}  // namespace qlinear
