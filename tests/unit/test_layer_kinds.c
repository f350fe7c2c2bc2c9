/* test_layer_kinds.c: the layer descriptions of models/arch.h beyond
 * BERT's, walked through by two architecture rows defined here (the rows a
 * new family would add in models/), on folders tools/make-layer-kinds.py
 * makes at test time with random weights and a numpy float64 forward of
 * its own:
 *   - "test-llama": pre-norm RMSNorm layers with a final norm, split Q/K/V
 *     with grouped-query attention and an explicit head_dim, rotary
 *     positions, causal attention, SwiGLU with split gate and up, no
 *     biases, no position table or embedding norm (transformers' LlamaModel
 *     names);
 *   - "test-fused": post-norm LayerNorm, rotary positions, a fused Wqkv
 *     with its bias, a fused [gate | up] GeGLU GEMM with its bias, other
 *     GEMMs without, bidirectional attention.
 * and the registry's "qwen3" row (models/qwen3.c): the llama shape with a
 * per-head Q/K RMSNorm and last-token pooling, Qwen3Model's names.
 * Each row's hidden states and pooled vectors match the reference, batched
 * and alone; every other precision of the backend stays close to FP32; a
 * quantized file reloads to the same vectors, made from BF16 shards too; a backend without the ops
 * refuses the model naming the op; bad config values are refused naming
 * the file and key. */
#include <cJSON.h>
#include <check.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "engine/jsonfile.h"
#include "engine/metrics.h"
#include "engine/model.h"
#include "engine/precision.h"
#include "models/arch.h"
#include "models/encoder.h"
#include "tests/unit/tu_files.h"
#include "tests/unit/tu_model.h"

static const enc_arch row_llama = {
    .model_type = "test-llama",
    .keys = {.vocab = "vocab_size", .hidden = "hidden_size", .layers = "num_hidden_layers",
             .heads = "num_attention_heads", .intermediate = "intermediate_size",
             .max_positions = "max_position_embeddings", .act = "hidden_act",
             .eps = "rms_norm_eps", .kv_heads = "num_key_value_heads", .head_dim = "head_dim",
             .rope_theta = "rope_theta"},
    .emb = {.word = "embed_tokens.weight", .final = "norm"},
    .layers = "layers",
    .layer = {.q = "self_attn.q_proj", .k = "self_attn.k_proj", .v = "self_attn.v_proj",
              .o = "self_attn.o_proj", .ln1 = "input_layernorm", .gate = "mlp.gate_proj",
              .inter = "mlp.up_proj", .out = "mlp.down_proj", .ln2 = "post_attention_layernorm"},
    .kind = {.place = ENC_NORM_PRE, .norm = ENC_RMSNORM, .mlp = ENC_MLP_GATED_SILU,
             .pos = ENC_POS_ROTARY, .causal = true, .optional_bias = true},
};

static const enc_arch row_fused = {
    .model_type = "test-fused",
    .keys = {.vocab = "vocab_size", .hidden = "hidden_size", .layers = "num_hidden_layers",
             .heads = "num_attention_heads", .intermediate = "intermediate_size",
             .max_positions = "max_position_embeddings", .act = "hidden_act",
             .eps = "layer_norm_eps", .rope_theta = "rope_theta"},
    .emb = {.word = "embeddings.word_embeddings.weight", .ln = "embeddings.LayerNorm"},
    .layers = "encoder.layers",
    .layer = {.qkv = "attn.Wqkv", .o = "attn.out_proj", .ln1 = "norm1", .inter = "mlp.fc1",
              .out = "mlp.fc2", .ln2 = "norm2"},
    .kind = {.mlp = ENC_MLP_GATED_GELU, .pos = ENC_POS_ROTARY, .optional_bias = true},
};

static char work[64], llama_dir[128], fused_dir[128], qwen3_dir[128];
static char bf16_dir[128], shards_dir[128]; /* qwen3 in BF16 values: one F32 file, BF16 shards */
static char bpe_dir[160];                    /* qwen3 with a byte-level BPE tokenizer.json */
static mt_backend *be;

static void make_folders(void)
{
    tu_mkwork(work, sizeof work, "mt-layer-kinds");
    snprintf(llama_dir, sizeof llama_dir, "%s/llama", work);
    snprintf(fused_dir, sizeof fused_dir, "%s/fused", work);
    snprintf(qwen3_dir, sizeof qwen3_dir, "%s/qwen3", work);
    snprintf(bf16_dir, sizeof bf16_dir, "%s/qwen3-bf16", work);
    snprintf(shards_dir, sizeof shards_dir, "%s/qwen3-shards", work);
    snprintf(bpe_dir, sizeof bpe_dir, "%s/qwen3-bpe", work);
    char cmd[3072];
    const char *py = tu_python();
    snprintf(cmd, sizeof cmd,
             "%s tools/make-layer-kinds.py llama %s && %s tools/make-layer-kinds.py fused %s && "
             "%s tools/make-layer-kinds.py qwen3 %s && "
             "%s tools/make-layer-kinds.py qwen3 %s --bf16 && "
             "%s tools/make-layer-kinds.py qwen3 %s --bf16 --shards 3 && "
             "%s tools/make-bpe-tokenizer.py %s/bpe >/dev/null && "
             "%s tools/make-layer-kinds.py qwen3 %s --tokenizer %s/bpe/tokenizer.json",
             py, llama_dir, py, fused_dir, py, qwen3_dir, py, bf16_dir, py, shards_dir, py, work,
             py, bpe_dir, work);
    ck_assert_msg(system(cmd) == 0, "tools/make-layer-kinds.py failed: %s", cmd);
}

static void remove_folders(void) { tu_rmwork(work); }

static void setup(void) { be = tu_cpu_backend(); }

static void teardown(void) { mt_backend_destroy(be); }

/* A row (NULL: the registry's, by model_type), its folder and its
 * reference (reference.json read once a test). */
typedef struct {
    const enc_arch *row;
    const char *name;
    const char *dir;
    cJSON *j;
    int h, nseq;
    int32_t ids[256], off[16];
} kase;

enum { LLAMA, FUSED, QWEN3 };

static kase open_case(int which)
{
    kase k = {.row = which == LLAMA ? &row_llama : which == FUSED ? &row_fused : NULL,
              .dir = which == LLAMA ? llama_dir : which == FUSED ? fused_dir : qwen3_dir,
              .name = which == LLAMA ? "test-llama" : which == FUSED ? "test-fused" : "qwen3"};
    char path[160];
    snprintf(path, sizeof path, "%s/reference.json", k.dir);
    k.j = tu_load_json(path);
    k.h = cJSON_GetObjectItem(k.j, "hidden")->valueint;
    const cJSON *jids = cJSON_GetObjectItem(k.j, "ids"), *v;
    k.nseq = cJSON_GetArraySize(jids);
    for (int s = 0; s < k.nseq; s++) {
        k.off[s + 1] = k.off[s];
        cJSON_ArrayForEach(v, cJSON_GetArrayItem(jids, s)) k.ids[k.off[s + 1]++] = v->valueint;
    }
    return k;
}

static mt_model *load_as(const kase *k, mt_precision p, const char *weights)
{
    mt_err err = {{0}};
    mt_model *m = NULL;
    mt_model_opts o = {.precision = p, .calib = {MT_CALIB_ABSMAX, 100.0}, .weights = weights};
    const mt_status st = k->row ? enc_load_model(k->dir, k->row, be, &o, &m, &err)
                                : mt_model_load(k->dir, be, &o, &m, &err);
    ck_assert_msg(st == MT_OK, "%s %s: %s", k->name, mt_precision_name(p), err.msg);
    return m;
}

/* The largest |got - want| over n values of reference array a (row s),
 * relative to the largest |want|. */
static double rel_err(const float *got, const cJSON *a, int s, int n)
{
    const cJSON *row = cJSON_GetArrayItem(a, s);
    double scale = 0, e = 0;
    for (int i = 0; i < n; i++)
        scale = fmax(scale, fabs(cJSON_GetArrayItem(row, i)->valuedouble));
    for (int i = 0; i < n; i++) {
        double d = fabs(got[i] - cJSON_GetArrayItem(row, i)->valuedouble);
        e = d > e || d != d ? d : e;
    }
    return e / scale;
}

/* Hidden states (every layer, after the final norm) and pooled vectors
 * against the numpy forward, the sequences in one ragged batch and alone. */
static void matches_reference(int which)
{
    kase k = open_case(which);
    mt_model *m = load_as(&k, MT_PREC_FP32, NULL);
    const enc_config *c = enc_get_config(m);
    mt_err err = {{0}};
    const int t = k.off[k.nseq], h = k.h;
    float *hid = malloc(sizeof(float) * t * h), *vec = malloc(sizeof(float) * k.nseq * h);
    float *one = malloc(sizeof(float) * t * h);
    ck_assert_msg(enc_hidden_states(m, k.ids, k.off, k.nseq, c->layers, hid, &err) == MT_OK,
                  "%s", err.msg);
    ck_assert_msg(mt_model_forward(m, k.ids, k.off, k.nseq, vec, NULL, &err) == MT_OK, "%s",
                  err.msg);
    const cJSON *jh = cJSON_GetObjectItem(k.j, "hidden_states");
    const cJSON *jv = cJSON_GetObjectItem(k.j, "vectors");
    double worst = 0;
    for (int s = 0; s < k.nseq; s++) {
        const int len = k.off[s + 1] - k.off[s];
        int32_t o1[2] = {0, len};
        double eh = rel_err(hid + (size_t)k.off[s] * h, jh, s, len * h);
        double ev = rel_err(vec + (size_t)s * h, jv, s, h);
        ck_assert_msg(enc_hidden_states(m, k.ids + k.off[s], o1, 1, c->layers, one, &err) ==
                          MT_OK, "%s", err.msg);
        double e1 = rel_err(one, jh, s, len * h);
        ck_assert_msg(eh < 1e-5 && ev < 1e-5 && e1 < 1e-5,
                      "%s sequence %d (%d tokens): relative error hidden %g (alone %g), "
                      "vector %g", k.name, s, len, eh, e1, ev);
        worst = fmax(worst, fmax(eh, fmax(ev, e1)));
    }
    printf("%s: %d sequences, worst relative error %.3g\n", k.name, k.nseq, worst);
    free(hid);
    free(vec);
    free(one);
    mt_model_free(m);
    cJSON_Delete(k.j);
}

START_TEST(llama_shaped_layers_match_the_numpy_reference) { matches_reference(LLAMA); }
END_TEST

START_TEST(fused_rotary_layers_match_the_numpy_reference) { matches_reference(FUSED); }
END_TEST

START_TEST(qwen3_row_matches_the_numpy_reference)
{
    matches_reference(QWEN3);
    kase k = open_case(QWEN3);
    mt_model *m = load_as(&k, MT_PREC_FP32, NULL);
    ck_assert_str_eq(m->info.arch, "qwen3");
    ck_assert_int_eq(m->info.pooling, MT_POOL_LAST); /* 1_Pooling/config.json */
    mt_model_free(m);
    cJSON_Delete(k.j);
}
END_TEST

START_TEST(llama_row_reads_its_config)
{
    kase k = open_case(0);
    mt_model *m = load_as(&k, MT_PREC_FP32, NULL);
    const enc_config *c = enc_get_config(m);
    ck_assert_int_eq(c->hidden, 48);
    ck_assert_int_eq(c->heads, 4);
    ck_assert_int_eq(c->kv_heads, 2);
    ck_assert_int_eq(c->head_dim, 16); /* head_dim: not 48 / 4 */
    ck_assert_int_eq(c->gated, 1);
    ck_assert(fabsf(c->rope_theta - 10000.0f) < 1e-3f && fabsf(c->eps - 1e-6f) < 1e-12f);
    mt_model_free(m);
    cJSON_Delete(k.j);
}
END_TEST

/* Every other precision the backend runs, quantized at load, against the
 * reference vectors (random weights: looser than a trained model's). */
static void precisions_stay_close(int which)
{
    kase k = open_case(which);
    const cJSON *jv = cJSON_GetObjectItem(k.j, "vectors");
    float *vec = malloc(sizeof(float) * k.nseq * k.h), want[128];
    for (int p = 0; p < MT_PREC_COUNT; p++) {
        if (p == MT_PREC_FP32 || !be->ops->supports(be, (mt_precision)p))
            continue;
        mt_model *m = load_as(&k, (mt_precision)p, NULL);
        mt_err err = {{0}};
        ck_assert_msg(mt_model_forward(m, k.ids, k.off, k.nseq, vec, NULL, &err) == MT_OK,
                      "%s", err.msg);
        double worst = 1;
        for (int s = 0; s < k.nseq; s++) {
            for (int i = 0; i < k.h; i++)
                want[i] = (float)cJSON_GetArrayItem(cJSON_GetArrayItem(jv, s), i)->valuedouble;
            worst = fmin(worst, mt_cosine(vec + (size_t)s * k.h, want, k.h));
        }
        const double bound = mt_prec((mt_precision)p)->has_scales ? 0.99 : 0.999;
        printf("%s %s: min cosine to the FP64 reference %.6f\n", k.name,
               mt_precision_name((mt_precision)p), worst);
        ck_assert_msg(worst >= bound, "%s %s: min cosine %.6f < %.3f", k.name,
                      mt_precision_name((mt_precision)p), worst, bound);
        mt_model_free(m);
    }
    free(vec);
    cJSON_Delete(k.j);
}

START_TEST(llama_every_precision_stays_close) { precisions_stay_close(LLAMA); }
END_TEST

START_TEST(fused_every_precision_stays_close) { precisions_stay_close(FUSED); }
END_TEST

START_TEST(qwen3_every_precision_stays_close) { precisions_stay_close(QWEN3); }
END_TEST

/* A quantized file of each row (its gate, fused QKV and fused gate-up
 * tensors named as the row names them) loads to the vectors of quantizing
 * at load. */
START_TEST(quantized_files_reload_to_the_same_vectors)
{
    for (int which = 0; which < 2; which++) {
        kase k = open_case(which);
        char path[200];
        snprintf(path, sizeof path, "%s/q%d.safetensors", work, which);
        mt_err err = {{0}};
        const mt_calib_opts cal = {MT_CALIB_ABSMAX, 100.0};
        ck_assert_msg(enc_save_quantized(k.dir, k.row, MT_PREC_INT8, &cal, NULL, path, &err) ==
                          MT_OK, "%s", err.msg);
        mt_model *a = load_as(&k, MT_PREC_INT8, NULL), *b = load_as(&k, MT_PREC_INT8, path);
        float *va = malloc(sizeof(float) * k.nseq * k.h), *vb = malloc(sizeof(float) * k.nseq * k.h);
        ck_assert(mt_model_forward(a, k.ids, k.off, k.nseq, va, NULL, &err) == MT_OK);
        ck_assert(mt_model_forward(b, k.ids, k.off, k.nseq, vb, NULL, &err) == MT_OK);
        ck_assert_msg(!memcmp(va, vb, sizeof(float) * k.nseq * k.h),
                      "%s: the quantized file's vectors differ", k.name);
        free(va);
        free(vb);
        mt_model_free(a);
        mt_model_free(b);
        cJSON_Delete(k.j);
    }
}
END_TEST

/* A backend that declines the ops (no supports_op, as the CUDA backend
 * today) refuses the model at load, naming the op and the backend. */
START_TEST(a_backend_without_the_ops_refuses_the_model)
{
    mt_backend_ops ops = *be->ops;
    ops.supports_op = NULL;
    mt_backend other = *be;
    other.ops = &ops;
    const char *want[3] = {"needs rmsnorm", "needs gated MLP", "needs rmsnorm"};
    for (int which = 0; which < 3; which++) {
        kase k = open_case(which);
        mt_err err = {{0}};
        mt_model *m = NULL;
        mt_model_opts o = {.precision = MT_PREC_FP32};
        ck_assert_int_eq(k.row ? enc_load_model(k.dir, k.row, &other, &o, &m, &err)
                               : mt_model_load(k.dir, &other, &o, &m, &err),
                         MT_EUNSUPPORTED);
        ck_assert_ptr_null(m);
        ck_assert_msg(strstr(err.msg, want[which]) && strstr(err.msg, k.name) &&
                          strstr(err.msg, "cpu backend"),
                      "message \"%s\"", err.msg);
        cJSON_Delete(k.j);
    }
}
END_TEST

/* The vectors of dir's model (through the registry) at precision p. */
static float *vectors_of(const kase *k, const char *dir, mt_precision p)
{
    kase d = *k;
    d.dir = dir;
    mt_model *m = load_as(&d, p, NULL);
    mt_err err = {{0}};
    float *v = malloc(sizeof(float) * k->nseq * k->h);
    ck_assert_msg(mt_model_forward(m, k->ids, k->off, k->nseq, v, NULL, &err) == MT_OK, "%s",
                  err.msg);
    mt_model_free(m);
    return v;
}

/* A copy of the shards' folder with shard 2 gone (remove) or the index
 * naming another shard for norm.weight: refused, naming the index and want. */
static void broken_shards_refused(bool remove, const char *want)
{
    char dir[160], path[200];
    snprintf(dir, sizeof dir, "%s/bad-shards", work);
    ck_assert_int_eq(tu_copy_dir(shards_dir, dir), 0);
    mt_err err = {{0}};
    if (remove) {
        snprintf(path, sizeof path, "%s/model-00002-of-00003.safetensors", dir);
        ck_assert_int_eq(unlink(path), 0);
    } else {
        snprintf(path, sizeof path, "%s/model.safetensors.index.json", dir);
        cJSON *j = tu_load_json(path);
        cJSON *map = cJSON_GetObjectItem(j, "weight_map"), *at = cJSON_GetObjectItem(map, "norm.weight");
        const char *other = strcmp(at->valuestring, "model-00001-of-00003.safetensors")
                                ? "model-00001-of-00003.safetensors"
                                : "model-00002-of-00003.safetensors";
        cJSON_ReplaceItemInObject(map, "norm.weight", cJSON_CreateString(other));
        tu_save_json(path, j, true);
        cJSON_Delete(j);
    }
    mt_model *m = NULL;
    mt_model_opts o = {.precision = MT_PREC_FP32};
    ck_assert_int_ne(mt_model_load(dir, be, &o, &m, &err), MT_OK);
    ck_assert_ptr_null(m);
    ck_assert_msg(strstr(err.msg, "model.safetensors.index.json") && strstr(err.msg, want),
                  "message \"%s\" lacks \"%s\"", err.msg, want);
}

/* Qwen3 with its own kind of tokenizer: texts through the byte-level BPE
 * tokenizer.json (ids as Hugging Face tokenizers gives them, its EOS
 * appended) and the forward, to the reference's last-token vectors. */
START_TEST(qwen3_with_a_bpe_tokenizer_embeds_texts)
{
    kase k = open_case(QWEN3);
    cJSON_Delete(k.j);
    k.dir = bpe_dir;
    char path[200];
    mt_err err = {{0}};
    snprintf(path, sizeof path, "%s/reference.json", bpe_dir);
    cJSON *j = tu_load_json(path);
    mt_model *m = load_as(&k, MT_PREC_FP32, NULL);
    const cJSON *texts = cJSON_GetObjectItem(j, "texts"), *ids = cJSON_GetObjectItem(j, "ids");
    const int n = cJSON_GetArraySize(texts), h = m->info.hidden;
    const char *tx[8];
    size_t lens[8];
    for (int i = 0; i < n; i++) {
        tx[i] = cJSON_GetArrayItem(texts, i)->valuestring;
        lens[i] = strlen(tx[i]);
        int32_t got[128];
        int ng = 0;
        ck_assert_msg(mt_model_tokenize(m, tx[i], lens[i], got, 128, &ng, NULL, &err) == MT_OK,
                      "%s", err.msg);
        const cJSON *want = cJSON_GetArrayItem(ids, i);
        ck_assert_int_eq(ng, cJSON_GetArraySize(want));
        for (int t = 0; t < ng; t++)
            ck_assert_int_eq(got[t], cJSON_GetArrayItem(want, t)->valueint);
    }
    float *vec = malloc(sizeof(float) * n * h);
    ck_assert_msg(mt_model_embed_texts(m, tx, lens, n, vec, NULL, &err) == MT_OK, "%s", err.msg);
    for (int i = 0; i < n; i++) {
        const double e = rel_err(vec + (size_t)i * h, cJSON_GetObjectItem(j, "vectors"), i, h);
        ck_assert_msg(e < 1e-5, "text %d: relative error %g", i, e);
    }
    free(vec);
    mt_model_free(m);
    cJSON_Delete(j);
}
END_TEST

/* A checkpoint as LLMs ship them (BF16, three shards and
 * model.safetensors.index.json) loads to the vectors of the same values in
 * one F32 file, bit for bit, at FP32 and quantized, its word table kept in
 * BF16 (half the memory of the F32 file's); a shard the index
 * names that is missing, or a tensor not where the index says, is refused
 * naming the index. */
START_TEST(bf16_shards_load_as_the_same_values_in_one_f32_file)
{
    kase k = open_case(QWEN3);
    const mt_precision precs[3] = {MT_PREC_FP32, MT_PREC_BF16, MT_PREC_INT8};
    for (int i = 0; i < 3; i++) {
        float *a = vectors_of(&k, bf16_dir, precs[i]), *b = vectors_of(&k, shards_dir, precs[i]);
        ck_assert_msg(!memcmp(a, b, sizeof(float) * k.nseq * k.h),
                      "%s: BF16 shards and the F32 file give different vectors",
                      mt_precision_name(precs[i]));
        free(a), free(b);
    }
    /* the shards' BF16 word table stays BF16 on the CPU: half the F32
     * file's copy, the same vectors (above) */
    kase d = k;
    d.dir = bf16_dir;
    mt_model *f32 = load_as(&d, MT_PREC_INT8, NULL);
    d.dir = shards_dir;
    mt_model *b16 = load_as(&d, MT_PREC_INT8, NULL);
    const mt_model_info *fi = mt_model_get_info(f32), *bi = mt_model_get_info(b16);
    ck_assert_uint_eq(fi->resident_bytes - bi->resident_bytes,
                      sizeof(uint16_t) * (size_t)fi->vocab * (size_t)fi->hidden);
    mt_model_free(f32);
    mt_model_free(b16);
    cJSON_Delete(k.j);
    broken_shards_refused(true, "model-00002-of-00003.safetensors");
    broken_shards_refused(false, "tensor 'norm.weight' is not in");
}
END_TEST

/* mantissa quantize from the BF16 shards (as LLM checkpoints come): each
 * precision's file (one safetensors file for the three shards) loads to
 * the vectors of loading the shards at that precision, bit for bit: its
 * GEMM weights were widened to FP32 exactly, as the load widens them, and
 * quantized by the same code (per channel or per group of a row, so the
 * load's packing of Q/K/V and gate/up changes nothing); int8's smoothing
 * comes from the same streamed calibration and column maxima; every other
 * tensor is kept in BF16, which the loader reads as it reads the shards'
 * (the word table stays BF16 on the CPU: the same resident bytes). */
START_TEST(bf16_shards_quantize_to_files_that_load_as_the_shards_do)
{
    kase k = open_case(QWEN3);
    k.dir = shards_dir;
    const mt_precision precs[] = {MT_PREC_INT8, MT_PREC_FP8, MT_PREC_INT8G,
                                  MT_PREC_BF16, MT_PREC_FP16, MT_PREC_FP32};
    const mt_calib_opts cal = {MT_CALIB_ABSMAX, 100.0};
    for (size_t i = 0; i < sizeof precs / sizeof *precs; i++) {
        const mt_precision p = precs[i];
        const char *pn = mt_precision_name(p);
        if (!be->ops->supports(be, p))
            continue;
        char path[200];
        snprintf(path, sizeof path, "%s/shards-%s.safetensors", work, pn);
        mt_err err = {{0}};
        ck_assert_msg(mt_model_save_quantized(shards_dir, p, &cal, NULL, path, &err) == MT_OK,
                      "%s: %s", pn, err.msg);
        mt_model *a = load_as(&k, p, NULL), *b = load_as(&k, p, path);
        float *va = malloc(sizeof(float) * k.nseq * k.h), *vb = malloc(sizeof(float) * k.nseq * k.h);
        ck_assert(mt_model_forward(a, k.ids, k.off, k.nseq, va, NULL, &err) == MT_OK);
        ck_assert(mt_model_forward(b, k.ids, k.off, k.nseq, vb, NULL, &err) == MT_OK);
        ck_assert_msg(!memcmp(va, vb, sizeof(float) * k.nseq * k.h),
                      "%s: the quantized file's vectors differ from the shards'", pn);
        ck_assert_uint_eq(mt_model_get_info(a)->resident_bytes, mt_model_get_info(b)->resident_bytes);
        st_file *f;
        ck_assert_msg(st_open(path, &f, &err) == MT_OK, "%s", err.msg);
        const st_tensor *emb = st_find(f, "embed_tokens.weight"),
                        *down = st_find(f, "layers.1.mlp.down_proj.weight"),
                        *sm = st_find(f, "layers.1.mlp.down_proj.weight_input_smooth");
        ck_assert(emb && emb->dtype == ST_BF16 && down && down->dtype == mt_prec(p)->file_dtype);
        ck_assert_msg((sm != NULL) == (p == MT_PREC_INT8 || p == MT_PREC_INT8G),
                      "%s: smoothing factors %s", pn, sm ? "present" : "missing");
        ck_assert_str_eq(st_meta(f, "mantissa.precision"), pn);
        st_close(f);
        free(va);
        free(vb);
        mt_model_free(a);
        mt_model_free(b);
    }
    cJSON_Delete(k.j);
}
END_TEST

/* A GEMM weight that does not read as FP32 values (here F64) is refused by
 * name before anything is calibrated or written. */
START_TEST(quantize_refuses_a_gemm_weight_it_cannot_read)
{
    char dir[160], path[200], out[200];
    snprintf(dir, sizeof dir, "%s/f64", work);
    ck_assert_int_eq(tu_copy_dir(qwen3_dir, dir), 0);
    snprintf(path, sizeof path, "%s/model.safetensors", qwen3_dir);
    st_file *f;
    mt_err err = {{0}};
    ck_assert_msg(st_open(path, &f, &err) == MT_OK, "%s", err.msg);
    const size_t n = st_count(f);
    st_tensor *t = calloc(n, sizeof *t);
    double *wide = NULL;
    for (size_t i = 0; i < n; i++) {
        t[i] = *st_get(f, i);
        if (strcmp(t[i].name, "layers.0.mlp.up_proj.weight"))
            continue;
        const size_t e = t[i].nbytes / sizeof(float);
        wide = malloc(sizeof(double) * e);
        for (size_t j = 0; j < e; j++)
            wide[j] = ((const float *)t[i].data)[j];
        t[i].dtype = ST_F64, t[i].data = wide, t[i].nbytes = sizeof(double) * e;
    }
    ck_assert_ptr_nonnull(wide);
    snprintf(path, sizeof path, "%s/model.safetensors", dir);
    ck_assert_msg(st_write(path, t, n, NULL, &err) == MT_OK, "%s", err.msg);
    st_close(f);
    free(t);
    free(wide);
    snprintf(out, sizeof out, "%s/f64-int8.safetensors", work);
    ck_assert_int_eq(mt_model_save_quantized(dir, MT_PREC_INT8, NULL, NULL, out, &err), MT_EFORMAT);
    ck_assert_msg(strstr(err.msg, path) && strstr(err.msg, "'layers.0.mlp.up_proj.weight' is F64") &&
                      strstr(err.msg, "F32, F16 or BF16"),
                  "message \"%s\"", err.msg);
    ck_assert_int_ne(access(out, F_OK), 0);
}
END_TEST

/* A copy of src (llama's, or qwen3's through the registry) with file's
 * key set to value (a JSON text; NULL drops it): the load must fail
 * naming want. */
static void expect_refused_in(const char *src, const char *file, const char *key,
                              const char *value, const char *want)
{
    char dir[160], path[200];
    snprintf(dir, sizeof dir, "%s/bad", work);
    ck_assert_int_eq(tu_copy_dir(src, dir), 0);
    snprintf(path, sizeof path, "%s/%s", dir, file);
    ck_assert_int_eq(tu_edit_json(path, key, value, true), 0); /* made if src lacks it */
    mt_err err = {{0}};
    mt_model *m = NULL;
    mt_model_opts o = {.precision = MT_PREC_FP32};
    ck_assert_int_ne(src == llama_dir ? enc_load_model(dir, &row_llama, be, &o, &m, &err)
                                      : mt_model_load(dir, be, &o, &m, &err),
                     MT_OK);
    ck_assert_ptr_null(m);
    ck_assert_msg(strstr(err.msg, want), "message \"%s\" lacks \"%s\"", err.msg, want);
}

static void expect_refused(const char *key, const char *value, const char *want)
{
    expect_refused_in(llama_dir, "config.json", key, value, want);
}

START_TEST(bad_layer_config_is_refused_naming_the_key)
{
    expect_refused("num_key_value_heads", "3", "num_key_value_heads 3 does not divide");
    expect_refused("num_key_value_heads", "8", "field 'num_key_value_heads' = 8 is not");
    expect_refused("head_dim", "15", "rotary positions need an even head size");
    expect_refused("rope_theta", "-1", "field 'rope_theta' must be a positive number");
    expect_refused("hidden_act", "\"gelu\"", "hidden_act \"gelu\" is not supported (silu only)");
    /* a missing tensor: llama has no biases (optional), but its norms are required */
    expect_refused("num_hidden_layers", "3", "tensor 'layers.2.");
    /* Qwen3's own fields, and its real tokenizer kind (not written yet) */
    expect_refused_in(qwen3_dir, "config.json", "rope_scaling", "{\"type\": \"yarn\"}",
                      "field 'rope_scaling' is not supported");
    expect_refused_in(qwen3_dir, "config.json", "use_sliding_window", "true",
                      "field 'use_sliding_window' is not supported");
    expect_refused_in(qwen3_dir, "tokenizer.json", "model", "{\"type\": \"BPE\"}",
                      "tokenizer.json: pre_tokenizer.type");
}
END_TEST

static Suite *test_suite(void)
{
    Suite *s = suite_create("layer_kinds");
    TCase *tc = tcase_create("layer_kinds");
    tcase_add_unchecked_fixture(tc, make_folders, remove_folders);
    tcase_add_checked_fixture(tc, setup, teardown);
    tcase_set_timeout(tc, 600);
    tcase_add_test(tc, llama_shaped_layers_match_the_numpy_reference);
    tcase_add_test(tc, fused_rotary_layers_match_the_numpy_reference);
    tcase_add_test(tc, qwen3_row_matches_the_numpy_reference);
    tcase_add_test(tc, llama_row_reads_its_config);
    tcase_add_test(tc, qwen3_every_precision_stays_close);
    tcase_add_test(tc, llama_every_precision_stays_close);
    tcase_add_test(tc, fused_every_precision_stays_close);
    tcase_add_test(tc, quantized_files_reload_to_the_same_vectors);
    tcase_add_test(tc, bf16_shards_load_as_the_same_values_in_one_f32_file);
    tcase_add_test(tc, bf16_shards_quantize_to_files_that_load_as_the_shards_do);
    tcase_add_test(tc, quantize_refuses_a_gemm_weight_it_cannot_read);
    tcase_add_test(tc, qwen3_with_a_bpe_tokenizer_embeds_texts);
    tcase_add_test(tc, a_backend_without_the_ops_refuses_the_model);
    tcase_add_test(tc, bad_layer_config_is_refused_naming_the_key);
    suite_add_tcase(s, tc);
    return s;
}

#include "tests/unit/check_main.h"
