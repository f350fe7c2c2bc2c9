/* test_log.c: the log's two formats (server/base/log.c). What a line
 * writes on stderr, captured: in JSON one object (parsed back with cJSON)
 * with ts, level, msg and the fields, strings escaped and a non-finite
 * number null; in text "mantissa: " and the words (msg when there are
 * none), no field; the level filter, and LOG_ALWAYS past it; the request
 * line in both (with its trace id); libmicrohttpd's messages (log_mhd)
 * without their newline. */
#include <cJSON.h>
#include <check.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "server/base/log.h"

static FILE *cap;
static int saved_fd = -1;

/* stderr into a temporary file until captured() */
static void capture(void)
{
    cap = tmpfile();
    ck_assert_ptr_nonnull(cap);
    saved_fd = dup(STDERR_FILENO);
    ck_assert_int_ge(dup2(fileno(cap), STDERR_FILENO), 0);
}

/* What was written since capture() (the caller frees it). */
static char *captured(void)
{
    dup2(saved_fd, STDERR_FILENO);
    close(saved_fd);
    long n = ftell(cap);
    ck_assert_int_ge(n, 0);
    char *s = calloc((size_t)n + 1, 1);
    rewind(cap);
    ck_assert_uint_eq(fread(s, 1, (size_t)n, cap), (size_t)n);
    fclose(cap);
    return s;
}

/* The one JSON object of out (a single line), checked for ts/level/msg. */
static cJSON *one_object(const char *out, const char *level, const char *msg)
{
    size_t n = strlen(out);
    ck_assert_msg(n > 0 && out[n - 1] == '\n' && !memchr(out, '\n', n - 1), "[%s]", out);
    cJSON *j = cJSON_Parse(out);
    ck_assert_msg(cJSON_IsObject(j), "not an object: %s", out);
    const cJSON *ts = cJSON_GetObjectItemCaseSensitive(j, "ts");
    ck_assert(cJSON_IsString(ts) && strlen(ts->valuestring) == 24);
    ck_assert_str_eq(cJSON_GetObjectItemCaseSensitive(j, "level")->valuestring, level);
    ck_assert_str_eq(cJSON_GetObjectItemCaseSensitive(j, "msg")->valuestring, msg);
    return j;
}

static void a_line(int level)
{
    log_line l;
    log_begin(&l, level, "loaded");
    log_str(&l, "model", "mini\"lm\n");
    log_str(&l, "absent", NULL);
    log_int(&l, "threads", 16);
    log_num(&l, "cos", 0.99935812, 6);
    log_num(&l, "nan", NAN, 1);
    log_bool(&l, "tls", 0);
    log_words(&l, "loaded %s", "minilm");
    log_words(&l, " on %d threads", 16);
    log_end(&l);
}

START_TEST(json_line_has_ts_level_msg_and_fields)
{
    log_set_format(LOG_JSON);
    log_set_level(LOG_INFO);
    capture();
    a_line(LOG_INFO);
    char *out = captured();
    cJSON *j = one_object(out, "info", "loaded");
    ck_assert_str_eq(cJSON_GetObjectItemCaseSensitive(j, "model")->valuestring, "mini\"lm\n");
    ck_assert_ptr_null(cJSON_GetObjectItemCaseSensitive(j, "absent"));
    ck_assert_int_eq(cJSON_GetObjectItemCaseSensitive(j, "threads")->valueint, 16);
    ck_assert(cJSON_GetObjectItemCaseSensitive(j, "cos")->valuedouble == 0.999358);
    ck_assert(cJSON_IsNull(cJSON_GetObjectItemCaseSensitive(j, "nan")));
    ck_assert(cJSON_IsFalse(cJSON_GetObjectItemCaseSensitive(j, "tls")));
    ck_assert_msg(!strstr(out, "minilm on"), "the words are text's alone: %s", out);
    cJSON_Delete(j);
    free(out);
}
END_TEST

START_TEST(text_line_is_the_words_alone)
{
    log_set_format(LOG_TEXT);
    log_set_level(LOG_INFO);
    capture();
    a_line(LOG_INFO);
    log_msg(LOG_WARN, "reload: %s", "refused");
    log_line l; /* no words: the msg */
    log_begin(&l, LOG_INFO, "stopped");
    log_int(&l, "signal", 15);
    log_end(&l);
    char *out = captured();
    ck_assert_str_eq(out, "mantissa: loaded minilm on 16 threads\n"
                          "mantissa: reload: refused\n"
                          "mantissa: stopped\n");
    free(out);
}
END_TEST

START_TEST(the_level_filters_and_always_passes_it)
{
    for (int f = LOG_TEXT; f <= LOG_JSON; f++) {
        log_set_format(f);
        log_set_level(LOG_OFF);
        capture();
        a_line(LOG_ERROR);
        log_msg(LOG_ERROR, "dropped");
        char *out = captured();
        ck_assert_str_eq(out, "");
        free(out);
        capture();
        a_line(LOG_INFO | LOG_ALWAYS);
        log_msg(LOG_ERROR | LOG_ALWAYS, "kept %d", 1);
        out = captured();
        ck_assert_msg(strstr(out, "kept 1") && strstr(out, "loaded"), "%s", out);
        if (f == LOG_JSON)
            ck_assert_msg(strstr(out, "\"level\":\"info\"") && strstr(out, "\"level\":\"error\""),
                          "the level without the flag: %s", out);
        free(out);
    }
    log_set_level(LOG_INFO);
}
END_TEST

START_TEST(request_line_in_both_formats)
{
    log_request_fields f = {.id = "r-1", .method = "POST", .path = "/v1/embeddings",
                            .model = "minilm", .variant = "fp32", .status = 200, .inputs = 2,
                            .tokens = 14, .queue_ms = 0.125, .compute_ms = 3.2, .total_ms = 3.5};
    log_set_level(LOG_INFO);
    log_set_format(LOG_TEXT);
    capture();
    log_request(LOG_INFO, &f);
    f.status = 404;
    f.model = f.variant = NULL;
    f.inputs = 0;
    f.id = NULL;
    f.error = "model \"nope\" is not served here";
    f.trace_id = "4bf92f3577b34da6a3ce929d0e0e4736";
    f.span_id = "00f067aa0ba902b7";
    log_request(LOG_INFO, &f);
    char *out = captured();
    ck_assert_str_eq(out, "mantissa: request r-1: POST /v1/embeddings 200, minilm@fp32, 2 inputs, "
                          "14 tokens, 3.50 ms (queue 0.12, compute 3.20)\n"
                          "mantissa: request: POST /v1/embeddings 404, 3.50 ms (queue 0.12, "
                          "compute 3.20), trace 4bf92f3577b34da6a3ce929d0e0e4736: model "
                          "\"nope\" is not served here\n");
    free(out);
    log_set_format(LOG_JSON);
    capture();
    log_request(LOG_WARN, &f);
    out = captured();
    cJSON *j = one_object(out, "warn", "request");
    ck_assert_int_eq(cJSON_GetObjectItemCaseSensitive(j, "status")->valueint, 404);
    ck_assert_str_eq(cJSON_GetObjectItemCaseSensitive(j, "error")->valuestring, f.error);
    ck_assert(cJSON_GetObjectItemCaseSensitive(j, "total_ms")->valuedouble == 3.5);
    ck_assert_ptr_null(cJSON_GetObjectItemCaseSensitive(j, "inputs"));
    ck_assert_str_eq(cJSON_GetObjectItemCaseSensitive(j, "trace_id")->valuestring, f.trace_id);
    ck_assert_str_eq(cJSON_GetObjectItemCaseSensitive(j, "span_id")->valuestring, f.span_id);
    cJSON_Delete(j);
    free(out);
}
END_TEST

static void mhd(const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    log_mhd(NULL, fmt, ap);
    va_end(ap);
}

START_TEST(libmicrohttpd_messages_are_warn_lines)
{
    log_set_level(LOG_INFO);
    log_set_format(LOG_JSON);
    capture();
    mhd("Error: received handshake message out of context.\n");
    mhd("Failed to send data in request for `%s'.\n", "/v1/embeddings");
    mhd("\n"); /* nothing to say: no line */
    char *out = captured();
    const char *nl = strchr(out, '\n');
    ck_assert_msg(nl && strchr(nl + 1, '\n') && !strchr(nl + 1, '\n')[1], "two lines: %s", out);
    char first[512];
    snprintf(first, sizeof first, "%.*s", (int)(nl - out + 1), out);
    const char *want[] = {"Error: received handshake message out of context.",
                          "Failed to send data in request for `/v1/embeddings'."};
    const char *lines[] = {first, nl + 1};
    for (int i = 0; i < 2; i++) {
        cJSON *j = one_object(lines[i], "warn", want[i]);
        ck_assert_str_eq(cJSON_GetObjectItemCaseSensitive(j, "source")->valuestring,
                         "libmicrohttpd");
        cJSON_Delete(j);
    }
    free(out);
    log_set_format(LOG_TEXT);
    capture();
    mhd("Error: received handshake message out of context.\n");
    out = captured();
    ck_assert_str_eq(out, "mantissa: libmicrohttpd: Error: received handshake message out of "
                          "context.\n");
    free(out);
    log_set_level(LOG_ERROR);
    capture();
    mhd("filtered\n");
    out = captured();
    ck_assert_str_eq(out, "");
    free(out);
}
END_TEST

START_TEST(format_names)
{
    ck_assert_int_eq(log_format_parse("json"), LOG_JSON);
    ck_assert_int_eq(log_format_parse("text"), LOG_TEXT);
    ck_assert_int_eq(log_format_parse("JSON"), -1);
    ck_assert_int_eq(log_format_parse(NULL), -1);
    log_set_format(LOG_JSON);
    ck_assert_int_eq(log_get_format(), LOG_JSON);
    log_set_format(7); /* anything else: text */
    ck_assert_int_eq(log_get_format(), LOG_TEXT);
}
END_TEST

static Suite *test_suite(void)
{
    Suite *s = suite_create("log");
    TCase *tc = tcase_create("formats");
    tcase_add_test(tc, json_line_has_ts_level_msg_and_fields);
    tcase_add_test(tc, text_line_is_the_words_alone);
    tcase_add_test(tc, the_level_filters_and_always_passes_it);
    tcase_add_test(tc, request_line_in_both_formats);
    tcase_add_test(tc, libmicrohttpd_messages_are_warn_lines);
    tcase_add_test(tc, format_names);
    suite_add_tcase(s, tc);
    return s;
}

#include "tests/unit/check_main.h"
