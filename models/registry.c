/* registry.c: the architectures Mantissa can serve, and the choice among
 * them by a model folder's config.json "model_type" (engine/model.h's
 * mt_model_load and mt_model_save_quantized). A new architecture is one
 * file in models/ and one row here. */
#include <stdio.h>
#include <string.h>

#include "engine/jsonfile.h"
#include "engine/model.h"
#include "models/bert.h"

typedef struct {
    const char *model_type; /* config.json "model_type" */
    mt_status (*load)(const char *dir, mt_backend *be, const mt_model_opts *o, mt_model **out,
                      mt_err *err);
    mt_status (*save_quantized)(const char *dir, mt_precision p, const mt_calib_opts *calib,
                                const char *mix, const char *out_path, mt_err *err);
} arch;

static const arch archs[] = {
    {"bert", bert_load_model, bert_save_quantized},
    {"mpnet", bert_load_model, bert_save_quantized}, /* models/mpnet.c */
};

/* The architecture of dir (its config.json's model_type). */
static mt_status find_arch(const char *dir, const arch **out, mt_err *err)
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
        if (cJSON_IsString(mt) && !strcmp(mt->valuestring, archs[i].model_type)) {
            cJSON_Delete(j);
            *out = &archs[i];
            return MT_OK;
        }
        snprintf(names + strlen(names), sizeof names - strlen(names), "%s\"%s\"",
                 i ? ", " : "", archs[i].model_type);
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
    const arch *a;
    mt_status st = find_arch(dir, &a, err);
    return st != MT_OK ? st : a->load(dir, be, o, out, err);
}

mt_status mt_model_save_quantized(const char *dir, mt_precision p, const mt_calib_opts *calib,
                                  const char *mix, const char *out_path, mt_err *err)
{
    const arch *a;
    mt_status st = find_arch(dir, &a, err);
    return st != MT_OK ? st : a->save_quantized(dir, p, calib, mix, out_path, err);
}
