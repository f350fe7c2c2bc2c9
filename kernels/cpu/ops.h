/* ops.h: FP32 CPU kernels for the encoder's non-GEMM work (layernorm,
 * attention, GELU, embeddings, pooling). The GEMMs go to BLAS in
 * engine/cpu/backend.c. Each kernel is threaded with OpenMP over its outer
 * dimension; tests/unit/test_cpu_ops.c checks each against a plain twin.
 */
#ifndef MT_KERNELS_CPU_OPS_H
#define MT_KERNELS_CPU_OPS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* In place over n floats: x = exp(x) (for x in [-87, 88]; clamped to it
 * outside) / x = gelu(x) (erf form, as BERT). */
void kc_exp(float *x, int n);
void kc_gelu(float *x, int n);
/* exp and GELU of one value by the scalar forms; kc_exp's and kc_gelu's
 * vector forms give the same bits (for tests). */
float kc_exp1(float x);
float kc_gelu1(float x);

/* In place over a row of len scores: row = softmax(row + bias), bias NULL
 * for none; exp by kc_exp's forms. */
void kc_softmax(float *row, int len, const float *bias);

/* y (m, n) += bias (may be NULL), then GELU when gelu. */
void kc_bias_act(float *y, int m, int n, const float *bias, bool gelu);

/* out (t, h) = LN(x + res) * g + b; res may be NULL; out may alias x or res. */
void kc_layernorm(const float *x, const float *res, const float *g, const float *b,
                  int t, int h, float eps, float *out);

/* qkv (t, 3*heads*dh) -> out (t, heads*dh); softmax(QK^T/sqrt(dh))V per
 * sequence and head, keys limited to the query's own sequence.
 * Returns 0, or -1 when its scratch memory could not be allocated. */
int kc_attention(const float *qkv, const int32_t *offsets, int nseq, int heads, int dh,
                 float *out);
/* The same with a relative position bias added to the scores before the
 * softmax (MPNet): score(i, j) += pos_bias[hd * (2*maxrel+1) + (j - i) + maxrel]
 * for head hd; pos_bias NULL: none. Sequences must be <= maxrel + 1 long
 * (-2 otherwise). */
int kc_attention_bias(const float *qkv, const int32_t *offsets, int nseq, int heads, int dh,
                      const float *pos_bias, int maxrel, float *out);

/* What kc_attention_ex computes: heads query heads and kv_heads key/value
 * heads (dividing heads; query head hd reads K/V head hd / (heads /
 * kv_heads)) of dh each, packed per token as [Q | K | V]; causal: query i
 * sees keys 0..i of its sequence only; pos_bias/maxrel as kc_attention_bias. */
typedef struct {
    int heads, kv_heads, dh;
    bool causal;
    const float *pos_bias;
    int maxrel;
} kc_attn;

/* qkv (t, (heads + 2 kv_heads) dh) -> out (t, heads dh). Returns 0, -1 (no
 * scratch), -2 (a sequence longer than the bias) or -3 (kv_heads does not
 * divide heads). */
int kc_attention_ex(const float *qkv, const int32_t *offsets, int nseq, const kc_attn *a,
                    float *out);

/* out (t, h) = word[ids] + pos[position in sequence] (pos NULL: none) +
 * type0; with segs (else NULL), token i of sequence s takes type1 instead
 * from its index segs[s] in the sequence on (a text pair's second text). */
void kc_embed(const int32_t *ids, const int32_t *offsets, const int32_t *segs, int nseq,
              const float *word, const float *pos, const float *type0, const float *type1, int h,
              float *out);

/* ---- the layer kinds beyond BERT's (ops_layer.c) ---- */

/* kc_embed (no token types) from a table of 16-bit codes (bf16: BF16, else
 * FP16; an LLM checkpoint's table kept as the file has it, at half the
 * memory): each row widened exactly, so the result is bitwise kc_embed's
 * on the same values in FP32. */
void kc_embed16(const int32_t *ids, const int32_t *offsets, int nseq, const uint16_t *word,
                bool bf16, const float *pos, const float *type0, int h, float *out);

/* out (t, h) = (x + res) / sqrt(mean((x + res)^2) + eps) * g (the mean
 * square summed in double); res may be NULL; out may alias x or res. */
void kc_rmsnorm(const float *x, const float *res, const float *g, int t, int h, float eps,
                float *out);
/* out (n) = x + y; out may alias either. */
void kc_add(const float *x, const float *y, size_t n, float *out);
/* x (t, 2n) = [gate | up] per row -> out (t, n) = act(gate) * up, act SiLU
 * (gate / (1 + exp(-gate)), libm's expf) when silu, else GELU (kc_gelu1).
 * out must not overlap x. */
void kc_glu(const float *x, int t, int n, bool silu, float *out);
/* Rotary positions in place on qkv (t, (heads + 2 kv_heads) dh) laid out as
 * kc_attention_ex reads it: each Q and K head's pairs (d, d + dh/2)
 * rotated by pos * theta^(-2d/dh), pos the index in its sequence (the
 * rotate-half layout). Returns 0, or -1 for an odd dh or one over 1024. */
int kc_rope(float *qkv, const int32_t *offsets, int nseq, int heads, int kv_heads, int dh,
            float theta);

/* In place on t rows of qkv (t, (heads + 2 kv_heads) dh): each of the
 * heads Q heads RMS-normalised over its dh values (mean square in double)
 * times qg (dh), each K head likewise times kg; V untouched. */
void kc_qk_rmsnorm(float *qkv, int t, int heads, int kv_heads, int dh, const float *qg,
                   const float *kg, float eps);

/* out (nseq, h) = mean of each sequence's rows, then L2-normalised if asked
 * (norm clamped at 1e-12 as torch.nn.functional.normalize). */
void kc_mean_pool(const float *x, const int32_t *offsets, int nseq, int h, bool normalize,
                  float *out);

#endif
