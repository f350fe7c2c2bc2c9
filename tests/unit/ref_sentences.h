/* ref_sentences.h: the reference sentences the model tests share
 * (tests/fixtures/reference/sentences.jsonl: one JSON string per line,
 * written by tools/make-reference.py's sentence-transformers run), read
 * into a malloc'd array of strings. Header-only (static): each test is one
 * program. */
#ifndef MT_TESTS_REF_SENTENCES_H
#define MT_TESTS_REF_SENTENCES_H

#include <cJSON.h>
#include <check.h>
#include <stdlib.h>
#include <string.h>

#include "engine/jsonfile.h"

#define REF_SENTENCES "tests/fixtures/reference/sentences.jsonl"

/* The sentences into *sent (each and the array malloc'd); their count. */
static int read_ref_sentences(char ***sent)
{
    char *text, *save;
    size_t len;
    int n = 0;
    mt_err err;
    ck_assert_msg(mt_read_file(REF_SENTENCES, 1 << 24, &text, &len, &err) == MT_OK, "%s", err.msg);
    *sent = NULL;
    for (char *l = strtok_r(text, "\n", &save); l; l = strtok_r(NULL, "\n", &save)) {
        cJSON *s = cJSON_Parse(l);
        ck_assert(cJSON_IsString(s));
        *sent = realloc(*sent, sizeof(char *) * (n + 1));
        (*sent)[n++] = strdup(s->valuestring);
        cJSON_Delete(s);
    }
    free(text);
    return n;
}

#endif
