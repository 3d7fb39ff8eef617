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
 *   jal_causal_attention  causal flash attention of fresh prompts (a prefill from position 0) over their own
 *                    keys, GQA heads of one KV head stacked per tile (below)                 instead of SDPA
 *
 * Plain C + OpenMP, built at first use by jalapeno.kernels.cpu_build like cpu_decode.c (it shares torch's
 * already-loaded libgomp: one thread pool). Each call splits rows over `nthreads` threads. All tensors are
 * float32 and contiguous (the Python side checks; it falls back to PyTorch ops otherwise).
 */
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
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

/* ---- causal attention of fresh prompts (a prefill from position 0) ----
 *
 * jal_causal_attention: b prompts of n tokens each, every one attending causally over its own keys (no cache):
 * q [b n, h, d] (row stride qs), k [b n, kvh, d] (row stride ks), v [b n, kvh, dv] (row stride vs), heads
 * contiguous inside a row (views of the fused q/k/v GEMM output), out [b n, h, dv] contiguous. GQA: query head
 * hd reads kv head hd / (h / kvh).
 * How: the keys of each (prompt, kv head) are packed once as K^T and V in panels of 16 columns (zero padded),
 * then work items = (prompt, kv head, tile of R positions) run largest first: a tile stacks the
 * G = h / kvh query heads of its R positions (G R rows, so K and V are read once for all of them) and walks the
 * keys up to its last position in blocks of ATT_KB with an online softmax (flash attention): S = Q K^T by a
 * 6 x 16 outer-product micro-kernel (q pre-scaled), the causal mask and exp in one pass, O += P V by a 6 x 16
 * micro-kernel. Blocks above the diagonal are never computed. */
typedef float v8 __attribute__((vector_size(32), aligned(4)));
static inline v8 ld8(const float *p) { return *(const v8 *)p; }
static inline void st8(float *p, v8 x) { *(v8 *)p = x; }
#ifdef __AVX__
#include <immintrin.h>
/* one float to all lanes, straight from memory (`(v8){} + *p` costs a scalar add first: +0 + x is not x for -0) */
static inline v8 bc8(const float *p) { return (v8)_mm256_broadcast_ss(p); }
#else
static inline v8 bc8(const float *p) { return (v8){} + *p; }
#endif

#define ATT_KB 128 /* keys per block */
#define ATT_ROWS 96 /* query rows per tile (G heads x R positions), about */

static inline int64_t up16(int64_t x) { return (x + 15) / 16 * 16; }

/* S[6][16] (row stride lds) = Q[6][d] (row stride d) . Kt[d][16] (row stride ldk) */
static void att_qk(const float *Q, int64_t d, const float *Kt, int64_t ldk, float *S, int64_t lds) {
    v8 a00 = {0}, a01 = {0}, a10 = {0}, a11 = {0}, a20 = {0}, a21 = {0}, a30 = {0}, a31 = {0}, a40 = {0},
       a41 = {0}, a50 = {0}, a51 = {0};
    for (int64_t kk = 0; kk < d; kk++) {
        v8 k0 = ld8(Kt + kk * ldk), k1 = ld8(Kt + kk * ldk + 8), q;
        q = bc8(Q + kk); a00 += q * k0; a01 += q * k1;
        q = bc8(Q + d + kk); a10 += q * k0; a11 += q * k1;
        q = bc8(Q + 2 * d + kk); a20 += q * k0; a21 += q * k1;
        q = bc8(Q + 3 * d + kk); a30 += q * k0; a31 += q * k1;
        q = bc8(Q + 4 * d + kk); a40 += q * k0; a41 += q * k1;
        q = bc8(Q + 5 * d + kk); a50 += q * k0; a51 += q * k1;
    }
    st8(S, a00); st8(S + 8, a01); st8(S + lds, a10); st8(S + lds + 8, a11);
    st8(S + 2 * lds, a20); st8(S + 2 * lds + 8, a21); st8(S + 3 * lds, a30); st8(S + 3 * lds + 8, a31);
    st8(S + 4 * lds, a40); st8(S + 4 * lds + 8, a41); st8(S + 5 * lds, a50); st8(S + 5 * lds + 8, a51);
}

/* O[6][16] (row stride ldo) += P[6][nk] (row stride ldp) . V[nk][16] (row stride ldv) */
static void att_pv(const float *P, int64_t ldp, const float *V, int64_t ldv, int64_t nk, float *O, int64_t ldo) {
    v8 a00 = ld8(O), a01 = ld8(O + 8), a10 = ld8(O + ldo), a11 = ld8(O + ldo + 8), a20 = ld8(O + 2 * ldo),
       a21 = ld8(O + 2 * ldo + 8), a30 = ld8(O + 3 * ldo), a31 = ld8(O + 3 * ldo + 8), a40 = ld8(O + 4 * ldo),
       a41 = ld8(O + 4 * ldo + 8), a50 = ld8(O + 5 * ldo), a51 = ld8(O + 5 * ldo + 8);
    for (int64_t j = 0; j < nk; j++) {
        v8 v0 = ld8(V + j * ldv), v1 = ld8(V + j * ldv + 8), p;
        p = bc8(P + j); a00 += p * v0; a01 += p * v1;
        p = bc8(P + ldp + j); a10 += p * v0; a11 += p * v1;
        p = bc8(P + 2 * ldp + j); a20 += p * v0; a21 += p * v1;
        p = bc8(P + 3 * ldp + j); a30 += p * v0; a31 += p * v1;
        p = bc8(P + 4 * ldp + j); a40 += p * v0; a41 += p * v1;
        p = bc8(P + 5 * ldp + j); a50 += p * v0; a51 += p * v1;
    }
    st8(O, a00); st8(O + 8, a01); st8(O + ldo, a10); st8(O + ldo + 8, a11);
    st8(O + 2 * ldo, a20); st8(O + 2 * ldo + 8, a21); st8(O + 3 * ldo, a30); st8(O + 3 * ldo + 8, a31);
    st8(O + 4 * ldo, a40); st8(O + 4 * ldo + 8, a41); st8(O + 5 * ldo, a50); st8(O + 5 * ldo + 8, a51);
}

/* one tile: rows (hh, i) = query head g G + hh at query row p0 + i (position off + p0 + i: off keys are cached
 * before the first query), i < rc; Kt, Vp of its kv head in panels of 16
 * columns (Kt [np / 16][d][16]: keys j..j+15, Vp [dvp / 16][np][16]: value columns c..c+15, so each micro-kernel
 * reads one contiguous panel; a power-of-two row stride would map its rows onto a few L1 sets); scratch Qp [mp][d], S [mp][ATT_KB], O [mp][dvp], mx/l/pos [mp] */
static void att_tile(const float *q, int64_t qs, float *out, int64_t h, int64_t d, int64_t dv, int64_t G,
                     int64_t g, int64_t p0, int64_t rc, int64_t off, float scale, const float *Kt, int64_t np,
                     const float *Vp, int64_t dvp, float *Qp, float *S, float *O, float *mx, float *l, int64_t *pos) {
    const int64_t m = G * rc, mp = (m + 5) / 6 * 6;
    for (int64_t r = 0; r < mp; r++) {
        int64_t hh = r < m ? r / rc : 0, i = r < m ? r % rc : 0;
        const float *src = q + (p0 + i) * qs + (g * G + hh) * d;
        for (int64_t kk = 0; kk < d; kk++) Qp[r * d + kk] = src[kk] * scale;
        pos[r] = off + p0 + i;
        mx[r] = -INFINITY;
        l[r] = 0.f;
        memset(O + r * dvp, 0, (size_t)dvp * sizeof(float));
    }
    const int64_t kend = off + p0 + rc; /* keys 0 .. kend-1 are visible to some row */
    for (int64_t kb0 = 0; kb0 < kend; kb0 += ATT_KB) {
        const int64_t kbn = kend - kb0 < ATT_KB ? kend - kb0 : ATT_KB, kbp = up16(kbn);
        for (int64_t r0 = 0; r0 < mp; r0 += 6)
            for (int64_t j = 0; j < kbp; j += 16) att_qk(Qp + r0 * d, d, Kt + (kb0 + j) * d, 16, S + r0 * ATT_KB + j, ATT_KB);
        for (int64_t r = 0; r < mp; r++) {
            float *s = S + r * ATT_KB;
            int64_t lim = pos[r] - kb0 + 1; /* keys of this block row r sees */
            lim = lim > kbn ? kbn : lim;
            if (lim <= 0) {
                memset(s, 0, (size_t)kbp * sizeof(float));
                continue;
            }
            float bm = s[0];
#pragma omp simd reduction(max : bm)
            for (int64_t j = 1; j < lim; j++) bm = s[j] > bm ? s[j] : bm;
            const float mnew = bm > mx[r] ? bm : mx[r], alpha = expf(mx[r] - mnew);
            float sum = 0.f;
#pragma omp simd reduction(+ : sum)
            for (int64_t j = 0; j < lim; j++) {
                float e = exp_f(s[j] - mnew);
                s[j] = e;
                sum += e;
            }
            for (int64_t j = lim; j < kbp; j++) s[j] = 0.f;
            l[r] = l[r] * alpha + sum;
            mx[r] = mnew;
            if (alpha != 1.f) {
                float *o = O + r * dvp;
#pragma omp simd
                for (int64_t c = 0; c < dvp; c++) o[c] *= alpha;
            }
        }
        for (int64_t r0 = 0; r0 < mp; r0 += 6)
            for (int64_t c = 0; c < dvp; c += 16)
                att_pv(S + r0 * ATT_KB, ATT_KB, Vp + (c * np + kb0 * 16), 16, kbp, O + r0 * dvp + c, dvp);
    }
    for (int64_t r = 0; r < m; r++) {
        float *dst = out + ((p0 + r % rc) * h + g * G + r / rc) * dv;
        const float inv = 1.0f / l[r];
        for (int64_t c = 0; c < dv; c++) dst[c] = O[r * dvp + c] * inv;
    }
}

/* off > 0: each prompt's n queries follow off cached keys (a later chunk of a prompt): k and v hold b (off + n)
 * rows, the chunk's own keys last, and query i sits at position off + i (it sees keys 0 .. off + i).
 * returns 0, or -1 when out of memory (nothing written) */
int jal_causal_attention(const float *q, const float *k, const float *v, float *out, int64_t b, int64_t n,
                         int64_t h, int64_t kvh, int64_t d, int64_t dv, int64_t qs, int64_t ks, int64_t vs,
                         float scale, int nthreads, int64_t off) {
    const int64_t nk = off + n, G = h / kvh, np = up16(nk), dvp = up16(dv), heads = b * kvh;
    int64_t R = ATT_ROWS / G;
    R = R < 1 ? 1 : R > n ? n : R;
    const int64_t tiles = (n + R - 1) / R, mpmax = (G * R + 5) / 6 * 6;
    float *pack = malloc((size_t)(heads * (d * np + np * dvp)) * sizeof(float));
    if (!pack) return -1;
    int failed = 0;
#pragma omp parallel num_threads(nthreads)
    {
#pragma omp for schedule(static)
        for (int64_t bh = 0; bh < heads; bh++) { /* K^T and V of (prompt, kv head) in panels (att_tile), padded */
            const int64_t bi = bh / kvh, g = bh % kvh;
            float *Kt = pack + bh * (d * np + np * dvp), *Vp = Kt + d * np;
            memset(Kt, 0, (size_t)(d * np + np * dvp) * sizeof(float));
            for (int64_t j = 0; j < nk; j++) {
                const float *kr = k + (bi * nk + j) * ks + g * d, *vr = v + (bi * nk + j) * vs + g * dv;
                float *kt = Kt + j / 16 * d * 16 + j % 16;
                for (int64_t kk = 0; kk < d; kk++) kt[kk * 16] = kr[kk];
                for (int64_t c = 0; c < dv; c += 16)
                    memcpy(Vp + (c / 16 * np + j) * 16, vr + c, (size_t)(dv - c < 16 ? dv - c : 16) * sizeof(float));
            }
        }
        float *scratch = malloc((size_t)(mpmax * (d + ATT_KB + dvp + 2)) * sizeof(float));
        int64_t *pos = malloc((size_t)mpmax * sizeof(int64_t));
        if (!scratch || !pos) {
#pragma omp atomic write
            failed = 1;
        }
#pragma omp barrier
        if (!failed) {
            float *Qp = scratch, *S = Qp + mpmax * d, *O = S + mpmax * ATT_KB, *mx = O + mpmax * dvp, *l = mx + mpmax;
#pragma omp for schedule(dynamic, 1)
            for (int64_t it = 0; it < heads * tiles; it++) {
                const int64_t t = tiles - 1 - it / heads, bh = it % heads, bi = bh / kvh, g = bh % kvh;
                const int64_t p0 = t * R, rc = n - p0 < R ? n - p0 : R;
                const float *Kt = pack + bh * (d * np + np * dvp);
                att_tile(q + bi * n * qs, qs, out + bi * n * h * dv, h, d, dv, G, g, p0, rc, off, scale, Kt, np,
                         Kt + d * np, dvp, Qp, S, O, mx, l, pos);
            }
        }
        free(scratch);
        free(pos);
    }
    free(pack);
    return failed ? -1 : 0;
}
