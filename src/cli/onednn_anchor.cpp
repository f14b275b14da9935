#include "cli/onednn_anchor.hpp"

#if QLINEAR_WITH_ONEDNN
#include <algorithm>
#include <cstring>
#include <dnnl.hpp>
#include <unordered_map>
#include <vector>

#include "bench/timing.hpp"
#endif

namespace qlinear::cli {

#if !QLINEAR_WITH_ONEDNN
bool onednn_available() { return false; }
std::string onednn_version() { return ""; }
Result<AnchorTiming> time_onednn_matmul(bool, int64_t, int64_t, int64_t, int) {
  return Status::error("qlinear was built without oneDNN (install Debian's libdnnl-dev and reconfigure)");
}
#else
bool onednn_available() { return true; }
std::string onednn_version() {
  const dnnl_version_t* v = dnnl_version();
  return std::to_string(v->major) + "." + std::to_string(v->minor) + "." + std::to_string(v->patch);
}

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
    const int copies = bench::cold_copies_for(static_cast<int64_t>(wbytes));
    std::vector<memory> weights;
    for (int i = 0; i < copies; ++i) {
      memory w(pd.weights_desc(), eng);
      reorder(plain, w).execute(strm, plain, w);
      weights.push_back(w);
    }
    strm.wait();
    memory src(pd.src_desc(), eng), dst(pd.dst_desc(), eng);
    std::memset(src.get_data_handle(), 1, pd.src_desc().get_size());
    auto t = bench::time_host(
        [&](int i) {
          prim.execute(strm, {{DNNL_ARG_SRC, src}, {DNNL_ARG_WEIGHTS, weights[i % copies]}, {DNNL_ARG_DST, dst}});
          strm.wait();
          return Status::ok();
        },
        reps);
    if (!t) return t.status();
    const char* name = int8 ? "onednn_s8s8" : type == dt::bf16 ? "onednn_bf16" : "onednn_f32";
    return AnchorTiming{name, pd.impl_info_str(), *t, wbytes};
  } catch (const dnnl::error& e) {
    return Status::error(std::string("oneDNN matmul failed: ") + e.what());
  }
}
}  // namespace
#endif

}  // namespace qlinear::cli
