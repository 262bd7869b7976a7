/* tessera run MODEL -p TEXT [sampling and session flags] [--chat]
 * Streams the continuation of a prompt (or, with --chat, the reply to it as one user message
 * through the model's chat template) to stdout as it is produced, then prints the prompt and
 * generation speed to stderr. */
#include <stdio.h>
#include <string.h>

#include "cli.h"
#include "deploy/deployment.h"
#include "runtime/session.h"

static const char *k_usage = "tessera run MODEL_DIR|DEPLOY_DIR -p TEXT [-n N] [--temp T] [--top-k K] [--top-p P]\n"
                             "       [--min-p P] [--repeat-penalty R] [--seed S] [--stop STR]... [--threads N]\n"
                             "       [--tokenizer PATH] [--ctx N] [--weights mmap|copy] [--quant q8_0|q4_0] [--kv-cache f32|f16] [--chat [--system TEXT] [--think|--no-think]\n"
                             "       [--chat-template FILE] [--date YYYY-MM-DD]] [--show-ids]\n"
                             "       [--lookup N [--lookup-ngram N] [--lookup-min N]]";

static void print_piece(void *user, const char *text, size_t len) {
    (void)user;
    fwrite(text, 1, len, stdout);
    fflush(stdout); /* streaming: the reader sees each piece as soon as it exists */
}

ts_status cli_resolve_deployment(const char *cmd, ts_session_opts *o, ts_deployment *d, ts_error *err) {
    if (!ts_deployment_is(o->model_dir)) return TS_OK;
    ts_status s = ts_deployment_load(o->model_dir, d, err);
    if (s) return s;
    if (d->gates_failed || (!d->all_gates_passed && !d->oracle_not_compared))
        fprintf(stderr, "tessera %s: warning: %s is a deployment whose gates did not all pass\n", cmd, o->model_dir);
    if (d->oracle_not_compared)
        fprintf(stderr, "tessera %s: note: %s: phase 0 not compared with Hugging Face (its oracle was never checked "
                        "against transformers; deploy --hf-python does)\n", cmd, o->model_dir);
    o->model_dir = d->model_dir;
    if (o->n_threads <= 0) o->n_threads = d->threads;
    o->tiles = d->tiles;
    o->n_tiles = d->n_tiles;
    if (o->copy_weights < 0) o->copy_weights = d->copy_weights; /* --weights overrides */
    if (o->kv_cache < 0 && d->kv_cache == TS_DTYPE_F16) { /* as deployed; --kv-cache overrides */
        o->kv_cache = d->kv_cache;
        fprintf(stderr, "tessera %s: note: %s was deployed with --kv-cache f16\n", cmd, d->model_dir);
    }
    if (o->quant < 0 && d->quant >= 0) { /* as deployed; --quant overrides */
        o->quant = d->quant;
        fprintf(stderr, "tessera %s: note: %s was deployed with --quant %s: the weight matrices are quantized at "
                        "load\n", cmd, d->model_dir, d->quant == TS_DTYPE_Q8_0 ? "q8_0" : "q4_0");
    }
    return TS_OK;
}

/* Said once at load when weights were copied (the placement costs memory and load time). */
void cli_print_copied(const ts_session *s) {
    size_t b = ts_session_copied_bytes(s);
    if (b) fprintf(stderr, "weights: %.0f MB copied at load\n", (double)b / 1e6);
}

/* The session's notices (a reply capped by the context), on stderr for run and chat. */
void cli_print_notice(void *user, const char *msg) {
    fprintf(stderr, "tessera %s: note: %s\n", (const char *)user, msg);
}

/* The summary line both run and chat print to stderr. */
void cli_print_speed(const ts_gen_result *r) {
    fprintf(stderr, "prompt: %d tokens, %.1f tok/s; generation: %d tokens, %.1f tok/s (stop: %s)\n",
            r->n_prompt, r->prompt_s > 0 ? r->n_prompt / r->prompt_s : 0.0, r->n_gen,
            r->gen_s > 0 ? r->n_gen / r->gen_s : 0.0, ts_gen_stop_name(r->stop));
    if (r->n_drafted)
        fprintf(stderr, "lookup: %d decode steps, %d tokens drafted, %d accepted (%.0f%%)\n", r->n_steps, r->n_drafted,
                r->n_accepted, 100.0 * r->n_accepted / r->n_drafted);
}

int cmd_run(int argc, char **argv) {
    ts_session_opts o;
    ts_session_opts_default(&o);
    const char *prompt = NULL;
    int chat = 0, show_ids = 0;
    ts_error err;
    if (cli_date_from_env(&o.now, &err)) return cli_usage("run", k_usage, err.msg);
    for (int i = 1; i < argc; i++) {
        int r = cli_session_parse_flag(&o, argc, argv, &i, &err);
        if (r < 0) return cli_usage("run", k_usage, err.msg);
        if (r) continue;
        if ((!strcmp(argv[i], "-p") || !strcmp(argv[i], "--prompt")) && i + 1 < argc) prompt = argv[++i];
        else if (!strcmp(argv[i], "--chat")) chat = 1;
        else if (!strcmp(argv[i], "--show-ids")) show_ids = 1;
        else if (!strcmp(argv[i], "--help") || !strcmp(argv[i], "-h")) {
            printf("usage: %s\n\n%s  --chat               wrap the prompt as one user turn of the chat template\n"
                   "  --show-ids           print the generated token ids to stderr at the end\n",
                   k_usage, cli_session_flags_help());
            return 0;
        } else if (argv[i][0] == '-' || o.model_dir) {
            fprintf(stderr, "tessera run: unexpected argument \"%s\"\n", argv[i]);
            return cli_usage("run", k_usage, NULL);
        } else o.model_dir = argv[i];
    }
    if (!o.model_dir || !prompt) return cli_usage("run", k_usage, "expects MODEL_DIR (or DEPLOY_DIR) and -p TEXT");
    o.on_notice = cli_print_notice;
    o.notice_user = "run";
    ts_session *s = NULL;
    ts_deployment dep;
    ts_status st = cli_resolve_deployment("run", &o, &dep, &err);
    if (!st) st = ts_session_open(&o, chat, print_piece, NULL, &s, &err);
    if (!st) cli_print_copied(s);
    ts_gen_result res;
    if (!st) st = chat ? ts_session_chat(s, prompt, &res, &err) : ts_session_complete(s, prompt, &res, &err);
    if (st) {
        ts_session_close(s);
        return cli_fail("run", st, &err);
    }
    putchar('\n');
    fflush(stdout);
    if (show_ids) {
        int n;
        const int32_t *ids = ts_session_tokens(s, &n);
        fputs("ids:", stderr);
        for (int i = 0; i < n; i++) fprintf(stderr, "%s%d", i ? "," : " ", ids[i]);
        fputc('\n', stderr);
    }
    ts_session_close(s);
    cli_print_speed(&res);
    return 0;
}
