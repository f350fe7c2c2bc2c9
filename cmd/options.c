/* options.c: `mantissa options [--markdown]` and the options part of
 * `mantissa serve --help`: the runtime options table (engine/options.h) as
 * text or as the README's Markdown table (tests/integration/test_options.py
 * checks that the README holds exactly this output). */
#include <stdio.h>
#include <string.h>

#include "cmd/cmd.h"
#include "engine/options.h"

/* s with every '|' as "\|" (a Markdown table cell). */
static const char *md_cell(const char *s, char *buf, size_t cap)
{
    size_t n = 0;
    for (; *s && n + 3 < cap; s++) {
        if (*s == '|')
            buf[n++] = '\\';
        buf[n++] = *s;
    }
    buf[n] = 0;
    return buf;
}

static void print_md(FILE *f)
{
    char v[512], d[128];
    fprintf(f, "| variable | values | default | what |\n| --- | --- | --- | --- |\n");
    for (int i = 0; i < MT_OPT_COUNT; i++) {
        const mt_opt_def *o = mt_opt_def_of((mt_opt)i);
        if (o->type == MT_OPT_OUTSIDE)
            continue;
        fprintf(f, "| `%s`", o->name);
        if (o->old)
            fprintf(f, " (was `%s`)", o->old);
        fprintf(f, " | %s | %s | %s |\n", md_cell(o->values, v, sizeof v),
                md_cell(o->dflt, d, sizeof d), o->help);
    }
    fprintf(f, "\nHonoured from elsewhere (not checked by Mantissa):\n\n"
               "| variable | default | what |\n| --- | --- | --- |\n");
    for (int i = 0; i < MT_OPT_COUNT; i++) {
        const mt_opt_def *o = mt_opt_def_of((mt_opt)i);
        if (o->type == MT_OPT_OUTSIDE)
            fprintf(f, "| `%s` | %s | %s |\n", o->name, o->dflt, o->help);
    }
}

static void print_text(FILE *f)
{
    fprintf(f, "environment (read once at start; a bad value stops the start; the old\n"
               "MT_* names still work, with a warning):\n");
    for (int i = 0; i < MT_OPT_COUNT; i++) {
        const mt_opt_def *o = mt_opt_def_of((mt_opt)i);
        if (o->type == MT_OPT_OUTSIDE)
            continue;
        fprintf(f, "  %s=%s  (default %s%s%s)\n      %s\n", o->name, o->values, o->dflt,
                o->old ? "; was " : "", o->old ? o->old : "", o->help);
    }
    fprintf(f, "honoured from elsewhere (not checked here):\n");
    for (int i = 0; i < MT_OPT_COUNT; i++) {
        const mt_opt_def *o = mt_opt_def_of((mt_opt)i);
        if (o->type == MT_OPT_OUTSIDE)
            fprintf(f, "  %s  (default %s)\n      %s\n", o->name, o->dflt, o->help);
    }
}

void cmd_options_print(FILE *f, int markdown)
{
    if (markdown)
        print_md(f);
    else
        print_text(f);
}

int cmd_options(int argc, char **argv)
{
    static const char usage[] = "usage: mantissa options [--markdown]\n"
                                "Lists the environment variables Mantissa reads (the README's "
                                "table is --markdown).\n";
    int markdown = 0;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--markdown")) {
            markdown = 1;
        } else if (!strcmp(argv[i], "--help") || !strcmp(argv[i], "-h")) {
            printf("%s", usage);
            return 0;
        } else {
            fprintf(stderr, "mantissa options: unexpected argument '%s'\n%s", argv[i], usage);
            return 2;
        }
    }
    cmd_options_print(stdout, markdown);
    return 0;
}
