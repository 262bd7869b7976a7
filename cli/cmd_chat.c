/* tessera chat MODEL [--system TEXT] [sampling and session flags]
 * A multi-turn conversation through the model's chat template, keeping the KV cache across
 * turns. Reads one user message per line from stdin (a terminal or a pipe); EOF ends it.
 * Replies stream to stdout; on a terminal a "> " prompt is shown and speeds go to stderr. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cli.h"
#include "deploy/deployment.h"
#include "runtime/session.h"

void cli_print_speed(const ts_gen_result *r);
void cli_print_copied(const ts_session *s);
void cli_print_notice(void *user, const char *msg);

static const char *k_usage = "tessera chat MODEL_DIR|DEPLOY_DIR [--system TEXT] [-n N] [--temp T] [--top-k K] [--top-p P]\n"
                             "       [--min-p P] [--repeat-penalty R] [--seed S] [--stop STR]... [--threads N]\n"
                             "       [--tokenizer PATH] [--ctx N] [--weights mmap|copy] [--quant q8_0|q4_0] [--kv-cache f32|f16] [--think|--no-think]\n"
                             "       [--chat-template FILE] [--date YYYY-MM-DD] [--verbose]";

static void print_piece(void *user, const char *text, size_t len) {
    (void)user;
    fwrite(text, 1, len, stdout);
    fflush(stdout);
}

int cmd_chat(int argc, char **argv) {
    ts_session_opts o;
    ts_session_opts_default(&o);
    int verbose = 0;
    ts_error err;
    if (cli_date_from_env(&o.now, &err)) return cli_usage("chat", k_usage, err.msg);
    for (int i = 1; i < argc; i++) {
        int r = cli_session_parse_flag(&o, argc, argv, &i, &err);
        if (r < 0) return cli_usage("chat", k_usage, err.msg);
        if (r) continue;
        if (!strcmp(argv[i], "--verbose") || !strcmp(argv[i], "-v")) verbose = 1;
        else if (!strcmp(argv[i], "--help") || !strcmp(argv[i], "-h")) {
            printf("usage: %s\n\nOne user message per line on stdin; EOF (Ctrl-D) ends the chat.\n%s"
                   "  --verbose            speed and cache reuse after each reply (always on a terminal)\n",
                   k_usage, cli_session_flags_help());
            return 0;
        } else if (argv[i][0] == '-' || o.model_dir) {
            fprintf(stderr, "tessera chat: unexpected argument \"%s\"\n", argv[i]);
            return cli_usage("chat", k_usage, NULL);
        } else o.model_dir = argv[i];
    }
    if (!o.model_dir) return cli_usage("chat", k_usage, "expects MODEL_DIR");
    o.on_notice = cli_print_notice;
    o.notice_user = "chat";
    int tty = isatty(0);
    if (tty) verbose = 1;
    ts_session *s = NULL;
    ts_deployment dep;
    ts_status st = cli_resolve_deployment("chat", &o, &dep, &err);
    if (!st) st = ts_session_open(&o, 1, print_piece, NULL, &s, &err);
    if (st) return cli_fail("chat", st, &err);
    cli_print_copied(s);
    if (tty)
        fprintf(stderr, "chat template: %s; one message per line, Ctrl-D to end\n",
                ts_chat_template_source(ts_session_template(s)));
    char *line = NULL;
    size_t cap = 0;
    int turns = 0;
    for (;;) {
        if (tty) {
            fputs("> ", stdout);
            fflush(stdout);
        }
        ssize_t n = getline(&line, &cap, stdin);
        if (n < 0) break;
        while (n > 0 && (line[n - 1] == '\n' || line[n - 1] == '\r')) line[--n] = 0;
        if (n == 0) continue; /* an empty line is not a message */
        ts_gen_result res;
        st = ts_session_chat(s, line, &res, &err);
        if (st) break;
        turns++;
        putchar('\n');
        fflush(stdout);
        if (verbose) {
            cli_print_speed(&res);
            fprintf(stderr, "turn %d: %s\n", turns, ts_session_reused(s) ? "cache reused" : "prefilled from scratch");
        }
    }
    free(line);
    ts_session_close(s);
    if (st) return cli_fail("chat", st, &err);
    return 0;
}
