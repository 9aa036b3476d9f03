// The Mushroom bandit's agents, all of them at once: bbb_gluon/bandit/engine.py loads this file
// with ctypes (plain C ABI, NumPy buffers) and calls bandit_run once per chunk of steps.
//
// The paper's protocol costs 64 minibatch updates per interaction, 3.2 million per agent
// over 50,000 steps. Driven from Python through MXNet operators each update costs about a
// millisecond of dispatch alone; here one call runs every agent's whole chunk (decide,
// observe, store, 64 updates per step), the agents spread over OpenMP threads. Agents are
// independent, so there is no synchronisation inside a call.
//
// Each agent is the network context (one-hot, D - 2 wide) + action (one-hot, 2) -> H ReLU ->
// H ReLU -> 1 (the expected reward), parameters flat in this order:
//   W1 [D][H], b1 [H], W2 [H][H], b2 [H], w3 [H], b3 [1]
// (W[in][out], the transpose of Gluon's Dense weight). The one-hot input makes the first
// layer a sum of F + 1 rows of W1 (F attributes, one action), which is how it is computed.
//
// A Bayes-by-Backprop agent keeps mu and rho (sigma = softplus(rho)); each update samples
// w = mu + sigma * eps (eps ~ N(0, 1) from a counter-based hash, as in fused.cc) and
// follows the gradient of
//     (1/B) sum_b (y_b - f_b)^2 / (2 s^2)  +  (1/N) (log q(w) - log P(w))
// (mean Gaussian NLL over the minibatch plus the complexity cost spread over N: the items
// in the buffer, or every interaction seen so far; or, with Blundell's weighting, 1/N
// replaced by beta_u / B for update u of a step, see complexity_scale). A plain agent
// keeps only mu (its weights) and follows the first term.
// Decisions: a Thompson agent samples the weights act_samples times and takes the action
// whose mean predicted reward is larger (act_draws 0: both actions valued under the same
// draws; 1: each action under its own, not eating under the shared draws' keys and eating
// under draws of their own tag); a greedy agent uses mu, and explores with probability
// epsilon.
#include <cmath>
#include <cstdint>
#include <cstring>
#include <vector>

#include <omp.h>

#include "common.h"
#if defined(__AVX512F__) || defined(__SSE__)
#include <immintrin.h>
#endif

namespace {

// Domain tags keep the hash streams of different uses apart.
constexpr uint64_t kTagNoise = 1, kTagBatch = 2, kTagAct = 3, kTagActEat = 4;

// eps[0..n) ~ N(0, 1), a pure function of key (fused.cc's bbb_normal on one thread).
void normals(uint64_t key, float* eps, int64_t n) {
  const int64_t half = n / 2;
#pragma omp simd
  for (int64_t j = 0; j < half; ++j)
    normal_pair(mix64(key + static_cast<uint64_t>(j)), &eps[j], &eps[j + half]);
  if (n % 2) {
    float unused;
    normal_pair(mix64(key + static_cast<uint64_t>(half)), &eps[n - 1], &unused);
  }
}

}  // namespace

extern "C" {

// Everything one call needs; mirrored by ctypes in bandit/engine.py (keep the order).
struct BanditArgs {
  int32_t A, D, H, F, P;        // agents, input width, hidden units, attributes, params
  int32_t capacity, batch, updates, act_samples;
  int32_t prior_kind;           // 1 scale mixture, 2 Gaussian (Monte-Carlo cost)
  int32_t chunk;                // steps in this call
  int32_t complexity_over;      // the complexity cost is divided by: 0 the items in the
                                // buffer, 1 the interactions seen so far; 2: Blundell's
                                // weighting over a step's updates (see complexity_scale)
  int32_t act_draws;            // Thompson decisions: 0 one draw for both actions, 1 a
                                // draw per action
  int64_t t0;                   // global index of the chunk's first step
  float rho_lr_mult, beta1, beta2, adam_eps, inv_noise_var;
  float pi, sigma1, sigma2, sigma;
  const int32_t* features;      // [rows][F] column of each attribute's one
  const uint8_t* edible;        // [rows]
  const int32_t* rows;          // [A][chunk] mushroom shown to each agent
  const uint8_t* unlucky;       // [A][chunk] 1: a poisonous meal costs -35 (else +5)
  const float* explore_u;       // [A][chunk] uniform [0, 1): explore if < epsilon
  const uint8_t* explore_a;     // [A][chunk] the action taken when exploring
  const float* epsilon;         // [A]
  const uint8_t* bayes;         // [A]
  const float* lr;              // [A] learning rate (rho's: times rho_lr_mult)
  const uint8_t* adam;          // [A] optimiser: 1 Adam, 0 plain SGD
  const uint64_t* key;          // [A] hash key of each agent's noise and minibatches
  float* mu;                    // [A][P]
  float* rho;                   // [A][P]  (read only for Bayesian agents)
  float* m_mu;                  // [A][P]  optimiser state
  float* v_mu;
  float* m_rho;
  float* v_rho;
  int32_t* buf_row;             // [A][capacity]
  uint8_t* buf_action;          // [A][capacity]
  float* buf_reward;            // [A][capacity]
  uint8_t* actions_out;         // [A][chunk]
  float* rewards_out;           // [A][chunk]
  float* loss_out;              // [A][chunk] mean NLL of the step's minibatches
};

}  // extern "C"

namespace {

struct Layout {
  int D, H, P;
  int W1, b1, W2, b2, w3, b3;
  Layout(int D_, int H_) : D(D_), H(H_) {
    W1 = 0;
    b1 = W1 + D * H;
    W2 = b1 + H;
    b2 = W2 + H * H;
    w3 = b2 + H;
    b3 = w3 + H;
    P = b3 + 1;
  }
};

// Scratch of one agent's forward and backward passes over B examples.
struct Work {
  std::vector<int32_t> active;  // [B][F + 1]
  std::vector<float> z1, z2, d2, d1, f, df, w2t, z1t, val;
  std::vector<int32_t> idx, start, fill, members;
  std::vector<float> ones;
  Work(int B, int F, int H, int D)
      : active(B * (F + 1)), z1(B * H), z2(B * H), d2(B * H), d1(B * H), f(B), df(B),
        w2t(H * H), z1t(H * B), val((B > H ? B : H) + 16), idx((B > H ? B : H) + 16),
        start(D + 1), fill(D), members(B * (F + 1)), ones(B * (F + 1) + 16, 1.f) {}
};

// 16 floats, loaded and stored unaligned (GCC vector extension; AVX-512 where there is one).
typedef float v16 __attribute__((vector_size(64), aligned(4), may_alias));

// out[0..H) += sum_q scale[q] * M[idx[q] * stride + 0..H), four rows per pass over out
// (one load and one store of out for four rows' worth of multiply-adds). Written with
// vector types because GCC turns the plain loop into gathers.
inline void add_rows(float* __restrict out, const float* __restrict M, int64_t stride,
                     const int32_t* idx, const float* scale, int n, int H) {
  const int full = H / 16 * 16;
  int q = 0;
  for (; q + 4 <= n; q += 4) {
    const float* r0 = M + idx[q] * stride;
    const float* r1 = M + idx[q + 1] * stride;
    const float* r2 = M + idx[q + 2] * stride;
    const float* r3 = M + idx[q + 3] * stride;
    const float s0 = scale[q], s1 = scale[q + 1], s2 = scale[q + 2], s3 = scale[q + 3];
    for (int j = 0; j < full; j += 16) {
      v16 o = *reinterpret_cast<v16*>(out + j);
      o += s0 * *reinterpret_cast<const v16*>(r0 + j) + s1 * *reinterpret_cast<const v16*>(r1 + j);
      o += s2 * *reinterpret_cast<const v16*>(r2 + j) + s3 * *reinterpret_cast<const v16*>(r3 + j);
      *reinterpret_cast<v16*>(out + j) = o;
    }
    for (int j = full; j < H; ++j) out[j] += s0 * r0[j] + s1 * r1[j] + s2 * r2[j] + s3 * r3[j];
  }
  for (; q < n; ++q) {
    const float* r = M + idx[q] * stride;
    const float sq = scale[q];
    for (int j = 0; j < full; j += 16)
      *reinterpret_cast<v16*>(out + j) += sq * *reinterpret_cast<const v16*>(r + j);
    for (int j = full; j < H; ++j) out[j] += sq * r[j];
  }
}

// The nonzero entries of x[0..n): their positions into idx, their values into val.
inline int nonzeros(const float* x, int n, int64_t step, int32_t* idx, float* val) {
  int m = 0;
  int i = 0;
#ifdef __AVX512F__
  if (step == 1) {  // 16 at a time with AVX-512's compress
    const __m512i lanes = _mm512_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15);
    for (; i + 16 <= n; i += 16) {
      __m512 v = _mm512_loadu_ps(x + i);
      __mmask16 k = _mm512_cmp_ps_mask(v, _mm512_setzero_ps(), _CMP_NEQ_UQ);
      // compress in registers, then a full store (compress-to-memory is microcoded and
      // slow on AMD Zen 4); idx and val have 16 entries of slack for it
      _mm512_storeu_ps(val + m, _mm512_maskz_compress_ps(k, v));
      _mm512_storeu_si512(idx + m, _mm512_maskz_compress_epi32(
                                       k, _mm512_add_epi32(lanes, _mm512_set1_epi32(i))));
      m += __builtin_popcount(k);
    }
  }
#endif
  for (; i < n; ++i) {  // branch-free: half the entries are zero, at random
    const float v = x[i * step];
    idx[m] = i;
    val[m] = v;
    m += v != 0.f;
  }
  return m;
}

// f[b] for the active inputs of B examples (z1, z2 kept, post-ReLU, for backward). The
// ReLUs that are off (about half) are skipped.
void forward(const Layout& L, const float* w, const int32_t* active, int na, int B, Work& s) {
  const int H = L.H;
  const float* W1 = w + L.W1;
  const float* W2 = w + L.W2;
  const float* ones = s.ones.data();
  for (int b = 0; b < B; ++b) {
    float* z1 = &s.z1[b * H];
    std::memcpy(z1, w + L.b1, H * sizeof(float));
    add_rows(z1, W1, H, active + b * na, ones, na, H);
#pragma omp simd
    for (int j = 0; j < H; ++j) z1[j] = fmaxf(z1[j], 0.f);
    float* z2 = &s.z2[b * H];
    std::memcpy(z2, w + L.b2, H * sizeof(float));
    const int m = nonzeros(z1, H, 1, s.idx.data(), s.val.data());
    add_rows(z2, W2, H, s.idx.data(), s.val.data(), m, H);
    float out = w[L.b3];
    const float* w3 = w + L.w3;
#pragma omp simd reduction(+ : out)
    for (int j = 0; j < H; ++j) {
      z2[j] = fmaxf(z2[j], 0.f);
      out += z2[j] * w3[j];
    }
    s.f[b] = out;
  }
}

// g = gradient of (1/B) sum_b (y_b - f_b)^2 / (2 s^2) with respect to w; returns the
// minibatch's mean NLL (without the constant).
float backward(const Layout& L, const float* w, const int32_t* active, int na, int B,
               const float* y, float inv_s2, Work& s, float* g) {
  const int H = L.H;
  std::memset(g, 0, sizeof(float) * L.P);
  float nll = 0.f;
  for (int b = 0; b < B; ++b) {
    float r = s.f[b] - y[b];
    nll += 0.5f * r * r * inv_s2;
    s.df[b] = r * inv_s2 / B;
  }
  const float* W2 = w + L.W2;
  const float* w3 = w + L.w3;
  float* gW1 = g + L.W1;
  float* gb1 = g + L.b1;
  float* gW2 = g + L.W2;
  float* gb2 = g + L.b2;
  float* gw3 = g + L.w3;
  // W2 transposed, so that d1[b] = W2 d2[b] is a sum of rows like the forward pass.
  float* w2t = s.w2t.data();
  for (int k = 0; k < H; ++k)
    for (int j = 0; j < H; ++j) w2t[j * H + k] = W2[k * H + j];
  for (int b = 0; b < B; ++b) {
    const float df = s.df[b];
    const float* z2 = &s.z2[b * H];
    float* d2 = &s.d2[b * H];
    g[L.b3] += df;
#pragma omp simd
    for (int j = 0; j < H; ++j) {
      gw3[j] += df * z2[j];
      d2[j] = z2[j] > 0.f ? df * w3[j] : 0.f;
      gb2[j] += d2[j];
    }
    float* d1 = &s.d1[b * H];
    std::memset(d1, 0, H * sizeof(float));
    const int m = nonzeros(d2, H, 1, s.idx.data(), s.val.data());
    add_rows(d1, w2t, H, s.idx.data(), s.val.data(), m, H);
    const float* z1 = &s.z1[b * H];
#pragma omp simd
    for (int k = 0; k < H; ++k) d1[k] = z1[k] > 0.f ? d1[k] : 0.f;
  }
  // gW2[k] = sum_b z1[b][k] d2[b], over the examples whose unit k is on.
  float* z1t = s.z1t.data();
  for (int b = 0; b < B; ++b)
    for (int k = 0; k < H; ++k) z1t[k * B + b] = s.z1[b * H + k];
  for (int k = 0; k < H; ++k) {
    const int m = nonzeros(z1t + k * B, B, 1, s.idx.data(), s.val.data());
    add_rows(gW2 + k * H, s.d2.data(), H, s.idx.data(), s.val.data(), m, H);
  }
  // gW1[i] = sum of d1[b] over the examples whose input i is on: group the examples by
  // input (counting sort), then add each group's rows four at a time.
  const int D = L.D;
  std::vector<int32_t>& start = s.start;
  std::vector<int32_t>& members = s.members;
  std::fill(start.begin(), start.end(), 0);
  for (int e = 0; e < B * na; ++e) ++start[active[e] + 1];
  for (int i = 0; i < D; ++i) start[i + 1] += start[i];
  std::vector<int32_t>& fill = s.fill;
  std::copy(start.begin(), start.end() - 1, fill.begin());
  for (int e = 0; e < B * na; ++e) members[fill[active[e]]++] = e / na;
  const float* ones = s.ones.data();
  for (int i = 0; i < D; ++i) {
    const int n = start[i + 1] - start[i];
    if (n) add_rows(gW1 + static_cast<int64_t>(i) * H, s.d1.data(), H, &members[start[i]], ones, n, H);
  }
  for (int b = 0; b < B; ++b) s.members[b] = b;
  add_rows(gb1, s.d1.data(), H, s.members.data(), ones, B, H);
  return nll / B;
}

// Turns g (dNLL/dw) into the gradients with respect to mu and rho, complexity included
// (scale = 1/N); the same formulas as fused.cc's bbb_grad.
void bbb_gradients(const BanditArgs& a, int64_t P, const float* w, const float* eps,
                   const float* sd, const float* dsd, float scale, float* g, float* grho) {
  if (a.prior_kind == 1) {
    const double s1 = a.sigma1, s2 = a.sigma2, pi = a.pi;
    const float inv_s1sq = static_cast<float>(1.0 / (s1 * s1));
    const float k = static_cast<float>(0.5 / (s2 * s2) - 0.5 / (s1 * s1));
    const float c = static_cast<float>(std::log1p(-pi) - std::log(pi) + std::log(s1 / s2));
    const float ca = scale * inv_s1sq, cb = scale * 2.f * k;
#pragma omp simd
    for (int64_t i = 0; i < P; ++i) {
      float wi = w[i];
      float h = g[i] + wi * (ca + cb * sigmoid(c - k * wi * wi));
      g[i] = h;
      grho[i] = dsd[i] * (eps[i] * h - scale / sd[i]);
    }
  } else {
    const float cw = static_cast<float>(scale / (static_cast<double>(a.sigma) * a.sigma));
#pragma omp simd
    for (int64_t i = 0; i < P; ++i) {
      float h = g[i] + cw * w[i];
      g[i] = h;
      grho[i] = dsd[i] * (eps[i] * h - scale / sd[i]);
    }
  }
}

// One optimiser step on x with gradient g; Adam as MXNet's (bias correction folded into
// the learning rate), t counting from 1.
void apply(const BanditArgs& a, bool adam, float rate, int64_t P, float* x, const float* g,
           float* m, float* v, int64_t t) {
  if (!adam) {
    const float lr = rate;
#pragma omp simd
    for (int64_t i = 0; i < P; ++i) x[i] -= lr * g[i];
    return;
  }
  const double tt = static_cast<double>(t);
  const float lr = static_cast<float>(rate * std::sqrt(1.0 - std::pow(a.beta2, tt)) /
                                      (1.0 - std::pow(a.beta1, tt)));
  const float b1 = a.beta1, b2 = a.beta2, e = a.adam_eps;
#pragma omp simd
  for (int64_t i = 0; i < P; ++i) {
    float gi = g[i];
    float mi = b1 * m[i] + (1.f - b1) * gi;
    float vi = b2 * v[i] + (1.f - b2) * gi * gi;
    m[i] = mi;
    v[i] = vi;
    // + 1e-30: -ffast-math may compute sqrt(v) as v * rsqrt(v), which is NaN at v = 0
    // (an agent that never eats sees only zero rewards, and its v decays to zero)
    x[i] -= lr * mi / (sqrtf(vi + 1e-30f) + e);
  }
}

// w = mu + sigma * eps, keeping sigma = softplus(rho) and sigmoid(rho) (= dsigma/drho)
// for the gradient.
inline void sample_weights(int64_t P, const float* mu, const float* rho, const float* eps,
                           float* w, float* sd, float* dsd) {
#pragma omp simd
  for (int64_t i = 0; i < P; ++i) {
    const float r = rho[i], t = exp_neg_abs(r), inv = 1.f / (1.f + t);
    const float sigma = fmaxf(r, 0.f) + log1p_small(t);
    sd[i] = sigma;
    dsd[i] = r >= 0.f ? inv : t * inv;
    w[i] = mu[i] + sigma * eps[i];
  }
}

// Flush denormals to zero in this thread while an agent runs: the Adam moments of an
// agent whose gradients vanish decay into denormals, and arithmetic on those is a hundred
// times slower. The previous mode is restored, so the caller's thread is left as it was.
struct FlushDenormals {
#ifdef __SSE__
  unsigned int saved;
  FlushDenormals() : saved(_mm_getcsr()) { _mm_setcsr(saved | 0x8040); }  // FTZ | DAZ
  ~FlushDenormals() { _mm_setcsr(saved); }
#endif
};

// The weight of the complexity cost in update u of step t (0-based) with n items stored:
// 1/(t + 1) or 1/n spreads it evenly over the data; Blundell's weighting (the paper's
// eq. 9) gives update u the share beta_u = 2^(U-1-u) / (2^U - 1) of one whole cost, so
// the first updates of a step carry most of it, divided by B as the NLL is a mean.
inline float complexity_scale(const BanditArgs& a, int64_t t, int64_t n, int u) {
  if (a.complexity_over == 2) {
    // 2^-(u+1) / (1 - 2^-U): the same number, and no overflow for large U
    return static_cast<float>(std::ldexp(1.0, -(u + 1)) / (1.0 - std::ldexp(1.0, -a.updates)) /
                              a.batch);
  }
  return 1.f / static_cast<float>(a.complexity_over == 1 ? t + 1 : n);
}

void run_agent(const BanditArgs& a, int ag) {
  const FlushDenormals flush;
  const Layout L(a.D, a.H);
  const int64_t P = L.P;
  const int na = a.F + 1, B = a.batch, cap = a.capacity;
  float* mu = a.mu + ag * P;
  float* rho = a.rho + ag * P;
  float* m_mu = a.m_mu + ag * P;
  float* v_mu = a.v_mu + ag * P;
  float* m_rho = a.m_rho + ag * P;
  float* v_rho = a.v_rho + ag * P;
  int32_t* buf_row = a.buf_row + static_cast<int64_t>(ag) * cap;
  uint8_t* buf_action = a.buf_action + static_cast<int64_t>(ag) * cap;
  float* buf_reward = a.buf_reward + static_cast<int64_t>(ag) * cap;
  const bool bayes = a.bayes[ag] != 0, adam = a.adam[ag] != 0;
  const uint64_t key = a.key[ag];
  std::vector<float> eps(bayes ? P : 0), w(bayes ? P : 0), g(P), grho(bayes ? P : 0);
  std::vector<float> sd(bayes ? P : 0), dsd(bayes ? P : 0);
  std::vector<float> y(B);
  Work s(B > 2 ? B : 2, a.F, a.H, a.D);
  for (int c = 0; c < a.chunk; ++c) {
    const int64_t t = a.t0 + c;
    const int64_t at = static_cast<int64_t>(ag) * a.chunk + c;
    const int32_t row = a.rows[at];
    const int32_t* feat = a.features + static_cast<int64_t>(row) * a.F;
    // Decide: the predicted reward of eating (action 1) and of not eating (action 0).
    int32_t* act = s.active.data();
    for (int q = 0; q < a.F; ++q) act[q] = act[na + q] = feat[q];
    act[a.F] = a.D - 2;       // not eat
    act[na + a.F] = a.D - 1;  // eat
    float value[2] = {0.f, 0.f};
    if (bayes) {
      for (int k = 0; k < a.act_samples; ++k) {
        const uint64_t offset = static_cast<uint64_t>(t) * 64 + k;
        normals(mix64(mix64(key ^ (kTagAct << 56)) + offset), eps.data(), P);
        sample_weights(P, mu, rho, eps.data(), w.data(), sd.data(), dsd.data());
        if (a.act_draws == 0) {
          forward(L, w.data(), act, na, 2, s);
          value[0] += s.f[0];
          value[1] += s.f[1];
        } else {  // not eating under this draw, eating under a draw of its own
          forward(L, w.data(), act, na, 1, s);
          value[0] += s.f[0];
          normals(mix64(mix64(key ^ (kTagActEat << 56)) + offset), eps.data(), P);
          sample_weights(P, mu, rho, eps.data(), w.data(), sd.data(), dsd.data());
          forward(L, w.data(), act + na, na, 1, s);
          value[1] += s.f[0];
        }
      }
    } else {
      forward(L, mu, act, na, 2, s);
      value[0] = s.f[0];
      value[1] = s.f[1];
    }
    uint8_t action = value[1] > value[0] ? 1 : 0;
    if (a.explore_u[at] < a.epsilon[ag]) action = a.explore_a[at];
    const bool edible = a.edible[row] != 0;
    const float reward = action == 0 ? 0.f : (edible || !a.unlucky[at] ? 5.f : -35.f);
    a.actions_out[at] = action;
    a.rewards_out[at] = reward;
    const int64_t slot = t % cap;
    buf_row[slot] = row;
    buf_action[slot] = action;
    buf_reward[slot] = reward;
    const int64_t n = t + 1 < cap ? t + 1 : cap;
    // Learn: `updates` minibatches of B drawn with replacement from the buffer.
    float loss = 0.f;
    for (int u = 0; u < a.updates; ++u) {
      const uint64_t ukey = mix64(mix64(key ^ (kTagBatch << 56)) +
                                  static_cast<uint64_t>(t) * a.updates + u);
      for (int b = 0; b < B; ++b) {
        uint64_t h = mix64(ukey + static_cast<uint64_t>(b));
        int64_t i = static_cast<int64_t>(((h >> 32) * static_cast<uint64_t>(n)) >> 32);
        const int32_t* f = a.features + static_cast<int64_t>(buf_row[i]) * a.F;
        int32_t* dst = act + b * na;
        for (int q = 0; q < a.F; ++q) dst[q] = f[q];
        dst[a.F] = a.D - 2 + buf_action[i];
        y[b] = buf_reward[i];
      }
      const int64_t step = t * a.updates + u + 1;
      if (bayes) {
        normals(mix64(mix64(key ^ (kTagNoise << 56)) + static_cast<uint64_t>(step)),
                eps.data(), P);
        sample_weights(P, mu, rho, eps.data(), w.data(), sd.data(), dsd.data());
        forward(L, w.data(), act, na, B, s);
        loss += backward(L, w.data(), act, na, B, y.data(), a.inv_noise_var, s, g.data());
        bbb_gradients(a, P, w.data(), eps.data(), sd.data(), dsd.data(),
                      complexity_scale(a, t, n, u), g.data(), grho.data());
        apply(a, adam, a.lr[ag], P, mu, g.data(), m_mu, v_mu, step);
        apply(a, adam, a.lr[ag] * a.rho_lr_mult, P, rho, grho.data(), m_rho, v_rho, step);
      } else {
        forward(L, mu, act, na, B, s);
        loss += backward(L, mu, act, na, B, y.data(), a.inv_noise_var, s, g.data());
        apply(a, adam, a.lr[ag], P, mu, g.data(), m_mu, v_mu, step);
      }
    }
    a.loss_out[at] = a.updates > 0 ? loss / a.updates : 0.f;
  }
}

}  // namespace

extern "C" {

int bandit_args_size() { return static_cast<int>(sizeof(BanditArgs)); }

// The OpenMP thread count of the calling thread (the library's own OpenMP runtime).
int bandit_get_threads() { return omp_get_max_threads(); }
void bandit_set_threads(int n) { omp_set_num_threads(n); }

// Runs steps [t0, t0 + chunk) for every agent; returns 0, or -1 on inconsistent sizes.
int bandit_run(const BanditArgs* a) {
  if (Layout(a->D, a->H).P != a->P || a->F < 1 || a->batch < 1 || a->capacity < 1) return -1;
#pragma omp parallel for schedule(dynamic, 1)
  for (int ag = 0; ag < a->A; ++ag) run_agent(*a, ag);
  return 0;
}

// For tests: the mean NLL of B examples and its gradient with respect to the weights w,
// plus (if eps, mu, rho and grho are given) the gradients with respect to mu and rho with
// the complexity cost weighted by scale. active: [B][F + 1] input columns; y: [B].
float bandit_grad(const BanditArgs* a, const float* w, const int32_t* active, const float* y,
                  int32_t B, float* g, const float* eps, const float* mu, const float* rho,
                  float scale, float* grho) {
  const Layout L(a->D, a->H);
  Work s(B, a->F, a->H, a->D);
  forward(L, w, active, a->F + 1, B, s);
  float nll = backward(L, w, active, a->F + 1, B, y, a->inv_noise_var, s, g);
  if (grho != nullptr) {
    std::vector<float> w2(L.P), sd(L.P), dsd(L.P);
    sample_weights(L.P, mu, rho, eps, w2.data(), sd.data(), dsd.data());
    bbb_gradients(*a, L.P, w, eps, sd.data(), dsd.data(), scale, g, grho);
  }
  return nll;
}

// For tests: the noise the kernel draws under a key (see run_agent for the keys).
void bandit_noise(uint64_t key, int64_t n, float* out) { normals(key, out, n); }

}  // extern "C"
