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

/* y[r - r0] = W[r, :] . x for rows r0..r1-1 (4 rows at a time share each load of x) */
static void gemv_rows(const float *W, const float *x, float *y, int64_t in, int64_t r0, int64_t r1) {
    int64_t r = r0;
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
        y[r - r0] = s0;
        y[r - r0 + 1] = s1;
        y[r - r0 + 2] = s2;
        y[r - r0 + 3] = s3;
    }
    for (; r < r1; r++) y[r - r0] = dot(W + r * in, x, in);
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

/* Returns 0 on success, 1 if scratch memory could not be allocated (nothing is written then). */
int jal_decode_step(const jal_model *m, float *h, const float *cos_, const float *sin_, const int32_t *table,
                    int64_t ctx, float *logits, int nthreads) {
    const int64_t H = m->hidden, nh = m->n_heads, nkv = m->n_kv, d = m->head_dim, I = m->inter;
    const int64_t bs = m->block_size, nqkv = (nh + 2 * nkv) * d, pos = ctx - 1;
    const int64_t slot = (int64_t)table[pos / bs] * bs + pos % bs;
    const int64_t group = nh / nkv;
    if (nthreads < 1) nthreads = 1;
    int64_t wide = H > I ? H : I;
    /* shared: qkv, attention out, gate/up activations; per thread: normed input, a row buffer, scores */
    size_t shared_n = (size_t)(nqkv + nh * d + I);
    size_t per_thread = (size_t)(H + wide + ctx + 8);
    float *buf = (float *)malloc(sizeof(float) * (shared_n + per_thread * (size_t)nthreads));
    if (!buf) return 1;
    float *qkv = buf, *att = qkv + nqkv, *act = att + nh * d;
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
        float *xn = buf + shared_n + per_thread * (size_t)tid;
        float *tmp = xn + H, *scores = tmp + wide;
        int64_t r0, r1;
        for (int64_t l = 0; l < m->n_layers; l++) {
            const jal_layer *L = m->layers + l;
            /* attention block */
            rmsnorm(h, L->in_norm, xn, H, L->eps);
            share(nqkv, tid, nt, &r0, &r1);
            gemv_rows(L->qkv_w, xn, qkv + r0, H, r0, r1);
            if (L->qkv_b)
                for (int64_t r = r0; r < r1; r++) qkv[r] += L->qkv_b[r];
            barrier_wait(&bar, &sense);
            for (int64_t hd = tid; hd < nh + nkv; hd += nt) { /* q heads then k heads */
                float *x = qkv + hd * d;
                const float *nw = hd < nh ? L->q_norm : L->k_norm;
                if (nw) rmsnorm(x, nw, x, d, L->qk_eps);
                rope(x, cos_, sin_, d);
                if (hd >= nh) {
                    int64_t g = hd - nh;
                    memcpy(L->k_cache + (slot * nkv + g) * d, x, sizeof(float) * d);
                    memcpy(L->v_cache + (slot * nkv + g) * d, qkv + (nh + nkv + g) * d, sizeof(float) * d);
                }
            }
            barrier_wait(&bar, &sense);
            for (int64_t hd = tid; hd < nh; hd += nt)
                attend(qkv + hd * d, L->k_cache, L->v_cache, table, ctx, bs, nkv, hd / group, d, L->scale, scores,
                       att + hd * d);
            barrier_wait(&bar, &sense);
            share(H, tid, nt, &r0, &r1);
            gemv_rows(L->o_w, att, tmp, nh * d, r0, r1);
            for (int64_t r = r0; r < r1; r++) h[r] += L->o_b ? tmp[r - r0] + L->o_b[r] : tmp[r - r0];
            barrier_wait(&bar, &sense);
            /* MLP block: this thread's gate rows, then the same up rows, streamed whole */
            rmsnorm(h, L->post_norm, xn, H, L->eps);
            share(I, tid, nt, &r0, &r1);
            gemv_rows(L->gu_w, xn, act + r0, H, r0, r1);
            gemv_rows(L->gu_w + I * H, xn, tmp, H, r0, r1);
            for (int64_t r = r0; r < r1; r++) act[r] = silu(act[r]) * tmp[r - r0];
            barrier_wait(&bar, &sense);
            share(H, tid, nt, &r0, &r1);
            gemv_rows(L->down_w, act, tmp, I, r0, r1);
            for (int64_t r = r0; r < r1; r++) h[r] += tmp[r - r0];
            barrier_wait(&bar, &sense);
        }
        /* final norm and LM head */
        rmsnorm(h, m->final_norm, xn, H, m->final_eps);
        share(m->vocab, tid, nt, &r0, &r1);
        gemv_rows(m->lm_head, xn, logits + r0, H, r0, r1);
    }
    free(buf);
    return 0;
}
