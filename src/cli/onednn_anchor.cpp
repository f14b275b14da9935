#include "cli/onednn_anchor.hpp"

#if QLINEAR_WITH_ONEDNN
#include <algorithm>
#include <chrono>
#include <cstring>
#include <dnnl.hpp>
#include <unordered_map>
#include <vector>
#endif

namespace qlinear::cli {

#if !QLINEAR_WITH_ONEDNN
bool onednn_available() { return false; }
Result<AnchorTiming> time_onednn_matmul(bool, int64_t, int64_t, int64_t, int) {
  return Status::error("qlinear was built without oneDNN (install Debian's libdnnl-dev and reconfigure)");
}
#else
bool onednn_available() { return true; }

namespace {
Result<AnchorTiming> time_matmul(dnnl::memory::data_type type, int64_t m, int64_t n, int64_t k, int reps);
}  // namespace

Result<AnchorTiming> time_onednn_matmul(bool int8, int64_t m, int64_t n, int64_t k, int reps) {
  using dt = dnnl::memory::data_type;
  if (int8) return time_matmul(dt::s8, m, n, k, reps);
  // bf16 matmul needs AVX-512 (avx512_core) in oneDNN 2.6; on AVX2 machines f32 is what a user gets.
  auto bf16 = time_matmul(dt::bf16, m, n, k, reps);
  return bf16 ? bf16 : time_matmul(dt::f32, m, n, k, reps);
}

namespace {
Result<AnchorTiming> time_matmul(dnnl::memory::data_type type, int64_t m, int64_t n, int64_t k, int reps) {
  using namespace dnnl;
  const bool int8 = type == memory::data_type::s8;
  using dt = memory::data_type;
  using tag = memory::format_tag;
  try {
    engine eng(engine::kind::cpu, 0);
    stream strm(eng);
    const dt src_dt = type, wei_dt = type;
    memory::desc src_md({m, k}, src_dt, tag::ab);
    memory::desc wei_plain_md({k, n}, wei_dt, tag::ba);  // the checkpoint's [N, K] row-major
    memory::desc wei_any_md({k, n}, wei_dt, tag::any);
    memory::desc dst_md({m, n}, dt::f32, tag::ab);
    primitive_attr attr;
    if (int8) attr.set_output_scales(1 << 1, std::vector<float>(static_cast<size_t>(n), 1e-3f));
    matmul::primitive_desc pd(matmul::desc(src_md, wei_any_md, dst_md), attr, eng);
    matmul prim(pd);
    memory plain(wei_plain_md, eng);
    std::memset(plain.get_data_handle(), 1, wei_plain_md.get_size());
    const double wbytes = static_cast<double>(wei_plain_md.get_size());
    const int copies = static_cast<int>(std::clamp((256.0 * (1 << 20)) / wbytes, 1.0, 64.0));
    std::vector<memory> weights;
    for (int i = 0; i < copies; ++i) {
      memory w(pd.weights_desc(), eng);
      reorder(plain, w).execute(strm, plain, w);
      weights.push_back(w);
    }
    strm.wait();
    memory src(pd.src_desc(), eng), dst(pd.dst_desc(), eng);
    std::memset(src.get_data_handle(), 1, pd.src_desc().get_size());
    auto run = [&](int i) {
      prim.execute(strm, {{DNNL_ARG_SRC, src}, {DNNL_ARG_WEIGHTS, weights[i % copies]}, {DNNL_ARG_DST, dst}});
      strm.wait();
    };
    run(0);
    std::vector<double> t;
    for (int i = 0; i < reps; ++i) {
      const auto t0 = std::chrono::steady_clock::now();
      run(i + 1);
      t.push_back(std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count());
    }
    std::sort(t.begin(), t.end());
    const char* name = int8 ? "onednn_s8s8" : type == dt::bf16 ? "onednn_bf16" : "onednn_f32";
    return AnchorTiming{name, pd.impl_info_str(), t[t.size() / 2], wbytes};
  } catch (const dnnl::error& e) {
    return Status::error(std::string("oneDNN matmul failed: ") + e.what());
  }
}
}  // namespace
#endif

}  // namespace qlinear::cli
