/* embed.c: mantissa embed: texts from stdin (one per line, or one JSON
 * string per line with --jsonl), one JSON array of floats per line out.
 * A blank line (nothing but spaces, tabs or a CR; with --jsonl also the
 * string "") is refused, naming its line, so that output line i is always
 * the vector of input line i; --skip-blank skips blank lines instead. */
#include <cJSON.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cmd/cmd.h"
#include "server/base/sbuf.h"

/* Nothing but spaces, tabs and CRs (a Windows line end): no text. */
static bool blank(const char *s, size_t n)
{
    for (size_t i = 0; i < n; i++)
        if (s[i] != ' ' && s[i] != '\t' && s[i] != '\r')
            return false;
    return true;
}

/* Line lineno of stdin as a text (its JSON string with --jsonl); *j owns
 * it then; *text is NULL for a blank line. False after printing why. */
static bool line_text(char *line, ssize_t n, bool jsonl, int lineno, const char **text,
                      size_t *len, cJSON **j)
{
    *text = line;
    *len = (size_t)n;
    *j = NULL;
    if (blank(line, (size_t)n)) {
        *text = NULL;
        return true;
    }
    if (!jsonl)
        return true;
    *j = cJSON_ParseWithLength(line, (size_t)n);
    if (!cJSON_IsString(*j)) {
        fprintf(stderr, "mantissa: stdin line %d: not a JSON string\n", lineno);
        return false;
    }
    *text = (*j)->valuestring;
    *len = strlen(*text);
    if (!*len)
        *text = NULL;
    return true;
}

/* Embeds line lineno (n bytes) and prints its vector; a blank one is
 * skipped (skip) or refused. False after printing why. */
static bool embed_line(srv_variant *v, const cmd_opts *o, char *line, ssize_t n, int lineno,
                       float *vec, sbuf *b)
{
    const char *text;
    size_t len;
    cJSON *j;
    mt_err err;
    bool ok = line_text(line, n, o->jsonl, lineno, &text, &len, &j);
    if (ok && !text && !o->skip_blank) {
        fprintf(stderr,
                "mantissa: stdin line %d is blank: there is no text to embed (--skip-blank "
                "skips blank lines, and the output then has no line for them)\n",
                lineno);
        ok = false;
    } else if (ok && text &&
               mt_model_embed_texts(v->model, &text, &len, 1, vec, NULL, &err) != MT_OK) {
        fprintf(stderr, "mantissa: stdin line %d: %s\n", lineno, err.msg);
        ok = false;
    } else if (ok && text) {
        b->len = 0;
        sb_float_array(b, vec, (size_t)v->hidden);
        printf("%s\n", b->data);
    }
    cJSON_Delete(j);
    return ok;
}

int cmd_embed(int argc, char **argv)
{
    static const char usage[] =
        "usage: mantissa embed [--config FILE] [--model NAME[@VARIANT]] [--jsonl] [--skip-blank]"
        " < texts\n"
        "Embeds each line of stdin (or each JSON string, one per line, with --jsonl) and\n"
        "prints one JSON array of floats per line. A blank line (or \"\" with --jsonl) is an\n"
        "error naming it, so that output line i is input line i's vector; --skip-blank\n"
        "skips blank lines instead (the output then has no line for them).\n";
    cmd_opts o;
    if (cmd_parse(argc, argv, &o, usage) != 0)
        return 2;
    cfg_config *cfg;
    srv_models *s = cmd_load(&o, &cfg);
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
        if (!embed_line(v, &o, line, n, lineno, vec, &b))
            rc = 1;
    }
    sb_free(&b);
    free(line);
    free(vec);
    srv_models_free(s);
    cfg_free(cfg);
    return rc;
}
