/* Shared pieces of the tessera command line: the subcommand table, argument helpers, and the
 * mapping from ts_status to exit codes (documented in README.md). Only cli/ calls exit(). */
#ifndef TS_CLI_H
#define TS_CLI_H
#include <stdint.h>

#include "tessera.h"

#define TS_EXIT_USAGE 64

int cmd_synth(int argc, char **argv);
int cmd_logits(int argc, char **argv);
int cmd_inspect(int argc, char **argv);
int cmd_deploy(int argc, char **argv);
int cmd_tokenize(int argc, char **argv);
int cmd_bench(int argc, char **argv);
int cmd_eval(int argc, char **argv);
int cmd_run(int argc, char **argv);
int cmd_chat(int argc, char **argv);
int cmd_quantize(int argc, char **argv);
int cmd_template(int argc, char **argv);
int cmd_serve(int argc, char **argv);

/* Prints "tessera CMD: error: MSG" and returns the exit code for s. */
int cli_fail(const char *cmd, ts_status s, const ts_error *err);
int cli_usage(const char *cmd, const char *usage, const char *problem);
/* Parses a non-negative integer in [lo, hi]; returns 0 on success. */
int cli_parse_int(const char *s, long long lo, long long hi, long long *out);
/* When o->model_dir is a deployment directory (manifest.json), runs its model with its plan:
 * model_dir, threads (unless --threads was given) and tiles come from the manifest, kept in
 * *d. Prints a warning when the deployment's gates did not all pass. */
struct ts_session_opts;
struct ts_deployment;
ts_status cli_resolve_deployment(const char *cmd, struct ts_session_opts *o, struct ts_deployment *d, ts_error *err);
/* Parses the flag at argv[*i] if it is a session option (-n, --temp, --top-k, --top-p, --min-p,
 * --repeat-penalty, --seed, --stop, --threads, --tokenizer, --ctx, --system, --weights,
 * --quant, --kv-cache, --chat-template, --date, --no-think, --think), advancing *i past its value. Returns 1 when consumed, 0 when not a
 * session flag, -1 on a bad value (err says which flag and what was expected). */
struct ts_session_opts;
int cli_session_parse_flag(struct ts_session_opts *o, int argc, char **argv, int *i, ts_error *err);
/* TESSERA_DATE (YYYY-MM-DD[THH:MM:SS]) into *now when set, before --date is parsed (the flag
 * wins). 0 when unset or valid; -1 with err naming the variable when malformed. */
int cli_date_from_env(int64_t *now, ts_error *err);
/* One line per session flag, for --help. */
const char *cli_session_flags_help(void);
/* Exit code for a status: 0 for TS_OK, otherwise the status number (1..8). */
int cli_exit_code(ts_status s);

#endif
