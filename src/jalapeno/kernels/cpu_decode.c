/* One-token decode step of a dense pre-norm GQA decoder (Llama / SmolLM2 / Mistral / Qwen2 / Qwen3), float32,
 * on CPU: every layer (RMSNorm, fused q/k/v GEMV (+bias), optional per-head QK RMSNorm, rotate-half RoPE, write
 * of the new K/V into the paged cache, attention over the block table, o_proj + residual, RMSNorm, fused
 * gate/up GEMV, SiLU*up, down_proj + residual), then the final RMSNorm and the LM head, in one call.
 *
 * Why: at batch 1 a decode step must stream every weight byte once; done as ~30 PyTorch ops per layer, the
 * small ops and the single-threaded one-row GEMVs leave the step far from the memory-bandwidth roofline.
 * Here all threads stay in one OpenMP parallel region for the whole step: each GEMV's rows are split evenly
 * between the threads, the small per-head work is split by head, and the phases meet at spin barriers.
 *
 * Layouts (all row-major, contiguous, float32):
 *   weights      [out, in] as in nn.Linear; fused q/k/v rows are q (nh*d) then k (nkv*d) then v (nkv*d);
 *                fused gate/up rows are gate (I) then up (I).
 *   caches       [num_blocks, block_size, nkv, d]; token p of the sequence lives in block
 *                block_table[p / block_size] at offset p % block_size.
 *   cos, sin     [d] for the new token's position, laid out as jalapeno.backends.torch.rope.rope_cos_sin:
 *                x' = x * cos + swap_halves(x) * sin  (sin already holds (-sin, +sin)).
 * Rows: each of the B rows is one new token with its own block table row and context length, so the rows of a
 * step may be one token of B sequences (decode) or several consecutive tokens of one sequence (a speculative
 * verification or a prefill chunk): every row's K/V is written before any row attends (a barrier apart), so
 * row j of a sequence sees rows < j of the same step exactly as causal attention does.
 * GEMMs: below panel_min rows, dot-product tiles over row-major activations (bandwidth-bound steps: each weight
 * row once, several rows sharing each load of x); from panel_min rows, activations are kept in "panels" of
 * 2 VW rows ([k][2 VW], then one [k][VW] panel for the rest, zero padded) and an outer-product micro-kernel
 * (6 weight rows x 2 vectors, or 12 x 1: 12 accumulators, weights broadcast from their rows) runs the
 * compute-bound steps near the FMA peak. VW = 16 floats with AVX-512, else 8 (-march=native at build time).
 * Built and loaded by jalapeno.kernels.cpu_build; the Python side is jalapeno.backends.torch.fused_decode.
 * Portable C (GCC/Clang vector extensions); no OpenMP -> one thread.
 */
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#ifdef _OPENMP
#include <omp.h>
#endif
#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>
#define CPU_RELAX() _mm_pause()
#else
#define CPU_RELAX() ((void)0)
#endif
#include <sched.h>

typedef float v8f __attribute__((vector_size(32), aligned(4)));

typedef struct {
    const float *in_norm, *post_norm;  /* [H] */
    const float *qkv_w, *qkv_b;        /* [(nh + 2 nkv) d, H], [(nh + 2 nkv) d] or NULL */
    const float *q_norm, *k_norm;      /* [d] or NULL (Qwen3) */
    const float *o_w, *o_b;            /* [H, nh d], [H] or NULL */
    const float *gu_w;                 /* [2 I, H] */
    const float *down_w;               /* [H, I] */
    float *k_cache, *v_cache;          /* [num_blocks, block_size, nkv, d] */
    float eps, qk_eps, scale, _pad;
} jal_layer;

typedef struct {
    int64_t hidden, n_heads, n_kv, head_dim, inter, vocab, block_size, n_layers;
    const float *final_norm; /* [H] */
    const float *lm_head;    /* [V, H] */
    float final_eps, _pad;
    const jal_layer *layers;
} jal_model;

/* ---- spin barrier (sense reversing); yields after a while so an oversubscribed machine still progresses ---- */
typedef struct {
    volatile int count;
    volatile int sense;
    int n;
} barrier_t;

static void barrier_wait(barrier_t *b, int *local_sense) {
    if (b->n <= 1) return;
    int s = !*local_sense;
    *local_sense = s;
    if (__atomic_add_fetch(&b->count, 1, __ATOMIC_ACQ_REL) == b->n) {
        __atomic_store_n(&b->count, 0, __ATOMIC_RELAXED);
        __atomic_store_n(&b->sense, s, __ATOMIC_RELEASE);
        return;
    }
    long spins = 0;
    while (__atomic_load_n(&b->sense, __ATOMIC_ACQUIRE) != s) {
        if (++spins < 20000) CPU_RELAX();
        else sched_yield();
    }
}

/* ---- small vector helpers ---- */
static inline float hsum8(v8f v) {
    float s = 0.f;
    for (int i = 0; i < 8; i++) s += v[i];
    return s;
}

static inline v8f load8(const float *p) { return *(const v8f *)p; }

static float dot(const float *a, const float *b, int64_t n) {
    v8f acc = {0};
    int64_t i = 0;
    for (; i + 8 <= n; i += 8) acc += load8(a + i) * load8(b + i);
    float s = hsum8(acc);
    for (; i < n; i++) s += a[i] * b[i];
    return s;
}

/* Y[b * ldy + r] (=, or += when acc) W[r, :] . X[b, :] for weight rows r0..r1-1 and the B rows of X
 * ([B, in], row stride ldx). Each weight row is read from memory once: B == 1 takes 4 weight rows per pass (they
 * share each load of x); up to 8 rows of X, each weight row is multiplied by tiles of 8, 4 and 1 rows of X
 * while it sits in L1; from 20 rows of X on, pairs of weight rows by tiles of 4 (rows2_tile4). */
static inline void store(float *y, float s, int acc) { *y = acc ? *y + s : s; }

#define ROW_TILE(T)                                                                                         \
    static inline void row_tile##T(const float *w, const float *X, float *Y, int64_t in, int64_t ldy,      \
                                   int64_t ldx, int64_t r, int64_t b0, int acc) {                                         \
        v8f a[T];                                                                                           \
        for (int b = 0; b < T; b++) a[b] = (v8f){0};                                                        \
        int64_t i = 0;                                                                                      \
        for (; i + 8 <= in; i += 8) {                                                                       \
            v8f wv = load8(w + i);                                                                          \
            for (int b = 0; b < T; b++) a[b] += wv * load8(X + (b0 + b) * ldx + i);                          \
        }                                                                                                   \
        for (int b = 0; b < T; b++) {                                                                       \
            float s = hsum8(a[b]);                                                                          \
            for (int64_t k = i; k < in; k++) s += w[k] * X[(b0 + b) * ldx + k];                              \
            store(Y + (b0 + b) * ldy + r, s, acc);                                                          \
        }                                                                                                   \
    }
ROW_TILE(8)
ROW_TILE(4)
ROW_TILE(1)

/* two weight rows times four X rows: 8 accumulators, 6 loads per 8 FMAs (each x load serves two weight rows),
 * which keeps more sequences' worth of X traffic off L2 than one row times eight (measured 1.2-1.5x faster
 * from 16 sequences on; slower at 8, where the step is still bandwidth-bound) */
static inline void rows2_tile4(const float *w0, const float *w1, const float *X, float *Y, int64_t in, int64_t ldx,
                               int64_t ldy, int64_t r, int64_t b0, int acc) {
    const float *x0 = X + b0 * ldx, *x1 = x0 + ldx, *x2 = x1 + ldx, *x3 = x2 + ldx;
    v8f a00 = {0}, a01 = {0}, a02 = {0}, a03 = {0}, a10 = {0}, a11 = {0}, a12 = {0}, a13 = {0};
    int64_t i = 0;
    for (; i + 8 <= in; i += 8) {
        v8f u = load8(w0 + i), v = load8(w1 + i);
        v8f p = load8(x0 + i), q = load8(x1 + i), s = load8(x2 + i), t = load8(x3 + i);
        a00 += u * p;
        a01 += u * q;
        a02 += u * s;
        a03 += u * t;
        a10 += v * p;
        a11 += v * q;
        a12 += v * s;
        a13 += v * t;
    }
    float o[8] = {hsum8(a00), hsum8(a01), hsum8(a02), hsum8(a03), hsum8(a10), hsum8(a11), hsum8(a12), hsum8(a13)};
    for (; i < in; i++) {
        o[0] += w0[i] * x0[i];
        o[1] += w0[i] * x1[i];
        o[2] += w0[i] * x2[i];
        o[3] += w0[i] * x3[i];
        o[4] += w1[i] * x0[i];
        o[5] += w1[i] * x1[i];
        o[6] += w1[i] * x2[i];
        o[7] += w1[i] * x3[i];
    }
    for (int j = 0; j < 4; j++) {
        store(Y + (b0 + j) * ldy + r, o[j], acc);
        store(Y + (b0 + j) * ldy + r + 1, o[4 + j], acc);
    }
}

static void gemm_rows(const float *W, const float *X, float *Y, int64_t B, int64_t in, int64_t ldx, int64_t ldy,
                      int64_t r0, int64_t r1, int acc) {
    int64_t r = r0;
    if (B >= 20) {
        for (; r + 2 <= r1; r += 2) {
            const float *w0 = W + r * in, *w1 = w0 + in;
            int64_t b = 0;
            for (; b + 4 <= B; b += 4) rows2_tile4(w0, w1, X, Y, in, ldx, ldy, r, b, acc);
            for (; b < B; b++) {
                row_tile1(w0, X, Y, in, ldy, ldx, r, b, acc);
                row_tile1(w1, X, Y, in, ldy, ldx, r + 1, b, acc);
            }
        }
    }
    if (B == 1) {
        const float *x = X;
        for (; r + 4 <= r1; r += 4) {
            const float *w0 = W + r * in, *w1 = w0 + in, *w2 = w1 + in, *w3 = w2 + in;
            v8f a0 = {0}, a1 = {0}, a2 = {0}, a3 = {0};
            int64_t i = 0;
            for (; i + 8 <= in; i += 8) {
                v8f xv = load8(x + i);
                a0 += load8(w0 + i) * xv;
                a1 += load8(w1 + i) * xv;
                a2 += load8(w2 + i) * xv;
                a3 += load8(w3 + i) * xv;
            }
            float s0 = hsum8(a0), s1 = hsum8(a1), s2 = hsum8(a2), s3 = hsum8(a3);
            for (; i < in; i++) {
                s0 += w0[i] * x[i];
                s1 += w1[i] * x[i];
                s2 += w2[i] * x[i];
                s3 += w3[i] * x[i];
            }
            store(Y + r, s0, acc);
            store(Y + r + 1, s1, acc);
            store(Y + r + 2, s2, acc);
            store(Y + r + 3, s3, acc);
        }
    }
    for (; r < r1; r++) {
        const float *w = W + r * in;
        int64_t b = 0;
        for (; b + 8 <= B; b += 8) row_tile8(w, X, Y, in, ldy, ldx, r, b, acc);
        for (; b + 4 <= B; b += 4) row_tile4(w, X, Y, in, ldy, ldx, r, b, acc);
        for (; b < B; b++) row_tile1(w, X, Y, in, ldy, ldx, r, b, acc);
    }
}

/* ---- outer-product micro-kernels over activation panels ---- */
#if defined(__x86_64__) || defined(__i386__)
#ifdef __AVX512F__
#define VW 16
typedef float vf __attribute__((vector_size(64), aligned(4)));
static inline vf splatp(const float *p) { return (vf)_mm512_set1_ps(*p); }
#else
#define VW 8
typedef float vf __attribute__((vector_size(32), aligned(4)));
#ifdef __AVX__
static inline vf splatp(const float *p) { return (vf)_mm256_broadcast_ss(p); }
#else
static inline vf splatp(const float *p) { return (vf){} + *p; }
#endif
#endif
#else
#define VW 8
typedef float vf __attribute__((vector_size(32), aligned(4)));
static inline vf splatp(const float *p) { return (vf){} + *p; }
#endif
static inline vf loadv(const float *p) { return *(const vf *)p; }

/* Activation panels: an activation of nb rows and n columns is stored as panels of 2 VW rows ([n][2 VW] each;
 * the last one may be part padding), then, when at most VW rows are left, one panel of VW rows ([n][VW]);
 * element (b, k) of it is at pidx(b, k, n, nb). The outer-product kernels read one panel row (2 VW or VW
 * values) per k. */
static inline int64_t wide_rows(int64_t nb) { return (nb + VW - 1) / (2 * VW) * (2 * VW); }

static inline int64_t pidx(int64_t b, int64_t k, int64_t n, int64_t nb) {
    int64_t full = wide_rows(nb);
    if (b < full) {
        int64_t b0 = b / (2 * VW) * (2 * VW);
        return b0 * n + k * 2 * VW + (b - b0);
    }
    return full * n + k * VW + (b - full);
}

/* rows of the panels that hold nb rows (padding included) */
static inline int64_t panel_rows(int64_t nb) { return wide_rows(nb) + (nb > wide_rows(nb) ? VW : 0); }

/* one accumulator vector (weight row `row`, VW panel rows) out: into a panel-laid-out Y (ptrans: Y = the
 * panel's base, width ldy) or a row-major Y (Y = its first panel row, row stride ldy; nvalid real rows) */
static inline void put(vf a, float *Y, int64_t ldy, int64_t row, int nvalid, int acc, int ptrans) {
    if (ptrans) {
        vf *p = (vf *)(Y + row * ldy);
        *p = acc ? *p + a : a;
        return;
    }
    float o[VW];
    *(vf *)o = a;
    for (int j = 0; j < VW && j < nvalid; j++) {
        float *y = Y + j * ldy + row;
        *y = acc ? *y + o[j] : o[j];
    }
}

/* 6 weight rows (from row r; mr < 6 repeats row r and drops the extra sums) x one panel of 2 VW rows, over k <
 * in: 12 accumulators, per k two panel loads and six weight broadcasts */
static void mk6x2(const float *W, int64_t in, const float *x, float *Y, int64_t ldy, int64_t r, int mr,
                  int nvalid, int acc, int ptrans) {
    const float *w0 = W + r * in, *w1 = mr > 1 ? w0 + in : w0, *w2 = mr > 2 ? w0 + 2 * in : w0,
                *w3 = mr > 3 ? w0 + 3 * in : w0, *w4 = mr > 4 ? w0 + 4 * in : w0, *w5 = mr > 5 ? w0 + 5 * in : w0;
    vf a00 = {0}, a01 = {0}, a10 = {0}, a11 = {0}, a20 = {0}, a21 = {0}, a30 = {0}, a31 = {0}, a40 = {0},
       a41 = {0}, a50 = {0}, a51 = {0};
    for (int64_t k = 0; k < in; k++, x += 2 * VW) {
        vf x0 = loadv(x), x1 = loadv(x + VW), w;
        w = splatp(w0 + k); a00 += w * x0; a01 += w * x1;
        w = splatp(w1 + k); a10 += w * x0; a11 += w * x1;
        w = splatp(w2 + k); a20 += w * x0; a21 += w * x1;
        w = splatp(w3 + k); a30 += w * x0; a31 += w * x1;
        w = splatp(w4 + k); a40 += w * x0; a41 += w * x1;
        w = splatp(w5 + k); a50 += w * x0; a51 += w * x1;
    }
    vf c0[6] = {a00, a10, a20, a30, a40, a50}, c1[6] = {a01, a11, a21, a31, a41, a51};
    float *Y1 = ptrans ? Y + VW : Y + VW * ldy;
    for (int m = 0; m < mr; m++) {
        put(c0[m], Y, ldy, r + m, nvalid, acc, ptrans);
        put(c1[m], Y1, ldy, r + m, nvalid - VW, acc, ptrans);
    }
}

/* 12 weight rows x one panel of VW rows */
static void mk12x1(const float *W, int64_t in, const float *x, float *Y, int64_t ldy, int64_t r, int mr,
                   int nvalid, int acc, int ptrans) {
    const float *w[12];
    for (int m = 0; m < 12; m++) w[m] = W + (r + (m < mr ? m : 0)) * in;
    const float *w0 = w[0], *w1 = w[1], *w2 = w[2], *w3 = w[3], *w4 = w[4], *w5 = w[5], *w6 = w[6], *w7 = w[7],
                *w8 = w[8], *w9 = w[9], *w10 = w[10], *w11 = w[11];
    vf a0 = {0}, a1 = {0}, a2 = {0}, a3 = {0}, a4 = {0}, a5 = {0}, a6 = {0}, a7 = {0}, a8 = {0}, a9 = {0},
       a10 = {0}, a11 = {0};
    for (int64_t k = 0; k < in; k++, x += VW) {
        vf x0 = loadv(x);
        a0 += splatp(w0 + k) * x0; a1 += splatp(w1 + k) * x0; a2 += splatp(w2 + k) * x0;
        a3 += splatp(w3 + k) * x0; a4 += splatp(w4 + k) * x0; a5 += splatp(w5 + k) * x0;
        a6 += splatp(w6 + k) * x0; a7 += splatp(w7 + k) * x0; a8 += splatp(w8 + k) * x0;
        a9 += splatp(w9 + k) * x0; a10 += splatp(w10 + k) * x0; a11 += splatp(w11 + k) * x0;
    }
    vf c[12] = {a0, a1, a2, a3, a4, a5, a6, a7, a8, a9, a10, a11};
    for (int m = 0; m < mr; m++) put(c[m], Y, ldy, r + m, nvalid, acc, ptrans);
}

/* Y (=, or += when acc) W[r0:r1] . X for the nb rows of X, X in panels (xn columns per panel, the GEMM uses
 * the first in <= xn of them). Y is row-major [nb][ldy] or, with ptrans, panels of ldy columns. Blocks of 12
 * weight rows: every 2 VW panel (two 6x2 kernels), then the VW panel (one 12x1 kernel), so the 12 rows come
 * from memory once and are reused from L1/L2 for every panel. */
static void gemm_panels(const float *W, const float *X, float *Y, int64_t nb, int64_t in, int64_t xn, int64_t ldy,
                        int64_t r0, int64_t r1, int acc, int ptrans) {
    int64_t full = wide_rows(nb), nbp = panel_rows(nb);
    for (int64_t r = r0; r < r1; r += 12) {
        int mr = r1 - r < 12 ? (int)(r1 - r) : 12;
        for (int64_t b = 0; b < full; b += 2 * VW) {
            const float *x = X + b * xn;
            float *y = Y + b * ldy; /* row b of a row-major Y, or the panel's base (ldy = columns of Y) */
            int64_t yw = ptrans ? 2 * VW : ldy;
            int nvalid = nb - b < 2 * VW ? (int)(nb - b) : 2 * VW;
            mk6x2(W, in, x, y, yw, r, mr < 6 ? mr : 6, nvalid, acc, ptrans);
            if (mr > 6) mk6x2(W, in, x, y, yw, r + 6, mr - 6, nvalid, acc, ptrans);
        }
        if (full < nbp)
            mk12x1(W, in, X + full * xn, Y + full * ldy, ptrans ? VW : ldy, r, mr, (int)(nb - full), acc, ptrans);
    }
}

/* this thread's share [*r0, *r1) of n rows, in multiples of 4 rows */
static void share(int64_t n, int tid, int nt, int64_t *r0, int64_t *r1) {
    int64_t quads = (n + 3) / 4;
    int64_t per = quads / nt, extra = quads % nt;
    int64_t q0 = tid * per + (tid < extra ? tid : extra);
    int64_t q1 = q0 + per + (tid < extra ? 1 : 0);
    *r0 = q0 * 4 < n ? q0 * 4 : n;
    *r1 = q1 * 4 < n ? q1 * 4 : n;
}

static void rmsnorm(const float *x, const float *w, float *out, int64_t n, float eps) {
    double ss = 0.0;
    for (int64_t i = 0; i < n; i++) ss += (double)x[i] * x[i];
    float r = 1.0f / sqrtf((float)(ss / n) + eps);
    for (int64_t i = 0; i < n; i++) out[i] = w[i] * (x[i] * r);
}

static void rope(float *x, const float *cos_, const float *sin_, int64_t d) {
    int64_t half = d / 2;
    for (int64_t i = 0; i < half; i++) {
        float a = x[i], b = x[i + half];
        x[i] = a * cos_[i] + b * sin_[i];
        x[i + half] = b * cos_[i + half] + a * sin_[i + half];
    }
}

/* one query head over the context; scores: scratch of ctx floats; out[i * os] for i < d */
static void attend(const float *q, const float *k_cache, const float *v_cache, const int32_t *table,
                   int64_t ctx, int64_t bs, int64_t nkv, int64_t g, int64_t d, float scale, float *scores,
                   float *acc, float *out, int64_t os) {
    float mx = -INFINITY;
    for (int64_t j = 0; j < ctx; j++) {
        int64_t slot = (int64_t)table[j / bs] * bs + j % bs;
        float s = dot(q, k_cache + (slot * nkv + g) * d, d) * scale;
        scores[j] = s;
        if (s > mx) mx = s;
    }
    double den = 0.0;
    for (int64_t j = 0; j < ctx; j++) {
        float e = expf(scores[j] - mx);
        scores[j] = e;
        den += e;
    }
    float inv = (float)(1.0 / den);
    for (int64_t i = 0; i < d; i++) acc[i] = 0.f;
    for (int64_t j = 0; j < ctx; j++) {
        int64_t slot = (int64_t)table[j / bs] * bs + j % bs;
        const float *v = v_cache + (slot * nkv + g) * d;
        float p = scores[j] * inv;
        int64_t i = 0;
        for (; i + 8 <= d; i += 8) *(v8f *)(acc + i) = load8(acc + i) + p * load8(v + i);
        for (; i < d; i++) acc[i] += p * v[i];
    }
    for (int64_t i = 0; i < d; i++) out[i * os] = acc[i];
}

static inline float silu(float x) { return x / (1.0f + expf(-x)); }

/* The activations of one step: row-major, or in panels (pidx) from panel_min rows */
typedef struct {
    int64_t B, panels;
} act_t;

/* element (b, k) of an activation of n columns: row-major [B][n] or panels */
static inline int64_t aidx(const act_t *a, int64_t b, int64_t k, int64_t n) {
    return a->panels ? pidx(b, k, n, a->B) : b * n + k;
}

/* rows of Y (=, += when acc) W[r0:r1] . X: X has xn columns (the first in used), Y ldy (its layout ptrans:
 * panels like X, else row-major) */
static void gemm(const act_t *a, const float *W, const float *X, float *Y, int64_t in, int64_t xn, int64_t ldy,
                 int64_t r0, int64_t r1, int acc, int ptrans) {
    if (a->panels) gemm_panels(W, X, Y, a->B, in, xn, ldy, r0, r1, acc, ptrans);
    else gemm_rows(W, X, Y, a->B, in, xn, ldy, r0, r1, acc);
}

/* RMSNorm of rows rows[0..n) (all rows when rows is NULL) of the row-major h [.][H] into xn (layout a, n rows) */
static void norm_rows(const act_t *a, const float *h, const float *w, float *xn, int64_t H, float eps,
                      const int64_t *rows, int64_t n, float *tmp) {
    for (int64_t b = 0; b < n; b++) {
        const float *x = h + (rows ? rows[b] : b) * H;
        if (!a->panels) {
            rmsnorm(x, w, xn + b * H, H, eps);
            continue;
        }
        rmsnorm(x, w, tmp, H, eps);
        for (int64_t k = 0; k < H; k++) xn[pidx(b, k, H, a->B)] = tmp[k];
    }
}

/* q/k norms, RoPE and the K/V write of every row (rows x heads split over the threads) */
static void qk_rope_store(const jal_model *m, const jal_layer *L, float *qkv, const float *cos_, const float *sin_,
                          const int32_t *tables, int64_t max_blocks, const int64_t *ctx, int64_t B, int tid, int nt) {
    const int64_t nh = m->n_heads, nkv = m->n_kv, d = m->head_dim, bs = m->block_size, nqkv = (nh + 2 * nkv) * d;
    for (int64_t job = tid; job < B * (nh + nkv); job += nt) { /* (row, q head | k head) */
        int64_t b = job / (nh + nkv), hd = job % (nh + nkv);
        float *x = qkv + b * nqkv + hd * d;
        const float *nw = hd < nh ? L->q_norm : L->k_norm;
        if (nw) rmsnorm(x, nw, x, d, L->qk_eps);
        rope(x, cos_ + b * d, sin_ + b * d, d);
        if (hd >= nh) {
            int64_t g = hd - nh, pos = ctx[b] - 1;
            int64_t slot = (int64_t)tables[b * max_blocks + pos / bs] * bs + pos % bs;
            memcpy(L->k_cache + (slot * nkv + g) * d, x, sizeof(float) * d);
            memcpy(L->v_cache + (slot * nkv + g) * d, qkv + b * nqkv + (nh + nkv + g) * d, sizeof(float) * d);
        }
    }
}

/* One step of B rows (tokens); row b: embedded token h[b] at position ctx[b] - 1 of the sequence whose block
 * table is tables[b] (rows of one sequence share a table: see the header), cos/sin [B, d]. h [B, H] is
 * overwritten with the final hidden states; logits [n_out, V] for the rows out_rows[0..n_out) (the first n_out
 * rows in order when out_rows is NULL; n_out may be 0). panel_min: fewest rows that take the panel micro-kernels.
 * Returns 0 on success, 1 if scratch memory could not be allocated (nothing is written then). */
int jal_decode_step(const jal_model *m, int64_t B, float *h, const float *cos_, const float *sin_,
                    const int32_t *tables, int64_t max_blocks, const int64_t *ctx, const int64_t *out_rows,
                    int64_t n_out, float *logits, int nthreads, int64_t panel_min) {
    const int64_t H = m->hidden, nh = m->n_heads, nkv = m->n_kv, d = m->head_dim, I = m->inter;
    const int64_t bs = m->block_size, nqkv = (nh + 2 * nkv) * d, group = nh / nkv, HD = nh * d;
    if (nthreads < 1) nthreads = 1;
    if (!out_rows && n_out > B) n_out = B;
    const act_t A = {B, B >= panel_min && panel_min > 0}, O = {n_out, n_out >= panel_min && panel_min > 0};
    const int64_t Bp = A.panels ? panel_rows(B) : B, Op = O.panels ? panel_rows(n_out) : n_out;
    int64_t max_ctx = 1;
    for (int64_t b = 0; b < B; b++) max_ctx = ctx[b] > max_ctx ? ctx[b] : max_ctx;
    /* shared: q/k/v rows, attention outputs, gate/up rows; per thread: the normed inputs, attention scores */
    int64_t xrows = Bp > Op ? Bp : Op;
    size_t shared_n = (size_t)(B * nqkv + Bp * (HD + 2 * I));
    size_t per_thread = (size_t)(xrows * H + max_ctx + H + d + 2 * VW);
    float *buf = (float *)calloc(shared_n + per_thread * (size_t)nthreads, sizeof(float));
    if (!buf) return 1;
    float *qkv = buf, *att = qkv + B * nqkv, *gu = att + Bp * HD;
    barrier_t bar = {0, 0, nthreads};

#ifdef _OPENMP
#pragma omp parallel num_threads(nthreads)
#endif
    {
#ifdef _OPENMP
        const int tid = omp_get_thread_num(), nt = omp_get_num_threads();
#else
        const int tid = 0, nt = 1;
#endif
        int sense = 0;
        if (tid == 0) bar.n = nt; /* the runtime may give fewer threads than asked */
#ifdef _OPENMP
#pragma omp barrier
#endif
        float *xn = buf + shared_n + per_thread * (size_t)tid; /* [B, H] or panels */
        float *scores = xn + xrows * H, *tmp = scores + max_ctx, *hacc = tmp + H;
        int64_t r0, r1;
        for (int64_t l = 0; l < m->n_layers; l++) {
            const jal_layer *L = m->layers + l;
            /* attention block: every thread normalises all B rows (cheap) so the GEMM needs no extra barrier */
            norm_rows(&A, h, L->in_norm, xn, H, L->eps, NULL, B, tmp);
            share(nqkv, tid, nt, &r0, &r1);
            gemm(&A, L->qkv_w, xn, qkv, H, H, nqkv, r0, r1, 0, 0);
            if (L->qkv_b)
                for (int64_t b = 0; b < B; b++)
                    for (int64_t r = r0; r < r1; r++) qkv[b * nqkv + r] += L->qkv_b[r];
            barrier_wait(&bar, &sense);
            qk_rope_store(m, L, qkv, cos_, sin_, tables, max_blocks, ctx, B, tid, nt);
            barrier_wait(&bar, &sense);
            for (int64_t job = tid; job < B * nh; job += nt) { /* (row, q head) */
                int64_t b = job / nh, hd = job % nh;
                float *out = att + aidx(&A, b, hd * d, HD);
                attend(qkv + b * nqkv + hd * d, L->k_cache, L->v_cache, tables + b * max_blocks, ctx[b], bs, nkv,
                       hd / group, d, L->scale, scores, hacc, out, A.panels ? (b < wide_rows(B) ? 2 * VW : VW) : 1);
            }
            barrier_wait(&bar, &sense);
            share(H, tid, nt, &r0, &r1);
            gemm(&A, L->o_w, att, h, HD, HD, H, r0, r1, 1, 0); /* residual: h += o_proj(att) */
            if (L->o_b)
                for (int64_t b = 0; b < B; b++)
                    for (int64_t r = r0; r < r1; r++) h[b * H + r] += L->o_b[r];
            barrier_wait(&bar, &sense);
            /* MLP block: this thread's gate rows and the same up rows, so SiLU(gate) * up needs no barrier */
            norm_rows(&A, h, L->post_norm, xn, H, L->eps, NULL, B, tmp);
            share(I, tid, nt, &r0, &r1);
            gemm(&A, L->gu_w, xn, gu, H, H, 2 * I, r0, r1, 0, A.panels);
            gemm(&A, L->gu_w, xn, gu, H, H, 2 * I, I + r0, I + r1, 0, A.panels); /* up rows */
            for (int64_t b = 0; b < B; b++)
                for (int64_t r = r0; r < r1; r++) {
                    int64_t g = aidx(&A, b, r, 2 * I), u = aidx(&A, b, I + r, 2 * I);
                    gu[g] = silu(gu[g]) * gu[u];
                }
            barrier_wait(&bar, &sense);
            share(H, tid, nt, &r0, &r1); /* residual: h += down_proj(act), act = gu's first I of each row */
            gemm(&A, L->down_w, gu, h, I, 2 * I, H, r0, r1, 1, 0);
            barrier_wait(&bar, &sense);
        }
        /* final norm and LM head, for the rows asked for */
        norm_rows(&O, h, m->final_norm, xn, H, m->final_eps, out_rows, n_out, tmp);
        share(m->vocab, tid, nt, &r0, &r1);
        gemm(&O, m->lm_head, xn, logits, H, H, m->vocab, r0, r1, 0, 0);
    }
    free(buf);
    return 0;
}
