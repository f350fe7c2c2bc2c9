/* registry.c: the architectures Mantissa can serve, one row each, and the
 * choice among them by a model folder's config.json "model_type"
 * (engine/model.h's mt_model_load, mt_model_save_quantized and
 * mt_model_reference_probes). A row is a
 * const enc_arch (models/arch.h) defined in its own file; a new encoder
 * family is that one file and one line in ARCH_ROWS below. */
#include <stdio.h>
#include <string.h>

#include "engine/jsonfile.h"
#include "engine/model.h"
#include "models/arch.h"
#include "models/encoder.h"

/* The rows, in the order an error lists them: X(the row's variable),
 * each defined in the file named beside it; a new row is one more line. */
#define ARCH_ROWS(X)                                                                             \
    X(enc_arch_bert)       /* models/arch_bert.c */                                              \
    X(enc_arch_mpnet)      /* models/mpnet.c */                                                  \
    X(enc_arch_distilbert) /* models/distilbert.c */                                             \
    X(enc_arch_qwen3)      /* models/qwen3.c */                                                  \
    X(enc_arch_xlm_roberta) /* models/xlm_roberta.c */                                           \
    /* end of the rows */

#define ARCH_DECLARE(row) extern const enc_arch row;
#define ARCH_ENTRY(row) &row,
ARCH_ROWS(ARCH_DECLARE)
static const enc_arch *const archs[] = {ARCH_ROWS(ARCH_ENTRY)};

/* The architecture of dir (its config.json's model_type). */
static mt_status find_arch(const char *dir, const enc_arch **out, mt_err *err)
{
    char path[4096];
    snprintf(path, sizeof path, "%s/config.json", dir);
    cJSON *j;
    mt_status st = mt_json_load(path, &j, err);
    if (st != MT_OK)
        return st;
    const cJSON *mt = cJSON_GetObjectItemCaseSensitive(j, "model_type");
    char names[256] = "";
    for (size_t i = 0; i < sizeof archs / sizeof *archs; i++) {
        if (cJSON_IsString(mt) && !strcmp(mt->valuestring, archs[i]->model_type)) {
            cJSON_Delete(j);
            *out = archs[i];
            return MT_OK;
        }
        snprintf(names + strlen(names), sizeof names - strlen(names), "%s\"%s\"",
                 i ? ", " : "", archs[i]->model_type);
    }
    st = cJSON_IsString(mt)
             ? mt_fail(err, MT_EUNSUPPORTED, "%s: model_type \"%.100s\" is not supported (%s)",
                       path, mt->valuestring, names)
             : mt_fail(err, MT_EFORMAT, "%s: field 'model_type' missing or not a string", path);
    cJSON_Delete(j);
    return st;
}

mt_status mt_model_load(const char *dir, mt_backend *be, const mt_model_opts *o, mt_model **out,
                        mt_err *err)
{
    const enc_arch *a;
    mt_status st = find_arch(dir, &a, err);
    return st != MT_OK ? st : enc_load_model(dir, a, be, o, out, err);
}

mt_status mt_model_save_quantized(const char *dir, mt_precision p, const mt_calib_opts *calib,
                                  const char *mix, const char *out_path, mt_err *err)
{
    const enc_arch *a;
    mt_status st = find_arch(dir, &a, err);
    return st != MT_OK ? st : enc_save_quantized(dir, a, p, calib, mix, out_path, err);
}

mt_status mt_model_reference_probes(const char *dir, mt_backend *be, int max_seq_len,
                                    float **out, int *hidden, mt_err *err)
{
    const enc_arch *a;
    mt_status st = find_arch(dir, &a, err);
    return st != MT_OK ? st : enc_reference_probes(dir, a, be, max_seq_len, out, hidden, err);
}
