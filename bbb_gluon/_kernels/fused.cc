// Fused CPU kernels for Bayes by Backprop, loaded into MXNet 1.9.1 with mx.library.load.
//
// MXNet 1.9.1 runs most elementwise operators single-threaded and one pass at a time; a
// Bayes-by-Backprop step needs some twenty such passes over every weight. These kernels do
// the same arithmetic in four OpenMP loops: draw the noise, sample the weights, and compute
// the gradient (or the value) of the complexity cost by hand. bbb_gluon/_kernels/fused.py builds this
// file on first use and falls back to plain MXNet operators when it cannot.
//
// Ops (all float32; flat 1-D arrays of one length n unless said):
//   bbb_normal(like)                  -> eps       attrs seed, stream, counter, layer
//                                    (signs=1: +1/-1, one bit of the hash each)
//   bbb_sample(mu, rho, eps)         -> w         w = mu + softplus(rho) * eps
//   bbb_draw(mu, rho)                -> eps, w[, aux]   aux=1: sigma * eps, aux=2: sigma^2
//   bbb_grad(gw, w, eps, mu, rho[, g2][, guard]) -> gmu, grho   attrs kind, scale, prior
//                                    parameters, aux (see for_each_grad), guard (see
//                                    finite_bits)
//   bbb_cost(w, eps, mu, rho)        -> (1,)      complexity cost value, same attrs
//   bbb_finite(a, b, ...)             -> (1,)      0 if every element is finite, else NaN
//                                    (value=1: a[0] in place of 0; value=2: sum(a);
//                                    keep=k: the k inputs before the watch made
//                                    finite as bbb_keep_finite does; watch=1: the last
//                                    input += the output; both in place)
//   bbb_keep_finite(guard, g, ...)    -> (1,)      the g's non-finite entries (all where
//                                    the guard is not) set to 0, in place
//   bbb_draw_layers, bbb_update_layers: bbb_draw / bbb_update on every layer in one call,
//                                    their attributes also packed in one (`args`)
//   bbb_lrt_combine(mean, var, zeta) -> act(mean + sqrt(var + floor) * zeta), with backward
//                                    (square=1: its square too, a second output)
//   bbb_flip(x, s) -> x * s;  bbb_flipout_combine(mean, z, r) -> act(mean + z * r), with
//                                    backward; any shape, s and r compact: one per
//                                    (example, channel), see signs_shape (flip=1: a
//                                    fourth input s2 and a second output, out * s2)
#include <cmath>
#include <algorithm>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <omp.h>
#include <sys/syscall.h>
#include <unistd.h>
#include <string>
#include <type_traits>
#include <initializer_list>
#include <unordered_map>
#include <vector>

#include "dmlc/strtonum.h"
#include "mxnet/lib_api.h"
#include "common.h"

using mxnet::ext::MXContext;
using mxnet::ext::MXReturnValue;
using mxnet::ext::MXTensor;
using mxnet::ext::OpResource;
using mxnet::ext::MX_SUCCESS;
using mxnet::ext::MX_FAIL;
using Attrs = std::unordered_map<std::string, std::string>;

namespace {

// The per-element bodies (the optimisers' lambdas) are inlined into the loops that call
// them: GCC otherwise kept some as calls, per element, and those loops ran scalar.
#define BBB_INLINE __attribute__((always_inline))

// Arrays below this many elements are done by one thread: waking the others costs more
// than the loop, and where other programs hold the cores a woken thread may wait for a
// core while the rest wait for it (a small network's step then slowed several times).
constexpr int64_t kParallelMin = 1 << 15;
// As a num_threads clause, not an `if`: GCC applies an `if` to the simd construct too and
// then left some loops scalar.
inline int threads_for(int64_t n) { return n >= kParallelMin ? omp_get_max_threads() : 1; }

double attr_d(const Attrs& a, const char* k, double dflt) {
  auto it = a.find(k);
  return it == a.end() ? dflt : std::strtod(it->second.c_str(), nullptr);
}
// The optimiser's numbers parsed as MXNet parses them: dmlc::stof for an operator's float
// fields (adam_update, multi_sgd_update's rescale_grad), strtof for the entries of
// multi_sgd_update's lrs/wds tuples; so the floats, and the updates, are the same.
float attr_stof(const Attrs& a, const char* k, float dflt) {
  auto it = a.find(k);
  return it == a.end() ? dflt : dmlc::stof(it->second);
}
float attr_strtof(const Attrs& a, const char* k, float dflt) {
  auto it = a.find(k);
  return it == a.end() ? dflt : std::strtof(it->second.c_str(), nullptr);
}
uint64_t attr_u(const Attrs& a, const char* k) {
  auto it = a.find(k);
  return it == a.end() ? 0 : std::strtoull(it->second.c_str(), nullptr, 10);
}

enum Kind { kNone = 0, kMixture = 1, kGaussianMC = 2, kGaussianKL = 3, kLaplace = 4 };

struct Prior {
  int kind;
  double scale;    // gradient scale of the complexity cost (pi_i / batch size)
  double pi, s1, s2, sp, b;  // b: the Laplace prior's scale
  // scale mixture: log(e^a + e^b) = a + softplus(c - k w^2)
  float inv_s1sq, k, c, sigmoid_coef;
  explicit Prior(const Attrs& a) {
    kind = static_cast<int>(attr_d(a, "kind", 0));
    scale = attr_d(a, "scale", 0.0);
    pi = attr_d(a, "pi", 0.5);
    s1 = attr_d(a, "sigma1", 1.0);
    s2 = attr_d(a, "sigma2", std::exp(-6.0));
    sp = attr_d(a, "sigma", 1.0);
    b = attr_d(a, "b", 1.0);
    inv_s1sq = static_cast<float>(1.0 / (s1 * s1));
    k = static_cast<float>(0.5 / (s2 * s2) - 0.5 / (s1 * s1));
    c = static_cast<float>(std::log1p(-pi) - std::log(pi) + std::log(s1 / s2));
    sigmoid_coef = 2.f * k;
  }
};

// A step's guard: with attribute guard=1, bbb_grad and bbb_update take one more input, a
// single float (the step's summed likelihood cost), and change nothing when it is NaN or
// infinite: a batch with a NaN never reaches mu and rho. Tested on the bits, since
// -ffast-math lets the compiler assume std::isfinite is always true.
inline bool finite_bits(float x) {
  uint32_t b;
  std::memcpy(&b, &x, sizeof b);
  return (b & 0x7f800000u) != 0x7f800000u;
}

inline int guarded(const Attrs& a) { return attr_u(a, "guard") != 0 ? 1 : 0; }

// False when the step is guarded and its guard (the last input) is not finite.
inline bool guard_passes(const Attrs& a, std::vector<MXTensor>* inputs) {
  return !guarded(a) || finite_bits(inputs->back().data<float>()[0]);
}

MXReturnValue parse_n(const Attrs& attrs, int* num_in, int* num_out, int in, int out) {
  *num_in = in;
  *num_out = out;
  return MX_SUCCESS;
}

MXReturnValue all_float32(const Attrs&, std::vector<int>* in_types, std::vector<int>* out_types) {
  for (int t : *in_types)
    if (t != mxnet::ext::kFloat32) return MX_FAIL;
  for (auto& t : *out_types) t = mxnet::ext::kFloat32;
  return MX_SUCCESS;
}

MXReturnValue same_shape(const Attrs&, std::vector<std::vector<unsigned int>>* in_shapes,
                         std::vector<std::vector<unsigned int>>* out_shapes) {
  for (auto& s : *out_shapes) s = (*in_shapes)[0];
  return MX_SUCCESS;
}

// bbb_flip and bbb_flipout_combine: the signs (the last input) without their trailing 1s
// are the leading axes of the full array (the first input), so that each sign covers
// consecutive elements of it (Dense, NCHW); bbb_flipout_combine's z has mean's shape.
MXReturnValue signs_shape(const Attrs&, std::vector<std::vector<unsigned int>>* in_shapes,
                          std::vector<std::vector<unsigned int>>* out_shapes) {
  const auto& full = in_shapes->front();
  const auto& signs = in_shapes->back();
  if (in_shapes->size() == 3 && (*in_shapes)[1] != full) return MX_FAIL;
  size_t axes = signs.size();
  while (axes > 1 && signs[axes - 1] == 1) --axes;
  if (axes > full.size() || !std::equal(signs.begin(), signs.begin() + axes, full.begin()))
    return MX_FAIL;
  (*out_shapes)[0] = full;
  return MX_SUCCESS;
}

MXReturnValue three_shape(const Attrs&, std::vector<std::vector<unsigned int>>*,
                          std::vector<std::vector<unsigned int>>* out_shapes) {
  (*out_shapes)[0] = {3};
  return MX_SUCCESS;
}

MXReturnValue scalar_shape(const Attrs&, std::vector<std::vector<unsigned int>>* in_shapes,
                           std::vector<std::vector<unsigned int>>* out_shapes) {
  for (auto& s : *out_shapes) s = {1};
  return MX_SUCCESS;
}

// ---- bbb_normal: N(0, 1) by Box-Muller from a counter-based hash -------------------
MXReturnValue normal_forward(const Attrs& attrs, std::vector<MXTensor>* inputs,
                             std::vector<MXTensor>* outputs, const OpResource&) {
  float* eps = (*outputs)[0].data<float>();
  const int64_t n = (*outputs)[0].size();
  const uint64_t key = mix64(mix64(mix64(mix64(attr_u(attrs, "seed")) ^ attr_u(attrs, "stream")) ^
                                   attr_u(attrs, "counter")) ^ attr_u(attrs, "layer"));
  if (attr_u(attrs, "signs") != 0) {
    // Flipout's random signs, +1/-1 evenly: the 64 bits of one hash give 64 of them (a
    // normal draw per sign, as before, needs a hash, a log, a root and a cosine per pair).
    const int64_t blocks = (n + 63) / 64;
#pragma omp parallel for schedule(static) num_threads(threads_for(n))
    for (int64_t b = 0; b < blocks; ++b) {
      const uint64_t h = mix64(key + static_cast<uint64_t>(b));
      const int64_t end = std::min<int64_t>(64, n - 64 * b);
#pragma omp simd
      for (int64_t k = 0; k < end; ++k) eps[64 * b + k] = (h >> k) & 1ULL ? 1.f : -1.f;
    }
    return MX_SUCCESS;
  }
  // Pair j fills eps[j] and eps[j + half]: contiguous stores, so the loop vectorises.
  const int64_t half = n / 2;
#pragma omp parallel for simd schedule(static) num_threads(threads_for(n))
  for (int64_t j = 0; j < half; ++j)
    normal_pair(mix64(key + static_cast<uint64_t>(j)), &eps[j], &eps[j + half]);
  if (n % 2) {
    float unused;
    normal_pair(mix64(key + static_cast<uint64_t>(half)), &eps[n - 1], &unused);
  }
  return MX_SUCCESS;
}

// ---- bbb_lrt: act(mean + std * eps), eps as bbb_normal draws it for the same key -------
// The local reparameterisation of the predictive's first layer in one pass: the same
// numbers as bbb_normal followed by MXNet's std * eps + mean (and relu where relu=1).
MXReturnValue lrt_forward(const Attrs& attrs, std::vector<MXTensor>* inputs,
                          std::vector<MXTensor>* outputs, const OpResource& res) {
  const float* mean = (*inputs)[0].data<float>();
  const float* sd = (*inputs)[1].data<float>();
  float* out = (*outputs)[0].data<float>();
  const int64_t n = (*outputs)[0].size();
  const bool relu = attr_u(attrs, "relu") != 0;
  // The noise first, exactly as bbb_normal writes it (the same loop), then the affine map.
  std::vector<MXTensor> eps_only{(*outputs)[0]};
  if (normal_forward(attrs, inputs, &eps_only, res) != MX_SUCCESS) return MX_FAIL;
#pragma omp parallel for simd schedule(static) num_threads(threads_for(n))
  for (int64_t i = 0; i < n; ++i) {
    float x = mean[i] + sd[i] * out[i];
    out[i] = relu ? fmaxf(x, 0.f) : x;
  }
  return MX_SUCCESS;
}

// ---- bbb_lrt_combine: the local reparameterisation's last step, for training ------------
// out = mean + sqrt(var + floor) * zeta, then relu where relu=1: one pass where MXNet's
// operators take five (add, sqrt, multiply, add, relu), each with its own backward pass.
// Backward: d mean = g * [out > 0], d var = g * [out > 0] * zeta / (2 sqrt(var + floor)),
// d zeta = g * [out > 0] * sqrt(var + floor); the mask recomputed from the inputs.
// square=1: a second output, out * out, the next layer's input to its variances' product
// under the same estimator (MXNet's square, its backward and the sum of the two gradients
// of out are three more passes); g above is then g_out + 2 out g_square.
inline bool with_square(const Attrs& a) { return attr_u(a, "square") != 0; }

MXReturnValue lrt_combine_forward(const Attrs& attrs, std::vector<MXTensor>* inputs,
                                  std::vector<MXTensor>* outputs, const OpResource&) {
  const float* mean = (*inputs)[0].data<float>();
  const float* var = (*inputs)[1].data<float>();
  const float* zeta = (*inputs)[2].data<float>();
  float* out = (*outputs)[0].data<float>();
  const int64_t n = (*outputs)[0].size();
  const float floor = attr_stof(attrs, "floor", 0.f);
  const bool relu = attr_u(attrs, "relu") != 0;
  if (with_square(attrs)) {
    float* sq = (*outputs)[1].data<float>();
#pragma omp parallel for simd schedule(static) num_threads(threads_for(n))
    for (int64_t i = 0; i < n; ++i) {
      const float x = mean[i] + std::sqrt(var[i] + floor) * zeta[i];
      const float y = relu ? std::fmax(x, 0.f) : x;
      out[i] = y;
      sq[i] = y * y;
    }
    return MX_SUCCESS;
  }
#pragma omp parallel for simd schedule(static) num_threads(threads_for(n))
  for (int64_t i = 0; i < n; ++i) {
    const float x = mean[i] + std::sqrt(var[i] + floor) * zeta[i];
    out[i] = relu ? std::fmax(x, 0.f) : x;
  }
  return MX_SUCCESS;
}

// Inputs: the outputs' gradients, then mean, var, zeta (MXNet's order for a library
// operator's backward: output gradients, inputs, outputs); outputs: their gradients.
MXReturnValue lrt_combine_backward(const Attrs& attrs, std::vector<MXTensor>* inputs,
                                   std::vector<MXTensor>* outputs, const OpResource&) {
  const int heads = with_square(attrs) ? 2 : 1;
  const float* g = (*inputs)[0].data<float>();
  const float* g_sq = heads == 2 ? (*inputs)[1].data<float>() : nullptr;
  const float* mean = (*inputs)[heads].data<float>();
  const float* var = (*inputs)[heads + 1].data<float>();
  const float* zeta = (*inputs)[heads + 2].data<float>();
  float* d_mean = (*outputs)[0].data<float>();
  float* d_var = (*outputs)[1].data<float>();
  float* d_zeta = (*outputs)[2].data<float>();
  const int64_t n = (*outputs)[0].size();
  const float floor = attr_stof(attrs, "floor", 0.f);
  const bool relu = attr_u(attrs, "relu") != 0;
#pragma omp parallel for simd schedule(static) num_threads(threads_for(n))
  for (int64_t i = 0; i < n; ++i) {
    const float sd = std::sqrt(var[i] + floor);
    const float x = mean[i] + sd * zeta[i];
    const float y = relu ? std::fmax(x, 0.f) : x;
    const float head = g_sq ? g[i] + 2.f * y * g_sq[i] : g[i];
    const float gi = relu && !(x > 0.f) ? 0.f : head;
    d_mean[i] = gi;
    d_var[i] = gi * zeta[i] * (0.5f / sd);
    d_zeta[i] = gi * sd;
  }
  return MX_SUCCESS;
}

// ---- bbb_flip, bbb_flipout_combine: Flipout's elementwise steps, for training ---------
// The signs come compact, one per (example, channel), and apply to `inner` consecutive
// elements of the full array (inner = n / number of signs: 1 for a Dense layer, H * W
// for an NCHW convolution; signs_shape checks the layout). MXNet's way, broadcast_to and
// then an elementwise operator, costs a copy and a pass each, and the broadcast operators'
// backward reduces on one thread. The forward is MXNet's arithmetic in MXNet's order; the
// signs' gradient (a sum per sign, reordered by the vectorised reduction) is computed
// although training never asks for it (the signs are constants): it costs one more read
// of x or z, and an operator that returned zeros there would be wrong for anyone else.
// Each loop has a flat variant for inner = 1, where a loop per sign would run one element.
// 0 where the full array's size is not a multiple of the signs' (the operator fails).
inline int64_t inner_of(const std::vector<MXTensor>& in, int full, int compact) {
  const int64_t n = in[full].size(), rows = in[compact].size();
  return rows > 0 && n % rows == 0 ? n / rows : 0;
}

// bbb_flip(x, s) = x * s. Backward: d x = g * s, d s = the sum of g * x over each sign's
// elements.
MXReturnValue flip_forward(const Attrs&, std::vector<MXTensor>* inputs,
                           std::vector<MXTensor>* outputs, const OpResource&) {
  const float* x = (*inputs)[0].data<float>();
  const float* s = (*inputs)[1].data<float>();
  float* out = (*outputs)[0].data<float>();
  const int64_t rows = (*inputs)[1].size(), inner = inner_of(*inputs, 0, 1);
  if (inner == 0) return MX_FAIL;
  if (inner == 1) {
#pragma omp parallel for simd schedule(static) num_threads(threads_for(rows))
    for (int64_t i = 0; i < rows; ++i) out[i] = x[i] * s[i];
    return MX_SUCCESS;
  }
#pragma omp parallel for schedule(static) num_threads(threads_for(rows * inner))
  for (int64_t j = 0; j < rows; ++j) {
    const float sj = s[j];
#pragma omp simd
    for (int64_t k = j * inner; k < (j + 1) * inner; ++k) out[k] = x[k] * sj;
  }
  return MX_SUCCESS;
}

// Inputs: the output's gradient, x, s; outputs: d x, d s.
MXReturnValue flip_backward(const Attrs&, std::vector<MXTensor>* inputs,
                            std::vector<MXTensor>* outputs, const OpResource&) {
  const float* g = (*inputs)[0].data<float>();
  const float* x = (*inputs)[1].data<float>();
  const float* s = (*inputs)[2].data<float>();
  float* d_x = (*outputs)[0].data<float>();
  float* d_s = (*outputs)[1].data<float>();
  const int64_t rows = (*inputs)[2].size(), inner = inner_of(*inputs, 1, 2);
  if (inner == 0) return MX_FAIL;
  if (inner == 1) {
#pragma omp parallel for simd schedule(static) num_threads(threads_for(rows))
    for (int64_t i = 0; i < rows; ++i) {
      d_x[i] = g[i] * s[i];
      d_s[i] = g[i] * x[i];
    }
    return MX_SUCCESS;
  }
#pragma omp parallel for schedule(static) num_threads(threads_for(rows * inner))
  for (int64_t j = 0; j < rows; ++j) {
    const float sj = s[j];
    float acc = 0.f;
#pragma omp simd reduction(+ : acc)
    for (int64_t k = j * inner; k < (j + 1) * inner; ++k) {
      d_x[k] = g[k] * sj;
      acc += g[k] * x[k];
    }
    d_s[j] = acc;
  }
  return MX_SUCCESS;
}

// bbb_flipout_combine(mean, z, r) = mean + z * r, then relu where relu=1: Flipout's
// output side in one pass where MXNet's operators take three (multiply, add, relu).
// Backward: d mean = g * [out > 0], d z = g * [out > 0] * r, d r = the sum of
// g * [out > 0] * z over each sign's elements; the mask recomputed from the inputs.
// flip=1: a fourth input s2, signs of r's shape, and a second output out * s2: the next
// layer's bbb_flip under Flipout (which with its backward and the sum of the two gradients
// of out are three more passes); g above is then g_out + g_flipped * s2, and d s2 the sum
// of g_flipped * out over each sign's elements, as bbb_flip's backward gives them.
inline bool with_flip(const Attrs& a) { return attr_u(a, "flip") != 0; }

MXReturnValue flipout_combine_forward(const Attrs& attrs, std::vector<MXTensor>* inputs,
                                      std::vector<MXTensor>* outputs, const OpResource&) {
  const float* mean = (*inputs)[0].data<float>();
  const float* z = (*inputs)[1].data<float>();
  const float* r = (*inputs)[2].data<float>();
  const float* s2 = with_flip(attrs) ? (*inputs)[3].data<float>() : nullptr;
  float* out = (*outputs)[0].data<float>();
  float* flipped = s2 ? (*outputs)[1].data<float>() : nullptr;
  const int64_t rows = (*inputs)[2].size(), inner = inner_of(*inputs, 0, 2);
  if (inner == 0) return MX_FAIL;
  const bool relu = attr_u(attrs, "relu") != 0;
  if (inner == 1) {
#pragma omp parallel for simd schedule(static) num_threads(threads_for(rows))
    for (int64_t i = 0; i < rows; ++i) {
      const float x = mean[i] + z[i] * r[i];
      out[i] = relu ? std::fmax(x, 0.f) : x;
      if (s2) flipped[i] = out[i] * s2[i];
    }
    return MX_SUCCESS;
  }
#pragma omp parallel for schedule(static) num_threads(threads_for(rows * inner))
  for (int64_t j = 0; j < rows; ++j) {
    const float rj = r[j];
    const float sj = s2 ? s2[j] : 0.f;
#pragma omp simd
    for (int64_t k = j * inner; k < (j + 1) * inner; ++k) {
      const float x = mean[k] + z[k] * rj;
      out[k] = relu ? std::fmax(x, 0.f) : x;
      if (s2) flipped[k] = out[k] * sj;
    }
  }
  return MX_SUCCESS;
}

// Inputs: the outputs' gradients, mean, z, r (and s2); outputs: d mean, d z, d r (, d s2).
MXReturnValue flipout_combine_backward(const Attrs& attrs, std::vector<MXTensor>* inputs,
                                       std::vector<MXTensor>* outputs, const OpResource&) {
  const int heads = with_flip(attrs) ? 2 : 1;
  const float* g = (*inputs)[0].data<float>();
  const float* g2 = heads == 2 ? (*inputs)[1].data<float>() : nullptr;
  const float* mean = (*inputs)[heads].data<float>();
  const float* z = (*inputs)[heads + 1].data<float>();
  const float* r = (*inputs)[heads + 2].data<float>();
  const float* s2 = g2 ? (*inputs)[heads + 3].data<float>() : nullptr;
  float* d_mean = (*outputs)[0].data<float>();
  float* d_z = (*outputs)[1].data<float>();
  float* d_r = (*outputs)[2].data<float>();
  float* d_s2 = g2 ? (*outputs)[3].data<float>() : nullptr;
  const int64_t rows = (*inputs)[heads + 2].size(), inner = inner_of(*inputs, heads, heads + 2);
  if (inner == 0) return MX_FAIL;
  const bool relu = attr_u(attrs, "relu") != 0;
  if (inner == 1) {
#pragma omp parallel for simd schedule(static) num_threads(threads_for(rows))
    for (int64_t i = 0; i < rows; ++i) {
      const float x = mean[i] + z[i] * r[i];
      const float head = g2 ? g[i] + g2[i] * s2[i] : g[i];
      const float gi = relu && !(x > 0.f) ? 0.f : head;
      d_mean[i] = gi;
      d_z[i] = gi * r[i];
      d_r[i] = gi * z[i];
      if (g2) d_s2[i] = g2[i] * (relu ? std::fmax(x, 0.f) : x);
    }
    return MX_SUCCESS;
  }
#pragma omp parallel for schedule(static) num_threads(threads_for(rows * inner))
  for (int64_t j = 0; j < rows; ++j) {
    const float rj = r[j];
    const float sj = g2 ? s2[j] : 0.f;
    float acc = 0.f, acc_s = 0.f;
#pragma omp simd reduction(+ : acc, acc_s)
    for (int64_t k = j * inner; k < (j + 1) * inner; ++k) {
      const float x = mean[k] + z[k] * rj;
      const float head = g2 ? g[k] + g2[k] * sj : g[k];
      const float gk = relu && !(x > 0.f) ? 0.f : head;
      d_mean[k] = gk;
      d_z[k] = gk * rj;
      acc += gk * z[k];
      if (g2) acc_s += g2[k] * (relu ? std::fmax(x, 0.f) : x);
    }
    d_r[j] = acc;
    if (g2) d_s2[j] = acc_s;
  }
  return MX_SUCCESS;
}

// bbb_flipout_combine's shapes: signs_shape's on (mean, z, r), and s2 of r's shape.
MXReturnValue flipout_combine_shape(const Attrs& a,
                                    std::vector<std::vector<unsigned int>>* in_shapes,
                                    std::vector<std::vector<unsigned int>>* out_shapes) {
  if (in_shapes->size() == 4 && (*in_shapes)[3] != (*in_shapes)[2]) return MX_FAIL;
  std::vector<std::vector<unsigned int>> three(in_shapes->begin(), in_shapes->begin() + 3);
  std::vector<std::vector<unsigned int>> one(1);
  if (signs_shape(a, &three, &one) != MX_SUCCESS) return MX_FAIL;
  for (auto& s : *out_shapes) s = one[0];
  return MX_SUCCESS;
}

// ---- bbb_sample: w = mu + softplus(rho) * eps ----------------------------------------
MXReturnValue sample_forward(const Attrs&, std::vector<MXTensor>* inputs,
                             std::vector<MXTensor>* outputs, const OpResource&) {
  const float* mu = (*inputs)[0].data<float>();
  const float* rho = (*inputs)[1].data<float>();
  const float* eps = (*inputs)[2].data<float>();
  float* w = (*outputs)[0].data<float>();
  const int64_t n = (*outputs)[0].size();
#pragma omp parallel for simd schedule(static) num_threads(threads_for(n))
  for (int64_t i = 0; i < n; ++i) w[i] = mu[i] + softplus(rho[i]) * eps[i];
  return MX_SUCCESS;
}

// ---- bbb_draw: (eps, w) in one call: bbb_normal's numbers, then bbb_sample on them ----
// With aux=1 a third output, Flipout's perturbation sigma * eps; with aux=2, the local
// reparameterisation's variance sigma^2.
MXReturnValue draw_forward(const Attrs& attrs, std::vector<MXTensor>* inputs,
                           std::vector<MXTensor>* outputs, const OpResource& res) {
  const float* mu = (*inputs)[0].data<float>();
  const float* rho = (*inputs)[1].data<float>();
  std::vector<MXTensor> eps_only{(*outputs)[0]};
  if (normal_forward(attrs, inputs, &eps_only, res) != MX_SUCCESS) return MX_FAIL;
  const float* eps = (*outputs)[0].data<float>();
  float* w = (*outputs)[1].data<float>();
  const int64_t n = (*outputs)[1].size();
  const int aux = static_cast<int>(attr_u(attrs, "aux"));
  if (aux == 0) {
#pragma omp parallel for simd schedule(static) num_threads(threads_for(n))
    for (int64_t i = 0; i < n; ++i) w[i] = mu[i] + softplus(rho[i]) * eps[i];
    return MX_SUCCESS;
  }
  float* a = (*outputs)[2].data<float>();
#pragma omp parallel for simd schedule(static) num_threads(threads_for(n))
  for (int64_t i = 0; i < n; ++i) {
    const float s = softplus(rho[i]);
    w[i] = mu[i] + s * eps[i];
    a[i] = aux == 1 ? s * eps[i] : s * s;
  }
  return MX_SUCCESS;
}

// ---- the complexity cost's value inside the update's loop (bbb_update's cost=1) ---------
// README's call asks for the cost's value at every step; a pass of its own (bbb_cost) reads
// w, eps and rho again and takes a log per element. Here each loop that already reads them
// for the gradient adds the cost's terms too, in float32 (vectorised), summed in double.
// Element i's cost is cost_term + cost_constant: the constant is added once per layer (n
// times, in double), so that the float terms stay small.
//   scale mixture:     log q - log P = -log s - e^2/2 + w^2 / (2 s1^2) - softplus(c - k w^2)
//                                      + log s1 - log pi        (c, k as in Prior)
//   Gaussian, MC:      -log s - e^2/2 + w^2 / (2 sp^2) + log sp
//   Gaussian, KL:      -log s + (s^2 + mu^2) / (2 sp^2) + log sp - 1/2
//   Laplace:           -log s - e^2/2 + |w| / b + log 2b - log sqrt(2 pi)
// bbb_cost runs the same terms as a pass of its own; the tests hold both to float64 NumPy.
struct CostCoef {
  float half_inv_var, k, c;  // 1 / (2 s1^2) (mixture) or 1 / (2 sp^2) (Gaussian)
  float inv_b;               // 1 / b (Laplace)
  explicit CostCoef(const Prior& p)
      : half_inv_var(static_cast<float>(p.kind == kMixture ? 0.5 / (p.s1 * p.s1)
                                                           : 0.5 / (p.sp * p.sp))),
        k(p.k), c(p.c), inv_b(static_cast<float>(1.0 / p.b)) {}
};

inline double cost_constant(const Prior& p) {
  if (p.kind == kMixture) return std::log(p.s1) - std::log(p.pi);
  if (p.kind == kGaussianKL) return std::log(p.sp) - 0.5;
  // log q's -log sqrt(2 pi) cancels against the Gaussian densities' own, not here
  if (p.kind == kLaplace) return std::log(2.0 * p.b) - 0.5 * std::log(2.0 * M_PI);
  return std::log(p.sp);
}

template <int KIND>
BBB_INLINE inline float cost_term(const CostCoef& q, float w, float e, float m, float s) {
  if constexpr (KIND == kMixture) {
    return -logf(s) - 0.5f * e * e + q.half_inv_var * w * w - softplus(q.c - q.k * w * w);
  } else if constexpr (KIND == kGaussianMC) {
    return -logf(s) - 0.5f * e * e + q.half_inv_var * w * w;
  } else if constexpr (KIND == kGaussianKL) {
    return -logf(s) + q.half_inv_var * (s * s + m * m);
  } else if constexpr (KIND == kLaplace) {
    return -logf(s) - 0.5f * e * e + q.inv_b * fabsf(w);
  } else {
    return 0.f;
  }
}

constexpr int64_t kCostBlock = 1024;

// The loops' driver: body(i) does element i's work and returns its cost term, summed into
// *total where COST (a reduction in the same loop, so the arrays are read once).
template <bool COST, typename Body>
BBB_INLINE inline void each(int64_t n, double* total, Body body) {
  if constexpr (COST) {
    // By blocks of kCostBlock elements: the loop stores each element's term in a buffer
    // that stays in L1, a second loop sums it in float, the blocks are summed in double.
    // A reduction inside the loop itself (float or double) made GCC run the loop scalar,
    // with a call to expf/logf per element: 6x slower than without the cost.
    const int64_t blocks = (n + kCostBlock - 1) / kCostBlock;
    double acc = 0.0;
#pragma omp parallel for schedule(static) num_threads(threads_for(n)) reduction(+ : acc)
    for (int64_t b = 0; b < blocks; ++b) {
      float terms[kCostBlock];
      const int64_t start = b * kCostBlock, len = std::min(n - start, kCostBlock);
#pragma omp simd
      for (int64_t i = 0; i < len; ++i) terms[i] = body(start + i);
      float part = 0.f;
#pragma omp simd reduction(+ : part)
      for (int64_t i = 0; i < len; ++i) part += terms[i];
      acc += part;
    }
    *total += acc;
  } else {
#pragma omp parallel for simd schedule(static) num_threads(threads_for(n))
    for (int64_t i = 0; i < n; ++i) body(i);
  }
}

// The prior's term of the gradient with respect to w, scale * d(-log P)/dw, for the
// Monte-Carlo cost (the closed-form KL does not depend on w).
//   scale mixture: w * (scale / s1^2 + scale * 2k * sigmoid(c - k w^2))   (c, k as in Prior)
//   Gaussian:      scale * w / sp^2
//   Laplace:       scale * sign(w) / b   (0 at w = 0, as MXNet's abs)
struct PriorGrad {
  float ca, cb, k, c, cw, cl;
  explicit PriorGrad(const Prior& p)
      : ca(static_cast<float>(p.scale) * p.inv_s1sq),
        cb(static_cast<float>(p.scale) * p.sigmoid_coef), k(p.k), c(p.c),
        cw(static_cast<float>(p.scale / (p.sp * p.sp))), cl(static_cast<float>(p.scale / p.b)) {}
};

template <int KIND>
BBB_INLINE inline float prior_dw(const PriorGrad& g, float w) {
  if constexpr (KIND == kMixture) {
    return w * (g.ca + g.cb * sigmoid(g.c - g.k * w * w));
  } else if constexpr (KIND == kLaplace) {
    return g.cl * (static_cast<float>(w > 0.f) - static_cast<float>(w < 0.f));
  } else {
    return g.cw * w;
  }
}

template <int K>
using KindTag = std::integral_constant<int, K>;
template <bool B>
using CostTag = std::integral_constant<bool, B>;

// run(KindTag, CostTag) for a kind known at run time: one instantiation per (kind, cost).
template <typename Run>
MXReturnValue dispatch_kind(int kind, bool cost, Run run) {
  switch (kind) {
    case kNone:
      if (cost) return MX_FAIL;  // no prior, no cost
      run(KindTag<kNone>{}, CostTag<false>{});
      return MX_SUCCESS;
    case kMixture:
      cost ? run(KindTag<kMixture>{}, CostTag<true>{}) : run(KindTag<kMixture>{}, CostTag<false>{});
      return MX_SUCCESS;
    case kGaussianMC:
      cost ? run(KindTag<kGaussianMC>{}, CostTag<true>{})
           : run(KindTag<kGaussianMC>{}, CostTag<false>{});
      return MX_SUCCESS;
    case kGaussianKL:
      cost ? run(KindTag<kGaussianKL>{}, CostTag<true>{})
           : run(KindTag<kGaussianKL>{}, CostTag<false>{});
      return MX_SUCCESS;
    case kLaplace:
      cost ? run(KindTag<kLaplace>{}, CostTag<true>{}) : run(KindTag<kLaplace>{}, CostTag<false>{});
      return MX_SUCCESS;
    default:
      return MX_FAIL;
  }
}

// The cost's terms alone, where no gradient loop of the prior's kind runs (a skipped
// update, or a complexity weight of 0): a pass of its own.
MXReturnValue cost_pass(const Prior& p, const float* w, const float* eps, const float* mu,
                        const float* rho, int64_t n, double* total) {
  const CostCoef q(p);
  return dispatch_kind(p.kind == kNone ? -1 : p.kind, true, [&](auto K, auto) {
    each<true>(n, total, [=](int64_t i) BBB_INLINE -> float {
      return cost_term<decltype(K)::value>(q, w[i], eps[i], mu[i], softplus(rho[i]));
    });
  });
}

// ---- bbb_grad: gradients of  likelihood(w) + scale * complexity  w.r.t. mu and rho ----
// With h = dL/dw + scale * d(-log P)/dw (the whole gradient reaching w):
//   d/dmu = h,  d/drho = sigmoid(rho) * (eps * h - scale / sigma)    (Monte-Carlo cost)
// and for the closed-form Gaussian KL (which does not depend on w):
//   d/dmu = dL/dw + scale * mu / sp^2,
//   d/drho = sigmoid(rho) * (eps * dL/dw + scale * (sigma / sp^2 - 1 / sigma)).
// Calls emit(i, dmu, drho) for every element, with the gradients above; with a `total`,
// also adds the elements' cost terms to it (see cost_term).
//
// Under Flipout (aux=1) and the local reparameterisation (aux=2) the likelihood reaches
// mu and rho by two paths: gw is its gradient w.r.t. the mean weights and g2 w.r.t.
// Flipout's perturbation sigma * eps (d/drho: sigmoid(rho) * eps * g2) or the variance
// sigma^2 (d/drho: sigmoid(rho) * 2 sigma * g2); the complexity cost is taken at
// w = mu + sigma * eps as above.
// One loop per (aux, kind, cost), the branches resolved at compile time, so that each
// vectorises.
template <int AUX, int KIND, bool COST, typename Emit>
void grad_two_loop(const Prior& p, const float* gw, const float* g2, const float* w,
                   const float* eps, const float* mu, const float* rho, int64_t n, Emit emit,
                   double* total) {
  const float scale = static_cast<float>(p.scale);
  const PriorGrad pg(p);
  const float inv_sp2 = static_cast<float>(1.0 / (p.sp * p.sp));
  const CostCoef q(p);
  // mu[i] is read before emit, which may update it in place: the cost is the one before
  each<COST>(n, total, [=](int64_t i) BBB_INLINE -> float {
    const float r = rho[i], s = softplus(r), e = eps[i], m = mu[i];
    const float lik = AUX == 1 ? e * g2[i] : 2.f * s * g2[i];
    if constexpr (KIND == kNone) {
      emit(i, gw[i], sigmoid(r) * lik);
    } else if constexpr (KIND == kGaussianKL) {
      emit(i, gw[i] + scale * mu[i] * inv_sp2,
           sigmoid(r) * (lik + scale * (s * inv_sp2 - 1.f / s)));
    } else {
      const float hc = prior_dw<KIND>(pg, w[i]);
      emit(i, gw[i] + hc, sigmoid(r) * (lik + e * hc - scale / s));
    }
    return COST ? cost_term<KIND>(q, w[i], e, m, s) : 0.f;
  });
}

template <int KIND, bool COST, typename Emit>
void grad_loop(const Prior& p, const float* gw, const float* w, const float* eps,
               const float* mu, const float* rho, int64_t n, Emit emit, double* total) {
  const float scale = static_cast<float>(p.scale);
  const PriorGrad pg(p);
  const float inv_sp2 = static_cast<float>(1.0 / (p.sp * p.sp));
  const CostCoef q(p);
  each<COST>(n, total, [=](int64_t i) BBB_INLINE -> float {
    if constexpr (KIND == kNone) {
      emit(i, gw[i], gw[i] * eps[i] * sigmoid(rho[i]));
      return 0.f;
    } else if constexpr (KIND != kGaussianKL) {  // a Monte-Carlo cost: the prior at w
      float h = gw[i] + prior_dw<KIND>(pg, w[i]);
      float r = rho[i];
      emit(i, h, sigmoid(r) * (eps[i] * h - scale / softplus(r)));
      return COST ? cost_term<KIND>(q, w[i], eps[i], 0.f, softplus(r)) : 0.f;
    } else {  // mu[i] read before emit, which may update it in place
      float r = rho[i], s = softplus(r), m = mu[i];
      emit(i, gw[i] + scale * m * inv_sp2,
           sigmoid(r) * (eps[i] * gw[i] + scale * (s * inv_sp2 - 1.f / s)));
      return COST ? cost_term<KIND>(q, w[i], eps[i], m, s) : 0.f;
    }
  });
}

// for_each_grad's loops (aux 0, else grad_two_loop's with the second gradient g2), with
// the cost where `total` is given. A gradient without the prior's term (no prior, or a
// complexity weight of 0) runs the plain loop and, if the cost is asked, cost_pass.
template <typename Emit>
MXReturnValue for_each_grad_aux(const Prior& p, const float* gw, const float* g2, int aux,
                                const float* w, const float* eps, const float* mu,
                                const float* rho, int64_t n, Emit emit, double* total = nullptr) {
  if (aux < 0 || aux > 2) return MX_FAIL;
  // the plain loop's test as it always was: the scale as a float for aux 0, as a double else
  const bool plain =
      p.kind == kNone || (aux == 0 ? static_cast<float>(p.scale) == 0.f : p.scale == 0.0);
  if (plain && total != nullptr && cost_pass(p, w, eps, mu, rho, n, total) != MX_SUCCESS)
    return MX_FAIL;
  return dispatch_kind(plain ? kNone : p.kind, !plain && total != nullptr, [&](auto K, auto C) {
    constexpr int kind = decltype(K)::value;
    constexpr bool cost = decltype(C)::value;
    if (aux == 0) grad_loop<kind, cost>(p, gw, w, eps, mu, rho, n, emit, total);
    if (aux == 1) grad_two_loop<1, kind, cost>(p, gw, g2, w, eps, mu, rho, n, emit, total);
    if (aux == 2) grad_two_loop<2, kind, cost>(p, gw, g2, w, eps, mu, rho, n, emit, total);
  });
}

inline int aux_of(const Attrs& a) { return static_cast<int>(attr_u(a, "aux")); }
inline int has_aux(const Attrs& a) { return aux_of(a) != 0 ? 1 : 0; }

MXReturnValue grad_forward(const Attrs& attrs, std::vector<MXTensor>* inputs,
                           std::vector<MXTensor>* outputs, const OpResource&) {
  float* gmu = (*outputs)[0].data<float>();
  float* grho = (*outputs)[1].data<float>();
  if (!guard_passes(attrs, inputs)) {
    const int64_t n = (*outputs)[0].size();
    std::fill(gmu, gmu + n, 0.f);
    std::fill(grho, grho + n, 0.f);
    return MX_SUCCESS;
  }
  const int aux = aux_of(attrs);
  return for_each_grad_aux(Prior(attrs), (*inputs)[0].data<float>(),
                           aux ? (*inputs)[5].data<float>() : nullptr, aux,
                           (*inputs)[1].data<float>(), (*inputs)[2].data<float>(),
                           (*inputs)[3].data<float>(), (*inputs)[4].data<float>(),
                           (*outputs)[0].size(), [=](int64_t i, float dmu, float drho) BBB_INLINE {
                         gmu[i] = dmu;
                         grho[i] = drho;
                       });
}

// ---- bbb_update: bbb_grad and the optimiser's update in one pass ----------------------
// Inputs gw, w, eps, mu, rho (+ m_mu, v_mu, m_rho, v_rho for Adam, + g2 with aux, + the
// guard); mu, rho and the
// states are updated in place (declared as mutated inputs). The arithmetic is MXNet's
// sgd_update / adam_update (optimizer_op-inl.h) on the gradients bbb_grad computes:
//   g = clip(rescale * grad + wd * x)      (Adam; SGD clips rescale * grad)
//   SGD:  x = x + (-(lr * wd) * x - (lr * rescale) * grad)   (multi_sgd_update's order)
//   Adam: m = b1 m + (1 - b1) g;  v = b2 v + (1 - b2) g^2;  x -= lr m / (sqrt(v) + epsilon)
// with lr already bias-corrected for Adam. Output: one unused float.
struct Update {
  bool adam;
  float lr_mu, lr_rho, wd_mu, wd_rho, rescale, clip, b1, b2, epsilon, momentum;
  explicit Update(const Attrs& a) : adam(attr_u(a, "adam") != 0) {
    momentum = attr_stof(a, "momentum", 0.f);
    // adam_update: every field by dmlc::stof; multi_sgd_update: lrs and wds by strtof.
    auto per_weight = adam ? attr_stof : attr_strtof;
    lr_mu = per_weight(a, "lr_mu", 0.f);
    lr_rho = per_weight(a, "lr_rho", 0.f);
    wd_mu = per_weight(a, "wd_mu", 0.f);
    wd_rho = per_weight(a, "wd_rho", 0.f);
    rescale = attr_stof(a, "rescale", 1.f);
    clip = attr_stof(a, "clip", -1.f);
    b1 = attr_stof(a, "beta1", 0.9f);
    b2 = attr_stof(a, "beta2", 0.999f);
    epsilon = attr_stof(a, "epsilon", 1e-8f);
  }
};

inline float clip_to(float g, float c) { return c >= 0.f ? std::fmax(-c, std::fmin(g, c)) : g; }

// One layer's update; with `cost` (attribute cost=1), also adds the layer's complexity cost
// (its value before the update, as bbb_cost gives it) to *cost.
MXReturnValue update_layer(const Attrs& attrs, std::vector<MXTensor>* inputs, double* cost) {
  const Update u(attrs);
  float* mu = (*inputs)[3].data<float>();
  float* rho = (*inputs)[4].data<float>();
  const int64_t n = (*inputs)[3].size();
  const float* gw = (*inputs)[0].data<float>();
  const float* w = (*inputs)[1].data<float>();
  const float* eps = (*inputs)[2].data<float>();
  const Prior p(attrs);
  double terms = 0.0;
  double* total = cost != nullptr ? &terms : nullptr;
  // The layer's cost in double: its terms, and the constant once per element.
  auto add_cost = [&](MXReturnValue r) {
    if (r == MX_SUCCESS && cost != nullptr) *cost += terms + static_cast<double>(n) * cost_constant(p);
    return r;
  };
  if (!guard_passes(attrs, inputs)) {  // mu, rho and the states unchanged; the cost still asked
    return add_cost(cost != nullptr ? cost_pass(p, w, eps, mu, rho, n, total) : MX_SUCCESS);
  }
  const int aux = aux_of(attrs);
  const int states = static_cast<int>(inputs->size()) - guarded(attrs) - has_aux(attrs);
  const float* g2 = aux ? (*inputs)[states].data<float>() : nullptr;
  if (!u.adam) {
    // MXNet's multi_sgd_update / multi_sgd_mom_update (what Gluon's Trainer calls for
    // SGD), in their order: mom = momentum * mom - lr * wd * x - lr * rescale * grad;
    // x += mom. Without momentum there is no state and mom starts from 0.
    const bool has_mom = u.momentum > 0.f;
    if (has_mom && states != 7) return MX_FAIL;
    float* mom_mu = has_mom ? (*inputs)[5].data<float>() : nullptr;
    float* mom_rho = has_mom ? (*inputs)[6].data<float>() : nullptr;
    const float lwd_mu = u.lr_mu * u.wd_mu, lwd_rho = u.lr_rho * u.wd_rho, m = u.momentum;
    const float lrr_mu = u.lr_mu * u.rescale, lrr_rho = u.lr_rho * u.rescale;
    const bool clipped = u.clip >= 0.f;
    // Without momentum, one loop per case: a select inside the loop let the compiler
    // reorder the sum (measured: the Trainer's results no longer to the bit).
    if (!has_mom && !clipped) {
      return add_cost(for_each_grad_aux(p, gw, g2, aux, w, eps, mu, rho, n, [=](int64_t i, float dmu, float drho) BBB_INLINE {
        mu[i] = mu[i] + ((0.f - lwd_mu * mu[i]) - lrr_mu * dmu);
        rho[i] = rho[i] + ((0.f - lwd_rho * rho[i]) - lrr_rho * drho);
      }, total));
    }
    if (!has_mom) {
      return add_cost(for_each_grad_aux(p, gw, g2, aux, w, eps, mu, rho, n, [=](int64_t i, float dmu, float drho) BBB_INLINE {
        mu[i] = mu[i] + ((0.f - lwd_mu * mu[i]) - u.lr_mu * clip_to(u.rescale * dmu, u.clip));
        rho[i] = rho[i] + ((0.f - lwd_rho * rho[i]) -
                           u.lr_rho * clip_to(u.rescale * drho, u.clip));
      }, total));
    }
    // With momentum, again one loop per case: a conditional store inside left it scalar.
    if (!clipped) {
      return add_cost(for_each_grad_aux(p, gw, g2, aux, w, eps, mu, rho, n, [=](int64_t i, float dmu, float drho) BBB_INLINE {
        const float v_mu = (m * mom_mu[i] - lwd_mu * mu[i]) - lrr_mu * dmu;
        const float v_rho = (m * mom_rho[i] - lwd_rho * rho[i]) - lrr_rho * drho;
        mom_mu[i] = v_mu;
        mom_rho[i] = v_rho;
        mu[i] = mu[i] + v_mu;
        rho[i] = rho[i] + v_rho;
      }, total));
    }
    return add_cost(for_each_grad_aux(p, gw, g2, aux, w, eps, mu, rho, n, [=](int64_t i, float dmu, float drho) BBB_INLINE {
      const float v_mu =
          (m * mom_mu[i] - lwd_mu * mu[i]) - u.lr_mu * clip_to(u.rescale * dmu, u.clip);
      const float v_rho =
          (m * mom_rho[i] - lwd_rho * rho[i]) - u.lr_rho * clip_to(u.rescale * drho, u.clip);
      mom_mu[i] = v_mu;
      mom_rho[i] = v_rho;
      mu[i] = mu[i] + v_mu;
      rho[i] = rho[i] + v_rho;
    }, total));
  }
  if (states != 9) return MX_FAIL;
  float* m_mu = (*inputs)[5].data<float>();
  float* v_mu = (*inputs)[6].data<float>();
  float* m_rho = (*inputs)[7].data<float>();
  float* v_rho = (*inputs)[8].data<float>();
  return add_cost(for_each_grad_aux(p, gw, g2, aux, w, eps, mu, rho, n, [=](int64_t i, float dmu, float drho) BBB_INLINE {
    float g = clip_to(dmu * u.rescale + mu[i] * u.wd_mu, u.clip);
    float m = u.b1 * m_mu[i] + (1.f - u.b1) * g;
    float v = u.b2 * v_mu[i] + (1.f - u.b2) * g * g;
    m_mu[i] = m;
    v_mu[i] = v;
    mu[i] = mu[i] - u.lr_mu * m / (std::sqrt(v) + u.epsilon);
    g = clip_to(drho * u.rescale + rho[i] * u.wd_rho, u.clip);
    m = u.b1 * m_rho[i] + (1.f - u.b1) * g;
    v = u.b2 * v_rho[i] + (1.f - u.b2) * g * g;
    m_rho[i] = m;
    v_rho[i] = v;
    rho[i] = rho[i] - u.lr_rho * m / (std::sqrt(v) + u.epsilon);
  }, total));
}

MXReturnValue update_forward(const Attrs& attrs, std::vector<MXTensor>* inputs,
                             std::vector<MXTensor>* outputs, const OpResource&) {
  const bool want = attr_u(attrs, "cost") != 0;
  double cost = 0.0;
  const MXReturnValue r = update_layer(attrs, inputs, want ? &cost : nullptr);
  (*outputs)[0].data<float>()[0] = static_cast<float>(cost);
  return r;
}

// gw, w, eps, mu, rho and the optimiser's states (mutated: mu onwards), then the guard.
int update_inputs(const Attrs& a) {
  if (attr_u(a, "adam") != 0) return 9;
  return attr_stof(a, "momentum", 0.f) > 0.f ? 7 : 5;
}

MXReturnValue mutate_update(const Attrs& a, std::vector<int>* inputs) {
  const int last = update_inputs(a);
  for (int k = 3; k < last; ++k) inputs->push_back(k);
  return MX_SUCCESS;
}

MXReturnValue parse_update(const Attrs& a, int* i, int* o) {
  return parse_n(a, i, o, update_inputs(a) + has_aux(a) + guarded(a), 1);
}

// ---- `args`: many attributes in one ------------------------------------------------
// MXNet's extension interface hands an operator's attributes one by one to each callback of
// every call (its parse, types, shapes, mutated inputs, forward). The *_layers operators
// take some twenty, which cost more than their arithmetic on a small network: a call of
// bbb_update_layers on a 13-50-1 network's arrays took 151 µs with them apart and 115 µs
// packed (benchmarks/bench_launch.py, Intel Xeon). So they also take them packed into one,
// `args` = "key=value;key=value" (values without ';'), which the callbacks below unpack over
// the attributes given apart.
bool unpack(const Attrs& raw, Attrs* out) {
  *out = raw;
  const auto it = raw.find("args");
  if (it == raw.end()) return true;
  out->erase("args");
  const std::string& s = it->second;
  size_t start = 0;
  while (start < s.size()) {
    size_t end = s.find(';', start);
    if (end == std::string::npos) end = s.size();
    const size_t eq = s.find('=', start);
    if (eq == std::string::npos || eq >= end || eq == start) return false;
    (*out)[s.substr(start, eq - start)] = s.substr(eq + 1, end - eq - 1);
    start = end + 1;
  }
  return true;
}

// UNPACKED(f): callback f, given the attributes unpacked; a malformed `args` fails the call.
template <typename Callback>
struct Unpacked;
template <typename... Rest>
struct Unpacked<MXReturnValue (*)(const Attrs&, Rest...)> {
  template <MXReturnValue (*F)(const Attrs&, Rest...)>
  static MXReturnValue call(const Attrs& raw, Rest... rest) {
    Attrs a;
    if (!unpack(raw, &a)) return MX_FAIL;
    return F(a, rest...);
  }
};
#define UNPACKED(f) (Unpacked<decltype(&f)>::template call<&f>)

// ---- bbb_draw_layers, bbb_update_layers: bbb_draw and bbb_update on every layer at once ----
// On a small network a step's time goes to launching operators (each a round trip through
// MXNet's engine thread, longer still on a busy machine), not to their arithmetic. These
// two run the kernels above on each layer in turn, with each layer's own attributes, so
// their numbers are bbb_draw's and bbb_update's to the bit. Attribute `layers` is the
// number of layers L; per-layer attributes are comma-separated lists of L entries: `aux`
// (both), `lr_mu`, `lr_rho`, `wd_mu`, `wd_rho` (update); the others are shared. Layer k
// draws under key `layer` + k.
//   bbb_draw_layers(mu_0..mu_L-1, rho_0..rho_L-1) -> eps_0.., w_0.., then the aux output
//                                                  of each layer whose aux is not 0
//   bbb_update_layers(per layer: gw, w, eps, mu, rho, states.., g2 where aux; then the
//                     guard) -> (1,); with check=1 (see checks), the guard computed here
//                     -> (guard, cost)
std::vector<std::string> attr_list(const Attrs& a, const char* k) {
  std::vector<std::string> out;
  auto it = a.find(k);
  if (it == a.end()) return out;
  const std::string& s = it->second;
  size_t start = 0;
  while (true) {
    const size_t comma = s.find(',', start);
    out.push_back(s.substr(start, comma == std::string::npos ? std::string::npos : comma - start));
    if (comma == std::string::npos) return out;
    start = comma + 1;
  }
}

int num_layers(const Attrs& a) { return static_cast<int>(attr_u(a, "layers")); }

// Every layer's attributes: the shared ones, each list replaced by its k-th entry (the
// lists parsed once). Empty where a list present does not hold one entry per layer.
std::vector<Attrs> per_layer_attrs(const Attrs& a, std::initializer_list<const char*> lists) {
  const int L = num_layers(a);
  std::vector<Attrs> out(L, a);
  for (const char* name : lists) {
    if (a.find(name) == a.end()) continue;
    const auto values = attr_list(a, name);
    if (static_cast<int>(values.size()) != L) return {};
    for (int k = 0; k < L; ++k) out[k][name] = values[k];
  }
  return out;
}

std::vector<int> layer_aux(const Attrs& a) {
  std::vector<int> out;
  for (const auto& v : attr_list(a, "aux")) out.push_back(std::atoi(v.c_str()));
  out.resize(num_layers(a), 0);
  return out;
}

// A list attribute with other than one entry per layer is refused when the call is parsed.
bool lists_fit(const Attrs& a, std::initializer_list<const char*> lists) {
  return num_layers(a) >= 1 && !per_layer_attrs(a, lists).empty();
}

MXReturnValue parse_draw_layers(const Attrs& a, int* i, int* o) {
  const int L = num_layers(a);
  if (!lists_fit(a, {"aux"})) return MX_FAIL;
  int with_aux = 0;
  for (int x : layer_aux(a)) with_aux += x != 0;
  return parse_n(a, i, o, 2 * L, 2 * L + with_aux);
}

MXReturnValue shape_draw_layers(const Attrs& a, std::vector<std::vector<unsigned int>>* in,
                                std::vector<std::vector<unsigned int>>* out) {
  const int L = num_layers(a);
  const auto aux = layer_aux(a);
  int next = 2 * L;
  for (int k = 0; k < L; ++k) {
    (*out)[k] = (*out)[L + k] = (*in)[k];
    if (aux[k]) (*out)[next++] = (*in)[k];
  }
  return MX_SUCCESS;
}

MXReturnValue draw_layers_forward(const Attrs& attrs, std::vector<MXTensor>* inputs,
                                  std::vector<MXTensor>* outputs, const OpResource& res) {
  const int L = num_layers(attrs);
  const auto aux = layer_aux(attrs);
  const uint64_t first = attr_u(attrs, "layer");
  auto layers = per_layer_attrs(attrs, {"aux"});
  int next = 2 * L;
  for (int k = 0; k < L; ++k) {
    Attrs& la = layers[k];
    la["layer"] = std::to_string(first + k);
    std::vector<MXTensor> ins{(*inputs)[k], (*inputs)[L + k]};
    std::vector<MXTensor> outs{(*outputs)[k], (*outputs)[L + k]};
    if (aux[k]) outs.push_back((*outputs)[next++]);
    if (draw_forward(la, &ins, &outs, res) != MX_SUCCESS) return MX_FAIL;
  }
  return MX_SUCCESS;
}

// Inputs of layer k in bbb_update_layers: 5 + the optimiser's states + 1 where aux.
int layer_update_inputs(const Attrs& a, int aux) { return update_inputs(a) + (aux ? 1 : 0); }

constexpr std::initializer_list<const char*> kUpdateLists = {"aux", "lr_mu", "lr_rho", "wd_mu",
                                                               "wd_rho"};

// g's NaN and infinite entries set to 0; all of them where `ok` is false.
void keep_finite(float* g, int64_t n, bool ok) {
  if (!ok) {
    std::fill(g, g + n, 0.f);
    return;
  }
#pragma omp parallel for simd schedule(static) num_threads(threads_for(n))
  for (int64_t i = 0; i < n; ++i) g[i] = finite_bits(g[i]) ? g[i] : 0.f;
}

// check=1: the guard is computed here instead of taken as an input (bbb_finite's work in
// the same operator: on a small network each operator launched is a good part of a step).
// The inputs after the layers' are then the batch's costs, X and y, `keep` gradients and,
// with watch=1, the watch, in place of the guard; the outputs are the guard (the costs' sum,
// NaN where they, X, y or a layer's likelihood gradient hold a NaN or an infinity) and the
// complexity cost. The keep gradients and the watch are treated as bbb_finite treats them.
inline bool checks(const Attrs& a) { return attr_u(a, "check") != 0; }
inline int check_inputs(const Attrs& a) {
  return 3 + static_cast<int>(attr_u(a, "keep")) + (attr_u(a, "watch") != 0 ? 1 : 0);
}

int layers_inputs(const Attrs& a) {
  int n = 0;
  for (int x : layer_aux(a)) n += layer_update_inputs(a, x);
  return n;
}

MXReturnValue parse_update_layers(const Attrs& a, int* i, int* o) {
  if (!lists_fit(a, kUpdateLists)) return MX_FAIL;
  if (checks(a)) return parse_n(a, i, o, layers_inputs(a) + check_inputs(a), 2);
  return parse_n(a, i, o, layers_inputs(a) + guarded(a), 1);
}

MXReturnValue mutate_update_layers(const Attrs& a, std::vector<int>* inputs) {
  int offset = 0;
  for (int x : layer_aux(a)) {
    for (int k = 3; k < update_inputs(a); ++k) inputs->push_back(offset + k);
    offset += layer_update_inputs(a, x);
  }
  if (checks(a))  // the keep gradients and the watch, after the costs, X and y
    for (int k = offset + 3; k < offset + check_inputs(a); ++k) inputs->push_back(k);
  return MX_SUCCESS;
}

bool any_not_finite(MXTensor& t) {
  const float* x = t.data<float>();
  const int64_t n = t.size();
  int bad = 0;
#pragma omp parallel for reduction(| : bad) schedule(static) num_threads(threads_for(n))
  for (int64_t i = 0; i < n; ++i) bad |= finite_bits(x[i]) ? 0 : 1;
  return bad != 0;
}

MXReturnValue update_layers_forward(const Attrs& attrs, std::vector<MXTensor>* inputs,
                                    std::vector<MXTensor>* outputs, const OpResource& res) {
  const auto aux = layer_aux(attrs);
  const bool guard = guarded(attrs) != 0;
  const auto layers = per_layer_attrs(attrs, kUpdateLists);
  const bool want = attr_u(attrs, "cost") != 0;
  const bool check = checks(attrs);
  double cost = 0.0;  // summed over the layers in double, rounded to float once
  float guard_value = 0.f;
  if (check) {  // bbb_finite(costs, X, y, every likelihood gradient, value=2), first
    const int first = layers_inputs(attrs);
    bool bad = false;
    for (int k = first; k < first + 3; ++k) bad = bad || any_not_finite((*inputs)[k]);
    int offset = 0;
    for (int x : aux) {  // each layer's gw, and its g2 where it has one
      bad = bad || any_not_finite((*inputs)[offset]);
      const int n = layer_update_inputs(attrs, x);
      if (x) bad = bad || any_not_finite((*inputs)[offset + n - 1]);
      offset += n;
    }
    const float* c = (*inputs)[first].data<float>();
    double sum = 0.0;
    for (int64_t i = 0; i < (*inputs)[first].size(); ++i) sum += c[i];
    const uint32_t nan_bits = 0x7fc00000u;
    float nan;
    std::memcpy(&nan, &nan_bits, sizeof nan);
    guard_value = bad ? nan : static_cast<float>(sum);
    (*outputs)[0].data<float>()[0] = guard_value;
  }
  int offset = 0;
  for (int k = 0; k < static_cast<int>(aux.size()); ++k) {
    Attrs la = layers[k];
    const int n = layer_update_inputs(attrs, aux[k]);
    std::vector<MXTensor> ins(inputs->begin() + offset, inputs->begin() + offset + n);
    if (check) {
      la["guard"] = "1";
      ins.push_back((*outputs)[0]);  // the guard just computed
    } else if (guard) {
      ins.push_back(inputs->back());
    }
    if (update_layer(la, &ins, want ? &cost : nullptr) != MX_SUCCESS) return MX_FAIL;
    offset += n;
  }
  if (check) {
    const int keep = static_cast<int>(attr_u(attrs, "keep"));
    for (int k = offset + 3; k < offset + 3 + keep; ++k)
      keep_finite((*inputs)[k].data<float>(), (*inputs)[k].size(), finite_bits(guard_value));
    if (attr_u(attrs, "watch") != 0) inputs->back().data<float>()[0] += guard_value;
    (*outputs)[1].data<float>()[0] = static_cast<float>(cost);
    return MX_SUCCESS;
  }
  (*outputs)[0].data<float>()[0] = static_cast<float>(cost);
  return MX_SUCCESS;
}

// ---- bbb_cost: the complexity cost's value (log q - log P, or the closed-form KL) ------
// The loop of bbb_update's cost=1 (cost_term, float32 terms summed in double) as a pass of
// its own: for steps whose update is not fused (several devices, several samples, another
// optimiser) and for reports. The tests hold it to float64 NumPy, element by element.
MXReturnValue cost_forward(const Attrs& attrs, std::vector<MXTensor>* inputs,
                           std::vector<MXTensor>* outputs, const OpResource&) {
  const int64_t n = (*inputs)[0].size();
  const Prior p(attrs);
  double total = 0.0;
  if (p.kind == kNone) {  // no prior: no cost
    (*outputs)[0].data<float>()[0] = 0.f;
    return MX_SUCCESS;
  }
  if (cost_pass(p, (*inputs)[0].data<float>(), (*inputs)[1].data<float>(),
                (*inputs)[2].data<float>(), (*inputs)[3].data<float>(), n, &total) != MX_SUCCESS)
    return MX_FAIL;
  (*outputs)[0].data<float>()[0] = static_cast<float>(total + static_cast<double>(n) * cost_constant(p));
  return MX_SUCCESS;
}

// ---- bbb_finite: 0 when every element of every input is finite, else NaN -------------
// One pass over a step's inputs and gradients, for its guard (see finite_bits): one
// operator instead of a reduction per array, no host read.
MXReturnValue finite_forward(const Attrs& attrs, std::vector<MXTensor>* inputs,
                             std::vector<MXTensor>* outputs, const OpResource&) {
  // keep=k: the k inputs before the watch are not checked but made finite, as
  // bbb_keep_finite does with the output as its guard (in place). watch=1: the last input
  // is a running sum (one float) that the output is added to, in place (a training step's
  // watch over its costs). Both without an operator of their own.
  const bool watch = attr_u(attrs, "watch") != 0;
  const size_t keep = attr_u(attrs, "keep");
  const size_t checked = inputs->size() - (watch ? 1 : 0) - keep;
  int bad = 0;
  for (size_t k = 0; k < checked; ++k) {
    auto& in = (*inputs)[k];
    const float* x = in.data<float>();
    const int64_t n = in.size();
#pragma omp parallel for reduction(| : bad) schedule(static) num_threads(threads_for(n))
    for (int64_t i = 0; i < n; ++i) bad |= finite_bits(x[i]) ? 0 : 1;
  }
  const uint32_t nan_bits = 0x7fc00000u;
  float nan;
  std::memcpy(&nan, &nan_bits, sizeof nan);
  // value=1: the first input's first element where all is finite (the step's cost and its
  // guard in one operator); value=2: the sum of the first input's elements (the batch's
  // per-example costs: their sum without an operator of its own); else 0
  const uint64_t value = attr_u(attrs, "value");
  float ok = 0.f;
  if (value == 1) {
    ok = (*inputs)[0].data<float>()[0];
  } else if (value == 2) {
    const float* x = (*inputs)[0].data<float>();
    double sum = 0.0;
    for (int64_t i = 0; i < (*inputs)[0].size(); ++i) sum += x[i];
    ok = static_cast<float>(sum);
  }
  const float out = bad ? nan : ok;
  (*outputs)[0].data<float>()[0] = out;
  for (size_t k = checked; k < checked + keep; ++k)
    keep_finite((*inputs)[k].data<float>(), (*inputs)[k].size(), finite_bits(out));
  if (watch) inputs->back().data<float>()[0] += out;
  return MX_SUCCESS;
}

MXReturnValue mutate_finite(const Attrs& a, std::vector<int>* inputs) {
  const int n = static_cast<int>(attr_u(a, "num_arrays"));
  const int watch = attr_u(a, "watch") != 0 ? 1 : 0;
  for (int k = n - watch - static_cast<int>(attr_u(a, "keep")); k < n; ++k) inputs->push_back(k);
  return MX_SUCCESS;
}

// ---- bbb_keep_finite(guard, g_1, ..., g_k): each g's NaN and infinite entries set to 0,
// and all its entries where the guard (one float) is not finite; the g's in place. The
// gradients of the parameters a Trainer updates beside the fused step (BatchNorm's, a
// learned noise scale): one operator where MXNet's take a dozen (isfinite is six).
MXReturnValue keep_finite_forward(const Attrs&, std::vector<MXTensor>* inputs,
                                  std::vector<MXTensor>* outputs, const OpResource&) {
  const bool ok = finite_bits((*inputs)[0].data<float>()[0]);
  for (size_t k = 1; k < inputs->size(); ++k)
    keep_finite((*inputs)[k].data<float>(), (*inputs)[k].size(), ok);
  (*outputs)[0].data<float>()[0] = 0.f;
  return MX_SUCCESS;
}

MXReturnValue mutate_keep_finite(const Attrs& a, std::vector<int>* inputs) {
  for (int k = 1; k < static_cast<int>(attr_u(a, "num_arrays")); ++k) inputs->push_back(k);
  return MX_SUCCESS;
}

MXReturnValue parse_finite(const Attrs& a, int* i, int* o) {
  return parse_n(a, i, o, static_cast<int>(attr_u(a, "num_arrays")), 1);
}

// ---- bbb_threads: the OpenMP thread count of the engine thread that runs CPU operators ----
// MXSetNumOMPThreads sets it only for the calling (Python) thread; MXNet runs operators on
// its own worker thread, so this operator sets it there, as one more operator in the queue.
//
// The count may go down but never back up: oneDNN sizes a primitive's per-thread buffers
// for the count at which it is made, and MXNet keeps its primitives per engine thread for
// the thread's life, so one made at 1 thread and run at 2 writes past its buffers. The
// ceiling is therefore kept here, per thread (new engine threads, after a fork or in a
// pool, start unknown). The first time this operator runs on a thread, the thread may take
// `claim` threads if it is new: its id is not among the inputs, the threads the process
// had just before the call (so nothing but this call's own operators has run on it);
// otherwise its ceiling is the count it has. A request above the ceiling gets the ceiling,
// and the ceiling follows every count set. The output holds the count before the call
// (after the first sight's claim), the thread's id and the count after it. Thread ids
// travel as float32, exact below 2^24 (Linux's limit on ids is 2^22).
MXReturnValue threads_forward(const Attrs& attrs, std::vector<MXTensor>* inputs,
                              std::vector<MXTensor>* outputs, const OpResource&) {
  thread_local int ceiling = 0;  // 0: this thread not seen yet
  const float* known = (*inputs)[0].data<float>();
  const int64_t num_known = (*inputs)[0].size();
  float* out = (*outputs)[0].data<float>();
  const int tid = static_cast<int>(syscall(SYS_gettid));
  if (ceiling == 0) {
    bool fresh = true;
    for (int64_t i = 0; i < num_known; ++i) fresh = fresh && static_cast<int>(known[i]) != tid;
    const int claim = static_cast<int>(attr_u(attrs, "claim"));
    ceiling = fresh && claim > 0 ? claim : omp_get_max_threads();
    omp_set_num_threads(ceiling);
  }
  const int before = omp_get_max_threads();
  const int threads = static_cast<int>(attr_u(attrs, "threads"));
  if (threads > 0) {
    ceiling = threads < ceiling ? threads : ceiling;
    omp_set_num_threads(ceiling);
  }
  out[0] = static_cast<float>(before);
  out[1] = static_cast<float>(tid);
  out[2] = static_cast<float>(omp_get_max_threads());
  return MX_SUCCESS;
}

MXReturnValue parse_draw(const Attrs& a, int* i, int* o) {
  return parse_n(a, i, o, 2, 2 + (attr_u(a, "aux") != 0 ? 1 : 0));
}
MXReturnValue parse_lrt(const Attrs& a, int* i, int* o) { return parse_n(a, i, o, 2, 1); }
MXReturnValue parse_lrt_combine(const Attrs& a, int* i, int* o) {
  return parse_n(a, i, o, 3, with_square(a) ? 2 : 1);
}
MXReturnValue parse_flip(const Attrs& a, int* i, int* o) { return parse_n(a, i, o, 2, 1); }
MXReturnValue parse_flipout_combine(const Attrs& a, int* i, int* o) {
  return with_flip(a) ? parse_n(a, i, o, 4, 2) : parse_n(a, i, o, 3, 1);
}
MXReturnValue parse_threads(const Attrs& a, int* i, int* o) { return parse_n(a, i, o, 1, 1); }
MXReturnValue parse_normal(const Attrs& a, int* i, int* o) { return parse_n(a, i, o, 1, 1); }
MXReturnValue parse_sample(const Attrs& a, int* i, int* o) { return parse_n(a, i, o, 3, 1); }
// softplus^-1(s) = log(expm1(s)) with the calls GCC vectorises (expf, logf): below 0.1 as
// log(s) + log(expm1(s)/s) by its series (s/2 + s^2/24, exact to 4e-8 there), where
// expf(s) - 1 would lose digits; above 20, s itself (softplus(s) = s in float32).
inline float inverse_softplus(float s) {
  const bool small = s < 0.1f;
  const float r = logf(small ? s : expf(fminf(s, 20.f)) - 1.f) +
                  (small ? s * (0.5f + s * (1.f / 24.f)) : 0.f);
  return s > 20.f ? s : r;
}

// ---- ivon_update: IVON's update (Shen et al. 2024, Algorithm 1) on every layer, one call --
// Inputs per layer: gw (the batch's summed likelihood gradient at theta = m + s eps), eps,
// then m, h, g and rho, updated in place. Per element, with s = 1 / sqrt(ess (h + wd)):
//   gh = gw scale,  hh = gh eps / s,  g = b1 g + (1 - b1) gh,
//   h' = b2 h + (1 - b2) hh + (1 - b2)^2 / 2 (h - hh)^2 / (h + wd),
//   m = m - lr (g / correction + wd m) / (h' + wd),
//   rho = log(expm1(s')) with s' = 1 / sqrt(ess (h' + wd)): softplus(rho) is the new sigma,
// so the posterior reads what IVON learned; correction = 1 - b1^t. Output: 0, or NaN with nothing changed where a
// gradient is not finite (the guard of bbb_update_layers, for IVON). The last two inputs,
// one float each and in place, count the updates made (t, for the bias correction
// 1 - b1^t) and the batches skipped: the step never waits for the host to read them.
MXReturnValue ivon_update_forward(const Attrs& a, std::vector<MXTensor>* inputs,
                                  std::vector<MXTensor>* outputs, const OpResource&) {
  const int layers = static_cast<int>(attr_u(a, "layers"));
  float* count = (*inputs)[6 * layers].data<float>();
  float* skipped = (*inputs)[6 * layers + 1].data<float>();
  bool bad = false;
  for (int k = 0; k < layers; ++k) bad = bad || any_not_finite((*inputs)[6 * k]);
  if (bad) {
    const uint32_t nan_bits = 0x7fc00000u;
    std::memcpy((*outputs)[0].data<float>(), &nan_bits, sizeof nan_bits);
    skipped[0] += 1.f;
    return MX_SUCCESS;
  }
  count[0] += 1.f;
  const float scale = static_cast<float>(attr_d(a, "scale", 1.0));
  const float ess = static_cast<float>(attr_d(a, "ess", 1.0));
  const float wd = static_cast<float>(attr_d(a, "wd", 0.0));
  const float lr = static_cast<float>(attr_d(a, "lr", 0.1));
  const float b1 = static_cast<float>(attr_d(a, "beta1", 0.9));
  const float b2 = static_cast<float>(attr_d(a, "beta2", 0.99999));
  const float corr = static_cast<float>(1.0 - std::pow(attr_d(a, "beta1", 0.9),
                                                      static_cast<double>(count[0])));
  const float half_sq = 0.5f * (1.f - b2) * (1.f - b2);
  for (int k = 0; k < layers; ++k) {
    const float* gw = (*inputs)[6 * k].data<float>();
    const float* eps = (*inputs)[6 * k + 1].data<float>();
    float* m = (*inputs)[6 * k + 2].data<float>();
    float* h = (*inputs)[6 * k + 3].data<float>();
    float* g = (*inputs)[6 * k + 4].data<float>();
    float* rho = (*inputs)[6 * k + 5].data<float>();
    const int64_t n = (*inputs)[6 * k].size();
#pragma omp parallel for simd schedule(static) num_threads(threads_for(n))
    for (int64_t i = 0; i < n; ++i) {
      const float hd = h[i] + wd;
      const float gh = gw[i] * scale;
      const float hh = gh * eps[i] * sqrtf(ess * hd);  // eps / s
      g[i] = b1 * g[i] + (1.f - b1) * gh;
      const float diff = h[i] - hh;
      const float h_new = b2 * h[i] + (1.f - b2) * hh + half_sq * diff * diff / hd;
      h[i] = h_new;
      m[i] = m[i] - lr * (g[i] / corr + wd * m[i]) / (h_new + wd);
      rho[i] = inverse_softplus(1.f / sqrtf(ess * (h_new + wd)));
    }
  }
  (*outputs)[0].data<float>()[0] = 0.f;
  return MX_SUCCESS;
}

MXReturnValue parse_ivon(const Attrs& a, int* i, int* o) {
  return parse_n(a, i, o, 6 * static_cast<int>(attr_u(a, "layers")) + 2, 1);
}

MXReturnValue mutate_ivon(const Attrs& a, std::vector<int>* inputs) {
  for (int k = 0; k < static_cast<int>(attr_u(a, "layers")); ++k)
    for (int j = 2; j < 6; ++j) inputs->push_back(6 * k + j);
  const int counts = 6 * static_cast<int>(attr_u(a, "layers"));
  inputs->push_back(counts);
  inputs->push_back(counts + 1);
  return MX_SUCCESS;
}

MXReturnValue parse_grad(const Attrs& a, int* i, int* o) {
  return parse_n(a, i, o, 5 + has_aux(a) + guarded(a), 2);
}
MXReturnValue parse_cost(const Attrs& a, int* i, int* o) { return parse_n(a, i, o, 4, 1); }

}  // namespace

REGISTER_OP(bbb_normal)
    .setForward(normal_forward, "cpu")
    .setParseAttrs(parse_normal)
    .setInferType(all_float32)
    .setInferShape(same_shape);
REGISTER_OP(bbb_sample)
    .setForward(sample_forward, "cpu")
    .setParseAttrs(parse_sample)
    .setInferType(all_float32)
    .setInferShape(same_shape);
REGISTER_OP(bbb_grad)
    .setForward(grad_forward, "cpu")
    .setParseAttrs(parse_grad)
    .setInferType(all_float32)
    .setInferShape(same_shape);
REGISTER_OP(bbb_draw)
    .setForward(draw_forward, "cpu")
    .setParseAttrs(parse_draw)
    .setInferType(all_float32)
    .setInferShape(same_shape);
REGISTER_OP(bbb_lrt)
    .setForward(lrt_forward, "cpu")
    .setParseAttrs(parse_lrt)
    .setInferType(all_float32)
    .setInferShape(same_shape);
REGISTER_OP(bbb_lrt_combine)
    .setForward(lrt_combine_forward, "cpu")
    .setBackward(lrt_combine_backward, "cpu")
    .setParseAttrs(parse_lrt_combine)
    .setInferType(all_float32)
    .setInferShape(same_shape);
REGISTER_OP(bbb_flip)
    .setForward(flip_forward, "cpu")
    .setBackward(flip_backward, "cpu")
    .setParseAttrs(parse_flip)
    .setInferType(all_float32)
    .setInferShape(signs_shape);
REGISTER_OP(bbb_flipout_combine)
    .setForward(flipout_combine_forward, "cpu")
    .setBackward(flipout_combine_backward, "cpu")
    .setParseAttrs(parse_flipout_combine)
    .setInferType(all_float32)
    .setInferShape(flipout_combine_shape);
REGISTER_OP(bbb_threads)
    .setForward(threads_forward, "cpu")
    .setParseAttrs(parse_threads)
    .setInferType(all_float32)
    .setInferShape(three_shape);
REGISTER_OP(bbb_update)
    .setForward(update_forward, "cpu")
    .setParseAttrs(parse_update)
    .setMutateInputs(mutate_update)
    .setInferType(all_float32)
    .setInferShape(scalar_shape);
REGISTER_OP(bbb_draw_layers)
    .setForward(UNPACKED(draw_layers_forward), "cpu")
    .setParseAttrs(UNPACKED(parse_draw_layers))
    .setInferType(all_float32)
    .setInferShape(UNPACKED(shape_draw_layers));
REGISTER_OP(bbb_update_layers)
    .setForward(UNPACKED(update_layers_forward), "cpu")
    .setParseAttrs(UNPACKED(parse_update_layers))
    .setMutateInputs(UNPACKED(mutate_update_layers))
    .setInferType(all_float32)
    .setInferShape(scalar_shape);
REGISTER_OP(bbb_finite)
    .setForward(finite_forward, "cpu")
    .setParseAttrs(parse_finite)
    .setMutateInputs(mutate_finite)
    .setInferType(all_float32)
    .setInferShape(scalar_shape);
REGISTER_OP(bbb_keep_finite)
    .setForward(keep_finite_forward, "cpu")
    .setParseAttrs(parse_finite)
    .setMutateInputs(mutate_keep_finite)
    .setInferType(all_float32)
    .setInferShape(scalar_shape);
REGISTER_OP(bbb_cost)
    .setForward(cost_forward, "cpu")
    .setParseAttrs(parse_cost)
    .setInferType(all_float32)
    .setInferShape(scalar_shape);

REGISTER_OP(ivon_update)
    .setForward(ivon_update_forward, "cpu")
    .setParseAttrs(parse_ivon)
    .setMutateInputs(mutate_ivon)
    .setInferType(all_float32)
    .setInferShape(scalar_shape);

MXReturnValue initialize(int version) {
  return version >= 10900 ? MX_SUCCESS : MX_FAIL;
}
