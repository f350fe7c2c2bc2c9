/* st_shards.c: a sharded checkpoint (Hugging Face's
 * model.safetensors.index.json, or pytorch_model.bin.index.json whose
 * shards are PyTorch checkpoints) opened as one st_file: the index's
 * "weight_map" (tensor name -> shard file) is read strictly (engine/
 * jsonfile.h), each shard named there is opened and validated by st_open
 * (a shard is a plain file name beside the index: no directories, so an
 * index cannot reach elsewhere), every mapped tensor must be in its shard,
 * and no tensor may be in two shards. The combined file owns the shards;
 * its tensors point into their mappings, by name as st_find expects. Also
 * st_model_path, which picks a model folder's weights file.
 */
#include <cJSON.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "engine/jsonfile.h"
#include "engine/weights/st_internal.h"

/* The shard names of the map, each once, in the order first met. */
static mt_status shard_names(const char *path, const cJSON *map, const char ***names,
                             size_t *n, mt_err *err)
{
    const cJSON *it;
    size_t cap = 0;
    *names = NULL;
    *n = 0;
    cJSON_ArrayForEach(it, map)
    {
        if (!cJSON_IsString(it) || !*it->valuestring || strchr(it->valuestring, '/') ||
            !strcmp(it->valuestring, "..") || !strcmp(it->valuestring, "."))
            return mt_fail(err, MT_EFORMAT, "%s: weight_map['%s'] must be a file name beside "
                           "the index", path, ST_SHOW(it->string));
        size_t i = 0;
        while (i < *n && strcmp((*names)[i], it->valuestring))
            i++;
        if (i < *n)
            continue;
        if (*n == cap) {
            cap = cap ? 2 * cap : 8;
            const char **grown = realloc(*names, sizeof **names * cap);
            if (!grown)
                return mt_fail(err, MT_ENOMEM, "%s: out of memory", path);
            *names = grown;
        }
        (*names)[(*n)++] = it->valuestring;
    }
    if (*n == 0)
        return mt_fail(err, MT_EFORMAT, "%s: weight_map names no tensor", path);
    return MT_OK;
}

/* Opens each shard (dir + name) into f->shards. */
static mt_status open_shards(st_file *f, const char *path, const char *const *names, size_t n,
                             mt_err *err)
{
    const char *slash = strrchr(path, '/');
    const int dl = slash ? (int)(slash - path + 1) : 0;
    if (!(f->shards = calloc(n, sizeof *f->shards)))
        return mt_fail(err, MT_ENOMEM, "%s: out of memory", path);
    for (size_t i = 0; i < n; i++) {
        char sp[4096];
        snprintf(sp, sizeof sp, "%.*s%s", dl, path, names[i]);
        mt_status st = st_open(sp, &f->shards[i], err);
        if (st != MT_OK)
            return mt_prefix(err, st, "%s: shard: ", path);
        f->nshards = i + 1;
        f->n += f->shards[i]->n;
    }
    return MT_OK;
}

/* The shards' tensors as f's, by name; a tensor of the map must be in the
 * shard it names, and none in two. */
static mt_status combine(st_file *f, const char *path, const cJSON *map,
                         const char *const *names, mt_err *err)
{
    f->entries = calloc(f->n ? f->n : 1, sizeof *f->entries);
    f->by_name = calloc(f->n ? f->n : 1, sizeof *f->by_name);
    if (!f->entries || !f->by_name)
        return mt_fail(err, MT_ENOMEM, "%s: out of memory", path);
    size_t at = 0;
    for (size_t s = 0; s < f->nshards; s++)
        for (size_t i = 0; i < f->shards[s]->n; i++)
            f->entries[at++] = f->shards[s]->entries[i];
    for (size_t i = 0; i < f->n; i++)
        f->by_name[i] = &f->entries[i].t;
    qsort(f->by_name, f->n, sizeof *f->by_name, st_cmp_names);
    for (size_t i = 1; i < f->n; i++)
        if (!strcmp(f->by_name[i]->name, f->by_name[i - 1]->name))
            return mt_fail(err, MT_EFORMAT, "%s: tensor '%s' is in two shards", path,
                           ST_SHOW(f->by_name[i]->name));
    const cJSON *it;
    cJSON_ArrayForEach(it, map)
    {
        size_t s = 0;
        while (strcmp(names[s], it->valuestring))
            s++;
        if (!st_find(f->shards[s], it->string))
            return mt_fail(err, MT_EFORMAT, "%s: tensor '%s' is not in %s, as weight_map says",
                           path, ST_SHOW(it->string), ST_SHOW(names[s]));
    }
    return MT_OK;
}

/* The first of the weights files transformers looks for that the folder
 * has; model.safetensors (for the message) when it has none. */
void st_model_path(const char *dir, char *buf, size_t cap)
{
    static const char *const names[] = {
        "model.safetensors", "model.safetensors.index.json",
        "pytorch_model.bin", "pytorch_model.bin.index.json",
    };
    for (size_t i = 0; i < sizeof names / sizeof names[0]; i++) {
        snprintf(buf, cap, "%s/%s", dir, names[i]);
        if (access(buf, F_OK) == 0)
            return;
    }
    snprintf(buf, cap, "%s/%s", dir, names[0]);
}

mt_status st_open_index(const char *path, st_file **out, mt_err *err)
{
    cJSON *j = NULL;
    const char **names = NULL;
    size_t n = 0;
    st_file *f = calloc(1, sizeof *f);
    mt_status st = f && (f->label = strdup(path)) ? mt_json_load(path, &j, err)
                                                  : mt_fail(err, MT_ENOMEM, "out of memory");
    const cJSON *map = j ? cJSON_GetObjectItemCaseSensitive(j, "weight_map") : NULL;
    if (st == MT_OK && !cJSON_IsObject(map))
        st = mt_fail(err, MT_EFORMAT, "%s: field 'weight_map' missing or not an object", path);
    if (st == MT_OK && (st = shard_names(path, map, &names, &n, err)) == MT_OK &&
        (st = open_shards(f, path, names, n, err)) == MT_OK)
        st = combine(f, path, map, names, err);
    free(names);
    cJSON_Delete(j);
    if (st != MT_OK) {
        st_close(f);
        return st;
    }
    *out = f;
    return MT_OK;
}
