/*
 * Fused elementwise passes of a prefill-sized step (the PyTorch path of jalapeno.backends.torch):
 *
 *   jal_add_rmsnorm  x_out = x + d (when d is given); h = w * (x_out / sqrt(mean(x_out^2) + eps))   one pass
 *                    per row instead of PyTorch's add, pow, mean, add, rsqrt, mul, mul (seven)
 *   jal_silu_mul     out = silu(gate) * up over the fused gate/up GEMM output [rows, 2I]         one pass
 *                    instead of silu + mul_, with a vectorisable expf
 *   jal_rope_store   rotate q and k of the fused q/k/v GEMM output [rows, h + 2 kvh, d] in place (rotate-half
 *                    RoPE, the tables of rope.rope_cos_sin) and write k and v to their cache slots     one pass
 *                    instead of mul, two addcmul_ and two index_copy_
 *
 * Plain C + OpenMP, built at first use by jalapeno.kernels.cpu_build like cpu_decode.c (it shares torch's
 * already-loaded libgomp: one thread pool). Each call splits rows over `nthreads` threads. All tensors are
 * float32 and contiguous (the Python side checks; it falls back to PyTorch ops otherwise).
 */
#include <math.h>
#include <stdint.h>
#include <string.h>

/* lets GCC if-convert the clamps of exp_f (a compare may not trap): without it the SiLU loop stays scalar */
#pragma GCC optimize("no-trapping-math")

/* rows below this many elements run on one thread (a parallel region costs more than it saves) */
#define SERIAL_ELEMS 16384

void jal_add_rmsnorm(const float *x, const float *d, const float *w, float *x_out, float *h, int64_t rows,
                     int64_t n, float eps, int nthreads) {
    int nt = rows * n >= SERIAL_ELEMS ? nthreads : 1;
#pragma omp parallel for num_threads(nt) schedule(static)
    for (int64_t r = 0; r < rows; r++) {
        const float *xr = x + r * n;
        float *xo = x_out + r * n, *hr = h + r * n;
        float ss = 0.f;
        if (d) {
            const float *dr = d + r * n;
#pragma omp simd reduction(+ : ss)
            for (int64_t i = 0; i < n; i++) {
                float v = xr[i] + dr[i];
                xo[i] = v;
                ss += v * v;
            }
        } else {
#pragma omp simd reduction(+ : ss)
            for (int64_t i = 0; i < n; i++) ss += xr[i] * xr[i];
            xo = (float *)xr;
        }
        float rstd = 1.0f / sqrtf(ss / (float)n + eps);
#pragma omp simd
        for (int64_t i = 0; i < n; i++) hr[i] = w[i] * (xo[i] * rstd);
    }
}

/* e^x for float32 (Cephes' expf: x = k ln2 + r, |r| <= ln2/2, degree-5 polynomial, ~1 ulp); written so the
 * compiler vectorises the loops that call it (no libm call, no branches) */
static inline float exp_f(float x) {
    x = x < -87.3f ? -87.3f : x;
    x = x > 88.7f ? 88.7f : x;
    float k = (x * 1.44269504088896341f + 12582912.0f) - 12582912.0f; /* round to nearest: |r| <= ln2 / 2 */
    float r = x - k * 0.693359375f;
    r = r + k * 2.12194440e-4f;
    float p = 1.9875691500e-4f;
    p = p * r + 1.3981999507e-3f;
    p = p * r + 8.3334519073e-3f;
    p = p * r + 4.1665795894e-2f;
    p = p * r + 1.6666665459e-1f;
    p = p * r + 5.0000001201e-1f;
    p = p * r * r + r + 1.0f;
    union { int32_t i; float f; } scale = {.i = ((int32_t)k + 127) << 23};
    return p * scale.f;
}

void jal_silu_mul(const float *gu, float *out, int64_t rows, int64_t inter, int nthreads) {
    int nt = rows * inter >= SERIAL_ELEMS ? nthreads : 1;
#pragma omp parallel for num_threads(nt) schedule(static)
    for (int64_t r = 0; r < rows; r++) {
        const float *g = gu + r * 2 * inter, *u = g + inter;
        float *o = out + r * inter;
#pragma omp simd
        for (int64_t i = 0; i < inter; i++) o[i] = g[i] / (1.0f + exp_f(-g[i])) * u[i];
    }
}

/* qkv [rows, h + 2 kvh, d]: q and k heads rotated in place (pairs (i, i + d/2); cos [rows, d] repeats the
 * half-angles' cosines twice, sin holds (-sin, +sin)), then k and v copied to k_cache / v_cache rows
 * slots[r] (caches [slots, kvh, d]); slots may be NULL (no cache write) */
void jal_rope_store(float *qkv, const float *cos_, const float *sin_, const int64_t *slots, float *k_cache,
                    float *v_cache, int64_t rows, int64_t h, int64_t kvh, int64_t d, int nthreads) {
    const int64_t heads = h + 2 * kvh, half = d / 2;
    int nt = rows * heads * d >= SERIAL_ELEMS ? nthreads : 1;
#pragma omp parallel for num_threads(nt) schedule(static)
    for (int64_t r = 0; r < rows; r++) {
        const float *c = cos_ + r * d, *s = sin_ + r * d;
        for (int64_t hd = 0; hd < h + kvh; hd++) {
            float *x = qkv + (r * heads + hd) * d;
#pragma omp simd
            for (int64_t i = 0; i < half; i++) {
                float a = x[i], b = x[i + half];
                x[i] = a * c[i] + b * s[i];
                x[i + half] = b * c[i + half] + a * s[i + half];
            }
        }
        if (slots) {
            const float *kv = qkv + (r * heads + h) * d;
            memcpy(k_cache + slots[r] * kvh * d, kv, (size_t)(kvh * d) * sizeof(float));
            memcpy(v_cache + slots[r] * kvh * d, kv + kvh * d, (size_t)(kvh * d) * sizeof(float));
        }
    }
}
