/* outputs.c: what a forward gives beyond a pooled vector per text: TEI's
 * POST /embed_all (a vector per token: the last hidden states, or on a
 * model with a ColBERT head its ColBERT vectors), and the outputs of a
 * model with token heads (bge-m3: its dense CLS vector, its lexical weights
 * and its ColBERT vectors, all from one forward: engine/model.h's
 * forward_outputs): TEI's POST /embed_sparse (a list of {index, value}
 * per input), our POST /embed_multivector (the ColBERT vectors per input),
 * and what the OpenAI route's "outputs" extension (openai.c) reads and
 * writes: "embedding", "sparse_embedding" ({"token id": weight}) and
 * "colbert_embedding" in one data item. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "server/api/api.h"

static const struct {
    const char *name;
    unsigned bit;
} output_names[] = {
    {"dense", API_OUT_DENSE}, {"sparse", API_OUT_SPARSE}, {"colbert", API_OUT_COLBERT}};

/* Whether v's model gives output bit. */
static bool has_output(const srv_variant *v, unsigned bit)
{
    const mt_model_info *mi = mt_model_get_info(v->model);
    return bit == API_OUT_DENSE || (bit == API_OUT_SPARSE && mi->sparse) ||
           (bit == API_OUT_COLBERT && mi->colbert_dim > 0);
}

bool api_outputs_parse(const cJSON *f, const srv_variant *v, const char *model, unsigned *out,
                       http_resp *r)
{
    *out = 0;
    if (!f || cJSON_IsNull(f))
        return true;
    if (!cJSON_IsArray(f) || cJSON_GetArraySize(f) == 0) {
        api_error(r, 400, "outputs", "\"outputs\" must be a non-empty list of \"dense\", "
                  "\"sparse\" and \"colbert\"");
        return false;
    }
    const cJSON *it;
    cJSON_ArrayForEach(it, f)
    {
        size_t k = 0;
        while (k < sizeof output_names / sizeof *output_names &&
               !(cJSON_IsString(it) && !strcmp(it->valuestring, output_names[k].name)))
            k++;
        if (k == sizeof output_names / sizeof *output_names) {
            api_error(r, 400, "outputs", "\"outputs\" may hold only \"dense\", \"sparse\" and "
                      "\"colbert\"");
            return false;
        }
        const unsigned bit = output_names[k].bit;
        if (*out & bit) {
            api_error(r, 400, "outputs", "\"outputs\" names \"%s\" twice", output_names[k].name);
            return false;
        }
        if (!has_output(v, bit)) {
            api_error(r, 400, "outputs", "model %s has no %s output: it has no %s head (bge-m3 "
                      "keeps them in sparse_linear.pt and colbert_linear.pt)", model,
                      output_names[k].name, bit == API_OUT_SPARSE ? "sparse" : "ColBERT");
            return false;
        }
        *out |= bit;
    }
    return true;
}

const float *api_dense_row(const api_embed *c, int i)
{
    if (!c->outputs)
        return c->job.out + (size_t)i * c->v->hidden;
    return c->job.out + (size_t)c->job.off[i] * c->v->outputs_width + 1;
}

/* One token's lexical weight: its id and weight. */
typedef struct {
    int32_t id;
    float w;
} lex;

static int by_id_then_weight(const void *a, const void *b)
{
    const lex *x = a, *y = b;
    if (x->id != y->id)
        return x->id < y->id ? -1 : 1;
    return x->w > y->w ? -1 : x->w < y->w;
}

/* Text i's lexical weights, as bge-m3's encode gives them: per token id,
 * the largest weight of its tokens, where above 0 (special tokens have 0);
 * ordered by id. *n gets the count; NULL when out of memory. */
static lex *lexical_weights(const api_embed *c, int i, int *n)
{
    const int32_t *off = c->job.off;
    const size_t w = (size_t)c->v->outputs_width;
    lex *l = malloc(sizeof *l * (size_t)(off[i + 1] - off[i] + 1));
    int k = 0;
    for (int t = off[i]; l && t < off[i + 1]; t++)
        if (c->job.out[(size_t)t * w] > 0.f)
            l[k++] = (lex){c->job.ids[t], c->job.out[(size_t)t * w]};
    if (!l)
        return NULL;
    qsort(l, (size_t)k, sizeof *l, by_id_then_weight);
    int u = 0;
    for (int j = 0; j < k; j++)
        if (!u || l[u - 1].id != l[j].id)
            l[u++] = l[j];
    *n = u;
    return l;
}

bool api_write_sparse(sbuf *b, const api_embed *c, int i, bool tei)
{
    int n = 0;
    lex *l = lexical_weights(c, i, &n);
    if (!l)
        return false;
    sb_putc(b, tei ? '[' : '{');
    for (int j = 0; j < n; j++) {
        sb_puts(b, j ? "," : "");
        if (tei)
            sb_printf(b, "{\"index\":%d,\"value\":", (int)l[j].id);
        else
            sb_printf(b, "\"%d\":", (int)l[j].id);
        sb_float(b, l[j].w);
        if (tei)
            sb_putc(b, '}');
    }
    sb_putc(b, tei ? ']' : '}');
    free(l);
    return true;
}

void api_write_colbert(sbuf *b, const api_embed *c, int i)
{
    const int32_t *off = c->job.off;
    const size_t w = (size_t)c->v->outputs_width;
    const int cd = mt_model_get_info(c->v->model)->colbert_dim;
    sb_reserve(b, (size_t)(off[i + 1] - off[i]) * (size_t)cd * 12 + 8);
    sb_putc(b, '[');
    for (int t = off[i] + 1; t < off[i + 1]; t++) {
        if (t > off[i] + 1)
            sb_putc(b, ',');
        sb_float_array(b, c->job.out + (size_t)t * w + 1, (size_t)cd);
    }
    sb_putc(b, ']');
}

/* ---- TEI's /embed_sparse and /embed_multivector ----------------------- */

typedef void tei_respond_fn(const http_app *app, http_deferred *d, http_resp *r);

/* The TEI answer of a job of one output (c->outputs: API_OUT_SPARSE or
 * API_OUT_COLBERT): per input, its lexical weights or ColBERT vectors. */
static void tei_outputs_respond(const http_app *app, http_deferred *d, http_resp *r)
{
    api_embed *c = (api_embed *)d;
    if (!api_embed_result(c, r))
        return;
    sbuf *b = &r->body;
    sb_putc(b, '[');
    for (int i = 0; i < c->job.n; i++) {
        sb_puts(b, i ? "," : "");
        if (c->outputs == API_OUT_COLBERT) {
            api_write_colbert(b, c, i);
        } else if (!api_write_sparse(b, c, i, true)) {
            b->len = 0;
            api_error(r, 500, NULL, "out of memory");
            return;
        }
    }
    sb_putc(b, ']');
}

/* The /embed_all answer: per input, the vector of each of its tokens (the
 * special ones too), as the last layer gave them, before pooling. */
static void embed_all_respond(const http_app *app, http_deferred *d, http_resp *r)
{
    api_embed *c = (api_embed *)d;
    if (!api_embed_result(c, r))
        return;
    const int h = c->v->hidden;
    const int32_t *off = c->job.off;
    sbuf *b = &r->body;
    sb_reserve(b, (size_t)off[c->job.n] * (size_t)h * 12 + 16);
    sb_putc(b, '[');
    for (int i = 0; i < c->job.n; i++) {
        sb_puts(b, i ? ",[" : "[");
        for (int t = off[i]; t < off[i + 1]; t++) {
            if (t > off[i])
                sb_putc(b, ',');
            sb_float_array(b, c->job.out + (size_t)t * h, (size_t)h);
        }
        sb_putc(b, ']');
    }
    sb_putc(b, ']');
}

/* Where a request of a per-token route goes: want 0 (/embed_all) gives
 * the model's hidden states, or its ColBERT vectors where it has that head
 * (the per-token vectors it was trained to give); else the one output of
 * /embed_sparse or /embed_multivector. *o gets the job's options; NULL
 * (with *why) when the model cannot answer it. */
static tei_respond_fn *token_job(const srv_variant *v, unsigned want, api_embed_opts *o,
                                 const char **why)
{
    const bool colbert = mt_model_get_info(v->model)->colbert_dim > 0;
    if (!want && !colbert && !v->model->ops->forward_tokens) {
        *why = "`embed_all` is not available for this model";
        return NULL;
    }
    if (!want && !colbert) {
        o->token_rows = true;
        return embed_all_respond;
    }
    o->outputs = want ? want : API_OUT_COLBERT;
    if (has_output(v, o->outputs))
        return tei_outputs_respond;
    *why = want == API_OUT_SPARSE ? "Model is not an embedding model with SPLADE pooling"
                                  : "`embed_multivector` is not available for this model: it "
                                    "has no ColBERT head";
    return NULL;
}

/* /embed_all, /embed_sparse and /embed_multivector: TEI's request (inputs,
 * truncate, truncation_direction, prompt_name) as one job (token_job says
 * which), batched with the other jobs of its kind; 424 (TEI's Backend
 * error) on a model that cannot answer it. */
static void token_route(const http_app *app, const http_req *req, const cJSON *j, unsigned want,
                        http_resp *r)
{
    static const char *const keys[] = {"inputs", "truncate", "truncation_direction",
                                       "prompt_name"};
    const char **texts = NULL, *why = NULL;
    size_t *lens = NULL;
    srv_model *m;
    srv_variant *v;
    api_embed_opts o = {0};
    api_embed *c;
    tei_respond_fn *respond;
    int n;
    if (tei_known_fields(j, "", keys, sizeof keys / sizeof *keys, r) &&
        tei_text_options(j, "", &o, r) &&
        (n = api_text_inputs(app, cJSON_GetObjectItemCaseSensitive(j, "inputs"), "inputs", 422,
                             &texts, &lens, r)) > 0 &&
        tei_resolve(app, req, &m, &v, r)) {
        if (!(respond = token_job(v, want, &o, &why))) /* as TEI answers */
            api_error_typed(r, 424, "Backend", NULL, "Backend error: %s", why);
        else if ((c = api_embed_new(app, req, m, v, texts, lens, n, &o, r)))
            api_embed_run(app, c, r, respond);
    }
    free(texts);
    free(lens);
}

static void sparse_body(const http_app *app, const http_req *req, const cJSON *j, http_resp *r)
{
    token_route(app, req, j, API_OUT_SPARSE, r);
}

static void multivector_body(const http_app *app, const http_req *req, const cJSON *j,
                             http_resp *r)
{
    token_route(app, req, j, API_OUT_COLBERT, r);
}

static void embed_all(const http_app *app, const http_req *req, const cJSON *j, http_resp *r)
{
    token_route(app, req, j, 0, r);
}

API_HANDLER(api_tei_embed_all)
{
    tei_with_body(app, req, r, embed_all);
}

API_HANDLER(api_tei_embed_sparse)
{
    tei_with_body(app, req, r, sparse_body);
}

API_HANDLER(api_tei_embed_multivector)
{
    tei_with_body(app, req, r, multivector_body);
}
