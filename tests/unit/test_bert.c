/* test_bert.c: the BERT encoder on the real all-MiniLM-L6-v2 weights,
 * piece by piece and whole, against sentence-transformers/PyTorch outputs
 * committed in tests/fixtures/reference (tools/make-reference.py); batch vs
 * one-at-a-time; quantized files (from the F32 folder and from BF16 and
 * F16 copies of it) against quantizing at load; and the load errors a
 * broken model folder gives. */
#include <cJSON.h>
#include <check.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "engine/jsonfile.h"
#include "engine/metrics.h"
#include "engine/numfmt.h"
#include "engine/weights/safetensors.h"
#include "engine/model.h"
#include "models/encoder.h"
#include "tests/unit/ref_sentences.h"

#define MODEL_DIR "models/all-MiniLM-L6-v2"
#define REF_DIR "tests/fixtures/reference"

static mt_backend *be;
static mt_model *model;

static void setup(void)
{
    mt_err err;
    ck_assert_msg(mt_backend_cpu_create(0, &be, &err) == MT_OK, "%s", err.msg);
    mt_model_opts o = {.precision = MT_PREC_FP32};
    ck_assert_msg(mt_model_load(MODEL_DIR, be, &o, &model, &err) == MT_OK, "%s", err.msg);
}

static void teardown(void)
{
    mt_model_free(model);
    mt_backend_destroy(be);
}

/* Error of got against want relative to want's largest magnitude. */
static double scaled_err(const float *got, const cJSON *rows, int h)
{
    double m = 0, scale = 1e-6;
    int r = 0;
    const cJSON *row, *v;
    cJSON_ArrayForEach(row, rows)
    {
        int c = 0;
        cJSON_ArrayForEach(v, row)
        {
            double d = fabs(got[(size_t)r * h + c] - v->valuedouble);
            m = d > m || d != d ? d : m;
            scale = fabs(v->valuedouble) > scale ? fabs(v->valuedouble) : scale;
            c++;
        }
        r++;
    }
    return m / scale;
}

START_TEST(bert_reads_minilm_architecture)
{
    const enc_config *c = enc_get_config(model);
    ck_assert_int_eq(c->hidden, 384);
    ck_assert_int_eq(c->layers, 6);
    ck_assert_int_eq(c->heads, 12);
    ck_assert_int_eq(c->intermediate, 1536);
    ck_assert_int_eq(c->vocab, 30522);
    ck_assert_int_eq(c->max_seq_len, 256);
    ck_assert(c->normalize);
    /* 6 layers x (3*384*384 + 384*384 + 2*384*1536) FP32 GEMM weights */
    ck_assert_uint_eq(model->info.gemm_bytes, (size_t)6 * (4 * 384 * 384 + 2 * 384 * 1536) * 4);
}
END_TEST

START_TEST(bert_pieces_match_pytorch_embeddings_layer0_and_last_hidden)
{
    cJSON *j;
    mt_err err;
    ck_assert_msg(mt_json_load(REF_DIR "/pieces.json", &j, &err) == MT_OK, "%s", err.msg);
    const cJSON *jids = cJSON_GetObjectItem(j, "ids"), *v;
    int t = cJSON_GetArraySize(jids), k = 0;
    int32_t ids[64], off[2] = {0, t};
    cJSON_ArrayForEach(v, jids) ids[k++] = (int32_t)v->valuedouble;
    float *out = malloc(sizeof(float) * t * 384);
    static const struct {
        const char *key;
        int layers;
    } pieces[] = {{"embeddings", 0}, {"layer0", 1}, {"last_hidden", 6}};
    for (size_t p = 0; p < 3; p++) {
        for (int i = 0; i < t * 384; i++)
            out[i] = NAN; /* poison */
        ck_assert_int_eq(enc_hidden_states(model, ids, off, 1, pieces[p].layers, out, &err), MT_OK);
        double e = scaled_err(out, cJSON_GetObjectItem(j, pieces[p].key), 384);
        ck_assert_msg(e < 2e-5, "%s: relative error %g", pieces[p].key, e);
    }
    free(out);
    cJSON_Delete(j);
}
END_TEST

/* The forward's norms turn its unit vectors back into the pooled ones
 * (TEI's "normalize": false): the mean of PyTorch's last hidden states of
 * the pieces sentence, to the same relative error as the hidden states. */
START_TEST(bert_norms_give_back_the_pooled_vector)
{
    cJSON *j;
    mt_err err;
    ck_assert_msg(mt_json_load(REF_DIR "/pieces.json", &j, &err) == MT_OK, "%s", err.msg);
    const cJSON *jids = cJSON_GetObjectItem(j, "ids"), *v, *row;
    int t = cJSON_GetArraySize(jids), k = 0;
    int32_t ids[64], off[2] = {0, t};
    cJSON_ArrayForEach(v, jids) ids[k++] = (int32_t)v->valuedouble;
    double want[384] = {0}, scale = 0, worst = 0;
    cJSON_ArrayForEach(row, cJSON_GetObjectItem(j, "last_hidden"))
    {
        int c = 0;
        cJSON_ArrayForEach(v, row) want[c++] += v->valuedouble / t;
    }
    float out[384], norm = NAN, unit = 0;
    ck_assert_int_eq(mt_model_forward(model, ids, off, 1, out, &norm, &err), MT_OK);
    for (int c = 0; c < 384; c++) {
        unit += out[c] * out[c];
        scale = fabs(want[c]) > scale ? fabs(want[c]) : scale;
        worst = fabs(out[c] * norm - want[c]) > worst ? fabs(out[c] * norm - want[c]) : worst;
    }
    ck_assert_msg(fabsf(unit - 1) < 1e-5 && norm > 1.5f, "norm %g, |out|^2 %g", norm, unit);
    ck_assert_msg(worst / scale < 2e-5, "pooled: relative error %g", worst / scale);
    cJSON_Delete(j);
}
END_TEST

/* The model interface's forward without pooling: in a batch of two
 * sequences, the pieces sentence's rows are PyTorch's last hidden states,
 * and each sequence's mean row is its pooled vector (the forward's unit
 * vector times its norm). */
START_TEST(bert_forward_tokens_are_the_last_hidden_states)
{
    cJSON *j;
    mt_err err;
    ck_assert_msg(mt_json_load(REF_DIR "/pieces.json", &j, &err) == MT_OK, "%s", err.msg);
    const cJSON *jids = cJSON_GetObjectItem(j, "ids"), *v;
    int t = cJSON_GetArraySize(jids), k = 0;
    int32_t ids[64];
    cJSON_ArrayForEach(v, jids) ids[k++] = (int32_t)v->valuedouble;
    const int32_t cat[] = {101, 1037, 4937, 102}; /* [CLS] a cat [SEP] */
    memcpy(ids + t, cat, sizeof cat);
    const int32_t off[3] = {0, t, t + 4};
    float *rows = malloc(sizeof(float) * (size_t)(t + 4) * 384), pooled[2 * 384], norms[2];
    for (int i = 0; i < (t + 4) * 384; i++)
        rows[i] = NAN; /* poison */
    ck_assert_int_eq(mt_model_forward_tokens(model, ids, off, 2, rows, &err), MT_OK);
    double e = scaled_err(rows, cJSON_GetObjectItem(j, "last_hidden"), 384);
    ck_assert_msg(e < 2e-5, "last hidden: relative error %g", e);
    ck_assert_int_eq(mt_model_forward(model, ids, off, 2, pooled, norms, &err), MT_OK);
    for (int s = 0; s < 2; s++) {
        double worst = 0, scale = 0;
        for (int c = 0; c < 384; c++) {
            double mean = 0;
            for (int r = off[s]; r < off[s + 1]; r++)
                mean += rows[(size_t)r * 384 + c] / (off[s + 1] - off[s]);
            const double want = (double)pooled[s * 384 + c] * norms[s];
            worst = fabs(mean - want) > worst ? fabs(mean - want) : worst;
            scale = fabs(want) > scale ? fabs(want) : scale;
        }
        ck_assert_msg(worst / scale < 1e-5, "sequence %d: mean row vs pooled %g", s,
                      worst / scale);
    }
    free(rows);
    cJSON_Delete(j);
}
END_TEST

/* Reads the reference sentences and vectors. */
static int load_reference(char ***sent, float **vec)
{
    const int n = read_ref_sentences(sent);
    char *raw;
    size_t len;
    mt_err err;
    ck_assert_int_eq(mt_read_file(REF_DIR "/minilm_fp32.f32", 1 << 26, &raw, &len, &err), MT_OK);
    ck_assert_uint_eq(len, (size_t)n * 384 * sizeof(float));
    *vec = (float *)raw;
    return n;
}

START_TEST(bert_matches_sentence_transformers_on_every_reference_sentence)
{
    char **sent;
    float *ref;
    int n = load_reference(&sent, &ref);
    ck_assert_int_ge(n, 200);
    float *out = malloc(sizeof(float) * 32 * 384);
    size_t lens[32];
    double worst_cos = 1, worst_diff = 0;
    mt_err err;
    for (int i = 0; i < n; i += 32) {
        int b = n - i < 32 ? n - i : 32;
        for (int k = 0; k < b; k++)
            lens[k] = strlen(sent[i + k]);
        ck_assert_msg(mt_model_embed_texts(model, (const char *const *)sent + i, lens, b, out, NULL, &err) == MT_OK,
                      "%s", err.msg);
        for (int k = 0; k < b; k++) {
            double c = mt_cosine(out + k * 384, ref + (size_t)(i + k) * 384, 384);
            double d = mt_max_abs_diff(out + k * 384, ref + (size_t)(i + k) * 384, 384);
            worst_cos = c < worst_cos ? c : worst_cos;
            worst_diff = d > worst_diff ? d : worst_diff;
            ck_assert_msg(c >= 0.99999 && d <= 1e-4, "sentence %d (%.60s): cosine %.7f, max diff %g",
                          i + k, sent[i + k], c, d);
        }
    }
    printf("bert: %d reference sentences: min cosine %.8f, max abs diff %.3g\n", n, worst_cos, worst_diff);
    for (int i = 0; i < n; i++)
        free(sent[i]);
    free(sent);
    free(ref);
    free(out);
}
END_TEST

START_TEST(bert_batch_of_ragged_lengths_equals_one_at_a_time)
{
    const char *texts[] = {"a", "A man is playing a guitar.", "", "tokens " /* long */
                           "repeated many times to make a longer sequence than the others in the batch",
                           "Ünïcödé, 中文 and emoji 😀 together"};
    const int n = 5;
    size_t lens[5];
    for (int i = 0; i < n; i++)
        lens[i] = strlen(texts[i]);
    float batch[5 * 384], one[384];
    mt_err err;
    ck_assert_int_eq(mt_model_embed_texts(model, texts, lens, n, batch, NULL, &err), MT_OK);
    for (int i = 0; i < n; i++) {
        ck_assert_int_eq(mt_model_embed_texts(model, texts + i, lens + i, 1, one, NULL, &err), MT_OK);
        double c = mt_cosine(one, batch + i * 384, 384), d = mt_max_abs_diff(one, batch + i * 384, 384);
        ck_assert_msg(c > 0.9999999 && d < 1e-6, "text %d: cosine %.9f max diff %g", i, c, d);
    }
}
END_TEST

START_TEST(bert_forward_rejects_bad_ids_and_lengths)
{
    float out[2 * 384];
    mt_err err;
    int32_t ids[3] = {101, 40000, 102}, off[2] = {0, 3};
    ck_assert_int_eq(mt_model_forward(model, ids, off, 1, out, NULL, &err), MT_EINVAL);
    ck_assert_ptr_nonnull(strstr(err.msg, "40000"));
    int32_t empty[3] = {0, 0, 1};
    ck_assert_int_eq(mt_model_forward(model, ids, empty, 2, out, NULL, &err), MT_EINVAL);
    int32_t *big = calloc(300, sizeof(int32_t)), boff[2] = {0, 300};
    ck_assert_int_eq(mt_model_forward(model, big, boff, 1, out, NULL, &err), MT_EINVAL);
    free(big);
}
END_TEST

/* ---- broken model folders ------------------------------------------------ */

/* A temp folder /tmp/mt_bert_<tag>_<pid> with the model folder's files but
 * its weights (which the caller writes). */
static char *folder_copy(const char *tag)
{
    static char dir[256];
    snprintf(dir, sizeof dir, "/tmp/mt_bert_%s_%d", tag, (int)getpid());
    char cmd[1024];
    snprintf(cmd, sizeof cmd, "rm -rf %s && mkdir -p %s/1_Pooling && cd %s && for f in config.json vocab.txt "
             "sentence_bert_config.json modules.json 1_Pooling/config.json; do cp %s/" MODEL_DIR "/$f $f; done",
             dir, dir, dir, getcwd((char[512]){0}, 512));
    ck_assert_int_eq(system(cmd), 0);
    return dir;
}

/* A copy of the model folder in a temp dir whose model.safetensors is the
 * real one with tensor `name` changed by `mutate` (or dropped when NULL). */
static char *broken_copy(const char *name, void (*mutate)(float *, size_t))
{
    char *dir = folder_copy("test");
    st_file *f;
    mt_err err;
    ck_assert_int_eq(st_open(MODEL_DIR "/model.safetensors", &f, &err), MT_OK);
    size_t n = st_count(f), k = 0;
    st_tensor *t = calloc(n, sizeof *t);
    float *copy = NULL;
    for (size_t i = 0; i < n; i++) {
        const st_tensor *src = st_get(f, i);
        if (!strcmp(src->name, name)) {
            if (!mutate)
                continue;
            copy = malloc(src->nbytes);
            memcpy(copy, src->data, src->nbytes);
            mutate(copy, src->nbytes / sizeof(float));
            t[k] = *src;
            t[k++].data = copy;
        } else {
            t[k++] = *src;
        }
    }
    char path[300];
    snprintf(path, sizeof path, "%s/model.safetensors", dir);
    ck_assert_msg(st_write(path, t, k, NULL, &err) == MT_OK, "%s", err.msg);
    free(copy);
    free(t);
    st_close(f);
    return dir;
}

static void put_nan(float *w, size_t n) { w[n / 2] = NAN; }

static void expect_load_error(const char *dir, const char *want)
{
    mt_model *m = NULL;
    mt_err err = {{0}};
    mt_model_opts o = {.precision = MT_PREC_FP32};
    ck_assert_int_ne(mt_model_load(dir, be, &o, &m, &err), MT_OK);
    ck_assert_ptr_null(m);
    ck_assert_msg(strstr(err.msg, want), "message \"%s\" lacks \"%s\"", err.msg, want);
}

START_TEST(bert_load_errors_name_the_file_and_tensor)
{
    expect_load_error("/nonexistent/model", "/nonexistent/model/config.json");
    char *d = broken_copy("encoder.layer.3.intermediate.dense.weight", NULL);
    expect_load_error(d, "tensor 'encoder.layer.3.intermediate.dense.weight' is missing");
    d = broken_copy("encoder.layer.2.output.dense.weight", put_nan);
    expect_load_error(d, "tensor 'encoder.layer.2.output.dense.weight' has a non-finite value");
    char cmd[600];
    snprintf(cmd, sizeof cmd, "truncate -s 1000 %s/model.safetensors", d);
    ck_assert_int_eq(system(cmd), 0);
    expect_load_error(d, "model.safetensors");
    /* the registry picks the architecture by config.json's model_type */
    snprintf(cmd, sizeof cmd, "sed -i 's/\"model_type\": *\"bert\"/\"model_type\": \"gpt2\"/' "
             "%s/config.json", d);
    ck_assert_int_eq(system(cmd), 0);
    expect_load_error(d, "config.json: model_type \"gpt2\" is not supported (\"bert\", \"mpnet\", \"distilbert\", \"qwen3\", \"xlm-roberta\")");
    snprintf(cmd, sizeof cmd, "sed -i 's/\"model_type\": *\"gpt2\",//' %s/config.json", d);
    ck_assert_int_eq(system(cmd), 0);
    expect_load_error(d, "config.json: field 'model_type' missing or not a string");
    snprintf(cmd, sizeof cmd, "rm -rf %s", d);
    ck_assert_int_eq(system(cmd), 0);
}
END_TEST

START_TEST(bert_refuses_precisions_the_backend_lacks)
{
    mt_model *m = NULL;
    mt_err err;
    mt_model_opts o = {.precision = MT_PREC_TF32};
    ck_assert_int_eq(mt_model_load(MODEL_DIR, be, &o, &m, &err), MT_EUNSUPPORTED);
    ck_assert_ptr_nonnull(strstr(err.msg, "tf32"));
}
END_TEST

/* ---- precisions and pre-quantized files ------------------------------------ */

static const mt_precision all_precs[] = {MT_PREC_FP32, MT_PREC_FP16, MT_PREC_BF16, MT_PREC_INT8,
                                         MT_PREC_FP8, MT_PREC_INT8G};

START_TEST(bert_quantized_file_reloads_to_the_same_vectors_without_requantizing)
{
    const char *texts[] = {"A man is playing a guitar.", "Quantized weights, saved and reloaded."};
    size_t lens[2] = {strlen(texts[0]), strlen(texts[1])};
    char path[128];
    snprintf(path, sizeof path, "/tmp/mt_quant_%d.safetensors", (int)getpid());
    int tested = 0;
    for (size_t i = 0; i < sizeof all_precs / sizeof *all_precs; i++) {
        mt_precision p = all_precs[i];
        if (!be->ops->supports(be, p))
            continue;
        mt_err err;
        mt_calib_opts c = {p == MT_PREC_INT8 ? MT_CALIB_MSE : MT_CALIB_ABSMAX, 100.0};
        ck_assert_msg(mt_model_save_quantized(MODEL_DIR, p, &c, NULL, path, &err) == MT_OK, "%s", err.msg);
        mt_model *direct, *reloaded;
        mt_model_opts o = {.precision = p, .calib = c};
        ck_assert_msg(mt_model_load(MODEL_DIR, be, &o, &direct, &err) == MT_OK, "%s", err.msg);
        o.weights = path;
        ck_assert_msg(mt_model_load(MODEL_DIR, be, &o, &reloaded, &err) == MT_OK, "%s", err.msg);
        ck_assert_uint_eq(direct->info.gemm_bytes, reloaded->info.gemm_bytes);
        float a[2 * 384], b[2 * 384];
        ck_assert_int_eq(mt_model_embed_texts(direct, texts, lens, 2, a, NULL, &err), MT_OK);
        ck_assert_int_eq(mt_model_embed_texts(reloaded, texts, lens, 2, b, NULL, &err), MT_OK);
        ck_assert_msg(memcmp(a, b, sizeof a) == 0, "%s: reloaded vectors differ", mt_precision_name(p));
        mt_model_free(direct);
        mt_model_free(reloaded);

        /* the file says what it is: a variant asking for anything else is refused */
        mt_model *m = NULL;
        for (size_t j = 0; j < sizeof all_precs / sizeof *all_precs; j++) {
            if (all_precs[j] == p || !be->ops->supports(be, all_precs[j]))
                continue;
            o.precision = all_precs[j];
            ck_assert_int_ne(mt_model_load(MODEL_DIR, be, &o, &m, &err), MT_OK);
            ck_assert_ptr_null(m);
            ck_assert_msg(strstr(err.msg, "quantized as") && strstr(err.msg, path), "%s", err.msg);
        }
        if (mt_quant_has_scales(p)) {
            o.precision = p;
            o.calib.method = MT_CALIB_PERCENTILE;
            ck_assert_int_ne(mt_model_load(MODEL_DIR, be, &o, &m, &err), MT_OK);
            ck_assert_msg(strstr(err.msg, "calibrated with"), "%s", err.msg);
        }
        tested++;
    }
    ck_assert_int_ge(tested, 1);
    unlink(path);
}
END_TEST

/* A copy of the model folder whose model.safetensors holds every F32
 * tensor of the real one rounded to dtype d (BF16 or F16), as 16-bit
 * checkpoints come. */
static char *half_copy(st_dtype d)
{
    char *dir = folder_copy(st_dtype_name(d));
    st_file *f;
    mt_err err;
    ck_assert_int_eq(st_open(MODEL_DIR "/model.safetensors", &f, &err), MT_OK);
    const size_t n = st_count(f);
    st_tensor *t = calloc(n, sizeof *t);
    void **half = calloc(n, sizeof *half);
    for (size_t i = 0; i < n; i++) {
        t[i] = *st_get(f, i);
        if (t[i].dtype != ST_F32)
            continue;
        const size_t e = t[i].nbytes / sizeof(float);
        half[i] = malloc(2 * e + 1);
        ck_assert_int_eq(nf_encode(d == ST_BF16 ? NF_BF16 : NF_F16, t[i].data, half[i], e, 1.0f,
                                   &err), MT_OK);
        t[i].dtype = d, t[i].data = half[i], t[i].nbytes = 2 * e;
    }
    char path[300];
    snprintf(path, sizeof path, "%s/model.safetensors", dir);
    ck_assert_msg(st_write(path, t, n, NULL, &err) == MT_OK, "%s", err.msg);
    for (size_t i = 0; i < n; i++)
        free(half[i]);
    free(half);
    free(t);
    st_close(f);
    return dir;
}

/* mantissa quantize from a BF16 and an F16 copy of MiniLM: each
 * precision's file loads to the vectors of loading that copy at that
 * precision, bit for bit (each GEMM weight widened exactly as the load
 * widens it, then quantized by the same code; int8's smoothing from the
 * same calibration; the other tensors kept 16-bit, read as the copy's). */
START_TEST(bert_16bit_checkpoints_quantize_to_files_that_load_as_they_do)
{
    const char *texts[] = {"A man is playing a guitar.", "Quantized weights, saved and reloaded."};
    size_t lens[2] = {strlen(texts[0]), strlen(texts[1])};
    const st_dtype dts[2] = {ST_BF16, ST_F16};
    char path[128];
    snprintf(path, sizeof path, "/tmp/mt_quant16_%d.safetensors", (int)getpid());
    for (int d = 0; d < 2; d++) {
        const char *dir = half_copy(dts[d]);
        for (size_t i = 0; i < sizeof all_precs / sizeof *all_precs; i++) {
            const mt_precision p = all_precs[i];
            if (!be->ops->supports(be, p))
                continue;
            mt_err err;
            mt_calib_opts c = {p == MT_PREC_INT8 ? MT_CALIB_MSE : MT_CALIB_ABSMAX, 100.0};
            ck_assert_msg(mt_model_save_quantized(dir, p, &c, NULL, path, &err) == MT_OK, "%s",
                          err.msg);
            mt_model *direct, *reloaded;
            mt_model_opts o = {.precision = p, .calib = c};
            ck_assert_msg(mt_model_load(dir, be, &o, &direct, &err) == MT_OK, "%s", err.msg);
            o.weights = path;
            ck_assert_msg(mt_model_load(dir, be, &o, &reloaded, &err) == MT_OK, "%s", err.msg);
            ck_assert_uint_eq(direct->info.resident_bytes, reloaded->info.resident_bytes);
            float a[2 * 384], b[2 * 384];
            ck_assert_int_eq(mt_model_embed_texts(direct, texts, lens, 2, a, NULL, &err), MT_OK);
            ck_assert_int_eq(mt_model_embed_texts(reloaded, texts, lens, 2, b, NULL, &err), MT_OK);
            ck_assert_msg(memcmp(a, b, sizeof a) == 0, "%s from %s: reloaded vectors differ",
                          mt_precision_name(p), st_dtype_name(dts[d]));
            mt_model_free(direct);
            mt_model_free(reloaded);
        }
        char cmd[300];
        snprintf(cmd, sizeof cmd, "rm -rf %s", dir);
        ck_assert_int_eq(system(cmd), 0);
    }
    unlink(path);
}
END_TEST

START_TEST(bert_plain_model_file_is_not_taken_as_a_quantized_one)
{
    mt_model *m = NULL;
    mt_err err;
    mt_model_opts o = {.precision = MT_PREC_FP32, .weights = MODEL_DIR "/model.safetensors"};
    ck_assert_int_ne(mt_model_load(MODEL_DIR, be, &o, &m, &err), MT_OK);
    ck_assert_msg(strstr(err.msg, "not a mantissa quantized file"), "%s", err.msg);
}
END_TEST

START_TEST(bert_every_precision_batch_equals_one_at_a_time)
{
    const char *texts[] = {"a", "A man is playing a guitar.", "", "Ünïcödé, 中文 and emoji 😀",
                           "a much longer sentence that makes this sequence the longest one here"};
    size_t lens[5];
    for (int i = 0; i < 5; i++)
        lens[i] = strlen(texts[i]);
    for (size_t i = 0; i < sizeof all_precs / sizeof *all_precs; i++) {
        mt_precision p = all_precs[i];
        if (!be->ops->supports(be, p))
            continue;
        mt_model *m;
        mt_err err;
        mt_model_opts o = {.precision = p};
        ck_assert_msg(mt_model_load(MODEL_DIR, be, &o, &m, &err) == MT_OK, "%s", err.msg);
        float batch[5 * 384], one[384];
        ck_assert_int_eq(mt_model_embed_texts(m, texts, lens, 5, batch, NULL, &err), MT_OK);
        for (int t = 0; t < 5; t++) {
            ck_assert_int_eq(mt_model_embed_texts(m, texts + t, lens + t, 1, one, NULL, &err), MT_OK);
            double c = mt_cosine(one, batch + t * 384, 384);
            /* int8 quantizes activations per token, so rows do not depend on
             * the batch either: the same bound holds for every precision */
            ck_assert_msg(c > 0.999999, "%s text %d: cosine %.9f", mt_precision_name(p), t, c);
        }
        mt_model_free(m);
    }
}
END_TEST

/* Each low precision against this FP32 model on every reference sentence:
 * mean cosine at least the README's bound (fp16 0.99999, bf16 0.9999, int8
 * 0.999, fp8 0.995, int8g 0.9995), and int8g, whose scales cover 128
 * inputs rather than a whole channel, at most 0.6 of int8's drift (1 -
 * mean cosine; measured on STS-B: 2.8e-4 against 6.6e-4). */
START_TEST(bert_precisions_drift_within_bounds_and_int8g_below_int8)
{
    static const struct {
        mt_precision p;
        double mean_cos;
    } bounds[] = {{MT_PREC_FP16, 0.99999}, {MT_PREC_BF16, 0.9999}, {MT_PREC_INT8, 0.999},
                  {MT_PREC_FP8, 0.995}, {MT_PREC_INT8G, 0.9995}};
    char **sent;
    float *ref;
    int n = load_reference(&sent, &ref);
    size_t *lens = malloc(sizeof(size_t) * n);
    float *base = malloc(sizeof(float) * (size_t)n * 384), *out = malloc(sizeof(float) * (size_t)n * 384);
    mt_err err;
    for (int i = 0; i < n; i++)
        lens[i] = strlen(sent[i]);
    for (int i = 0; i < n; i += 32)
        ck_assert_int_eq(mt_model_embed_texts(model, (const char *const *)sent + i, lens + i,
                                              n - i < 32 ? n - i : 32, base + (size_t)i * 384,
                                              NULL, &err), MT_OK);
    double drift[MT_PREC_COUNT] = {0};
    for (size_t b = 0; b < sizeof bounds / sizeof *bounds; b++) {
        mt_model *m;
        mt_model_opts o = {.precision = bounds[b].p};
        ck_assert_msg(mt_model_load(MODEL_DIR, be, &o, &m, &err) == MT_OK, "%s", err.msg);
        double sum = 0;
        for (int i = 0; i < n; i += 32) {
            const int c = n - i < 32 ? n - i : 32;
            ck_assert_int_eq(mt_model_embed_texts(m, (const char *const *)sent + i, lens + i, c,
                                                  out + (size_t)i * 384, NULL, &err), MT_OK);
        }
        for (int i = 0; i < n; i++)
            sum += mt_cosine(out + (size_t)i * 384, base + (size_t)i * 384, 384);
        const double mean = sum / n;
        drift[bounds[b].p] = 1 - mean;
        printf("bert %s: mean cosine to fp32 %.8f on %d sentences\n",
               mt_precision_name(bounds[b].p), mean, n);
        ck_assert_msg(mean >= bounds[b].mean_cos, "%s: mean cosine %.8f",
                      mt_precision_name(bounds[b].p), mean);
        mt_model_free(m);
    }
    ck_assert_msg(drift[MT_PREC_INT8G] <= 0.6 * drift[MT_PREC_INT8], "int8g drift %g, int8 %g",
                  drift[MT_PREC_INT8G], drift[MT_PREC_INT8]);
    for (int i = 0; i < n; i++)
        free(sent[i]);
    free(sent);
    free(ref);
    free(lens);
    free(base);
    free(out);
}
END_TEST

static Suite *test_suite(void)
{
    Suite *s = suite_create("bert");
    TCase *tc = tcase_create("minilm");
    tcase_add_unchecked_fixture(tc, setup, teardown);
    tcase_set_timeout(tc, 300);
    tcase_add_test(tc, bert_reads_minilm_architecture);
    tcase_add_test(tc, bert_pieces_match_pytorch_embeddings_layer0_and_last_hidden);
    tcase_add_test(tc, bert_norms_give_back_the_pooled_vector);
    tcase_add_test(tc, bert_forward_tokens_are_the_last_hidden_states);
    tcase_add_test(tc, bert_matches_sentence_transformers_on_every_reference_sentence);
    tcase_add_test(tc, bert_batch_of_ragged_lengths_equals_one_at_a_time);
    tcase_add_test(tc, bert_forward_rejects_bad_ids_and_lengths);
    tcase_add_test(tc, bert_load_errors_name_the_file_and_tensor);
    tcase_add_test(tc, bert_refuses_precisions_the_backend_lacks);
    tcase_add_test(tc, bert_quantized_file_reloads_to_the_same_vectors_without_requantizing);
    tcase_add_test(tc, bert_16bit_checkpoints_quantize_to_files_that_load_as_they_do);
    tcase_add_test(tc, bert_plain_model_file_is_not_taken_as_a_quantized_one);
    tcase_add_test(tc, bert_every_precision_batch_equals_one_at_a_time);
    tcase_add_test(tc, bert_precisions_drift_within_bounds_and_int8g_below_int8);
    suite_add_tcase(s, tc);
    return s;
}

#include "tests/unit/check_main.h"
