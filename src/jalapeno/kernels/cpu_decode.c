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

/* one query head over the context; scores: scratch of ctx floats */
static void attend(const float *q, const float *k_cache, const float *v_cache, const int32_t *table,
                   int64_t ctx, int64_t bs, int64_t nkv, int64_t g, int64_t d, float scale, float *scores,
                   float *out) {
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
    for (int64_t i = 0; i < d; i++) out[i] = 0.f;
    for (int64_t j = 0; j < ctx; j++) {
        int64_t slot = (int64_t)table[j / bs] * bs + j % bs;
        const float *v = v_cache + (slot * nkv + g) * d;
        float p = scores[j] * inv;
        int64_t i = 0;
        for (; i + 8 <= d; i += 8) *(v8f *)(out + i) = load8(out + i) + p * load8(v + i);
        for (; i < d; i++) out[i] += p * v[i];
    }
}

static inline float silu(float x) { return x / (1.0f + expf(-x)); }

/* B sequences, one new token each: h [B, H] (embedded tokens in, final hidden states out), cos/sin [B, d],
 * tables [B, max_blocks] (each sequence's block table, padded), ctx [B] (tokens in each sequence's cache
 * after this step, the new one included), logits [B, V] out.
 * Returns 0 on success, 1 if scratch memory could not be allocated (nothing is written then). */
int jal_decode_step(const jal_model *m, int64_t B, float *h, const float *cos_, const float *sin_,
                    const int32_t *tables, int64_t max_blocks, const int64_t *ctx, float *logits, int nthreads) {
    const int64_t H = m->hidden, nh = m->n_heads, nkv = m->n_kv, d = m->head_dim, I = m->inter;
    const int64_t bs = m->block_size, nqkv = (nh + 2 * nkv) * d, group = nh / nkv;
    if (nthreads < 1) nthreads = 1;
    int64_t max_ctx = 1;
    for (int64_t b = 0; b < B; b++) max_ctx = ctx[b] > max_ctx ? ctx[b] : max_ctx;
    /* shared: q/k/v rows, attention outputs, gate/up rows; per thread: the normed inputs, attention scores */
    size_t shared_n = (size_t)(B * (nqkv + nh * d + 2 * I));
    size_t per_thread = (size_t)(B * H + max_ctx + 8);
    float *buf = (float *)malloc(sizeof(float) * (shared_n + per_thread * (size_t)nthreads));
    if (!buf) return 1;
    float *qkv = buf, *att = qkv + B * nqkv, *gu = att + B * nh * d;
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
        float *xn = buf + shared_n + per_thread * (size_t)tid; /* [B, H] */
        float *scores = xn + B * H;
        int64_t r0, r1;
        for (int64_t l = 0; l < m->n_layers; l++) {
            const jal_layer *L = m->layers + l;
            /* attention block: every thread normalises all B rows (cheap) so the GEMM needs no extra barrier */
            for (int64_t b = 0; b < B; b++) rmsnorm(h + b * H, L->in_norm, xn + b * H, H, L->eps);
            share(nqkv, tid, nt, &r0, &r1);
            gemm_rows(L->qkv_w, xn, qkv, B, H, H, nqkv, r0, r1, 0);
            if (L->qkv_b)
                for (int64_t b = 0; b < B; b++)
                    for (int64_t r = r0; r < r1; r++) qkv[b * nqkv + r] += L->qkv_b[r];
            barrier_wait(&bar, &sense);
            for (int64_t job = tid; job < B * (nh + nkv); job += nt) { /* (sequence, q head | k head) */
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
            barrier_wait(&bar, &sense);
            for (int64_t job = tid; job < B * nh; job += nt) { /* (sequence, q head) */
                int64_t b = job / nh, hd = job % nh;
                attend(qkv + b * nqkv + hd * d, L->k_cache, L->v_cache, tables + b * max_blocks, ctx[b], bs, nkv,
                       hd / group, d, L->scale, scores, att + (b * nh + hd) * d);
            }
            barrier_wait(&bar, &sense);
            share(H, tid, nt, &r0, &r1);
            gemm_rows(L->o_w, att, h, B, nh * d, nh * d, H, r0, r1, 1); /* residual: h += o_proj(att) */
            if (L->o_b)
                for (int64_t b = 0; b < B; b++)
                    for (int64_t r = r0; r < r1; r++) h[b * H + r] += L->o_b[r];
            barrier_wait(&bar, &sense);
            /* MLP block: this thread's gate rows and the same up rows, so SiLU(gate) * up needs no barrier */
            for (int64_t b = 0; b < B; b++) rmsnorm(h + b * H, L->post_norm, xn + b * H, H, L->eps);
            share(I, tid, nt, &r0, &r1);
            gemm_rows(L->gu_w, xn, gu, B, H, H, 2 * I, r0, r1, 0);
            gemm_rows(L->gu_w, xn, gu, B, H, H, 2 * I, I + r0, I + r1, 0); /* up rows */
            for (int64_t b = 0; b < B; b++)
                for (int64_t r = r0; r < r1; r++) gu[b * 2 * I + r] = silu(gu[b * 2 * I + r]) * gu[b * 2 * I + I + r];
            barrier_wait(&bar, &sense);
            share(H, tid, nt, &r0, &r1); /* residual: h += down_proj(act), act = gu's first I of each row */
            gemm_rows(L->down_w, gu, h, B, I, 2 * I, H, r0, r1, 1);
            barrier_wait(&bar, &sense);
        }
        /* final norm and LM head */
        for (int64_t b = 0; b < B; b++) rmsnorm(h + b * H, m->final_norm, xn + b * H, H, m->final_eps);
        share(m->vocab, tid, nt, &r0, &r1);
        gemm_rows(m->lm_head, xn, logits, B, H, H, m->vocab, r0, r1, 0);
    }
    free(buf);
    return 0;
}
