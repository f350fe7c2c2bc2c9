/* embed.c: mantissa embed: texts from stdin (one per line, or one JSON
 * string per line with --jsonl), one JSON array of floats per line out. */
#include <cJSON.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cmd/cmd.h"
#include "server/base/sbuf.h"
#include "server/main.h"

/* Line lineno of stdin as a text (its JSON string with --jsonl); *j owns
 * it then. False after printing why. */
static bool line_text(char *line, ssize_t n, bool jsonl, int lineno, const char **text,
                      size_t *len, cJSON **j)
{
    *text = line;
    *len = (size_t)n;
    *j = NULL;
    if (!jsonl)
        return true;
    *j = cJSON_ParseWithLength(line, (size_t)n);
    if (!cJSON_IsString(*j)) {
        fprintf(stderr, "mantissa: stdin line %d: not a JSON string\n", lineno);
        return false;
    }
    *text = (*j)->valuestring;
    *len = strlen(*text);
    return true;
}

int cmd_embed(int argc, char **argv)
{
    static const char usage[] =
        "usage: mantissa embed [--config FILE] [--model NAME[@VARIANT]] [--jsonl] < texts\n"
        "Embeds each line of stdin (or each JSON string, one per line, with --jsonl) and\n"
        "prints one JSON array of floats per line.\n";
    cmd_opts o;
    if (cmd_parse(argc, argv, &o, usage) != 0)
        return 2;
    cfg_config *cfg;
    srv_models *s = mt_load_config_models(o.config, &cfg);
    if (!s)
        return 1;
    srv_model *m;
    srv_variant *v = cmd_pick(s, o.model, &m);
    int rc = v ? 0 : 1;
    char *line = NULL;
    size_t cap = 0;
    ssize_t n;
    float *vec = malloc(sizeof(float) * (size_t)(v ? v->hidden : 1));
    sbuf b;
    sb_init(&b);
    for (int lineno = 1; v && !rc && (n = getline(&line, &cap, stdin)) >= 0; lineno++) {
        if (n && line[n - 1] == '\n')
            line[--n] = 0;
        const char *text;
        size_t len;
        cJSON *j;
        mt_err err;
        if (!line_text(line, n, o.jsonl, lineno, &text, &len, &j)) {
            rc = 1;
        } else if (mt_model_embed_texts(v->model, &text, &len, 1, vec, NULL, &err) != MT_OK) {
            fprintf(stderr, "mantissa: stdin line %d: %s\n", lineno, err.msg);
            rc = 1;
        } else {
            b.len = 0;
            sb_float_array(&b, vec, (size_t)v->hidden);
            printf("%s\n", b.data);
        }
        cJSON_Delete(j);
    }
    sb_free(&b);
    free(line);
    free(vec);
    srv_models_free(s);
    cfg_free(cfg);
    return rc;
}
