// What fused.cc (MXNet operators) and bandit.cc (the bandit's agents) share: stable
// softplus and sigmoid, the counter-based hash, and N(0, 1) noise drawn from it. Both
// files include it; fused.py's build hashes it with them.
#pragma once

#include <cmath>
#include <cstdint>

namespace {

// softplus and sigmoid from t = exp(-|x|) in (0, 1]: no overflow, and log1p(t) by its
// series where t is small, so tiny sigmas keep full relative precision. |x| is capped at
// 80 so t never becomes a denormal: denormal arithmetic is a hundred times slower, and
// below e^-80 (about 1.8e-35) the values no longer matter. sigma = softplus(rho) is thus
// held at softplus(-80) for rho < -80.
inline float exp_neg_abs(float x) { return expf(-fminf(fabsf(x), 80.f)); }
inline float log1p_small(float t) {
  // Below 0.03 the series to t^5 is exact to 4e-9; above, 1 + t loses at most 2e-6.
  return t < 0.03f
             ? t * (1.f - t * (0.5f - t * (1.f / 3.f - t * (0.25f - t * 0.2f))))
             : logf(1.f + t);
}
inline float softplus(float x) { return fmaxf(x, 0.f) + log1p_small(exp_neg_abs(x)); }
inline float sigmoid(float x) {
  float t = exp_neg_abs(x);
  float r = 1.f / (1.f + t);
  return x >= 0.f ? r : t * r;
}

inline uint64_t mix64(uint64_t z) {  // splitmix64's finaliser: a strong 64-bit hash
  z += 0x9E3779B97F4A7C15ULL;
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ULL;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBULL;
  return z ^ (z >> 31);
}

// Box-Muller on the 64-bit hash h: two N(0, 1) draws (24-bit uniforms u1 in (0, 1],
// u2 in [0, 1)). sin(a) is written as cos(a - pi/2): GCC would merge cos(a), sin(a) into
// sincosf, which has no vector variant, and the loops calling this would run scalar.
inline void normal_pair(uint64_t h, float* a, float* b) {
  const float two_pi = 6.28318530717958647692f;
  float u1 = static_cast<float>(static_cast<int32_t>(h >> 40) + 1) * (1.f / 16777216.f);
  float u2 = static_cast<float>(static_cast<int32_t>((h >> 8) & 0xFFFFFFULL)) * (1.f / 16777216.f);
  float r = sqrtf(-2.f * logf(u1));
  *a = r * cosf(two_pi * u2);
  *b = r * cosf(two_pi * u2 - 1.57079632679489662f);
}

}  // namespace
