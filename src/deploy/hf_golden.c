/* Running tools/hf_golden.py for phase 0: the prompts go out as a JSON file, the goldens come
 * back as golden.json + binaries in the same folder (inside the deployment directory, never the
 * model's). The script runs in a child process under the interpreter the user names, so tessera
 * itself never depends on Python. */
#include "deploy/hf_golden.h"

#include <errno.h>
#include <fcntl.h>
#include <jansson.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "core/error.h"
#include "io/mmap.h"

#ifndef TS_SOURCE_DIR
#define TS_SOURCE_DIR ""
#endif

#define SCRIPT_REL "tools/hf_golden.py"

ts_status ts_hf_golden_script(const char *override, char *path, size_t len, ts_error *err) {
    if (override) {
        if (!ts_file_exists(override)) return ts_fail(err, TS_ERR_IO, "--hf-script %s: no such file", override);
        snprintf(path, len, "%s", override);
        return TS_OK;
    }
    const char *env = getenv("TESSERA_HF_SCRIPT");
    if (env && *env) {
        if (!ts_file_exists(env)) return ts_fail(err, TS_ERR_IO, "TESSERA_HF_SCRIPT=%s: no such file", env);
        snprintf(path, len, "%s", env);
        return TS_OK;
    }
    char src[4200] = "", exe_rel[4200] = "";
    if (TS_SOURCE_DIR[0]) {
        snprintf(src, sizeof src, "%s/%s", TS_SOURCE_DIR, SCRIPT_REL);
        if (ts_file_exists(src)) {
            snprintf(path, len, "%s", src);
            return TS_OK;
        }
    }
    /* A moved source tree with the binary still in its build folder: BUILD/tessera -> tools/. */
    char self[4096];
    ssize_t n = readlink("/proc/self/exe", self, sizeof self - 1);
    if (n > 0) {
        self[n] = 0;
        for (int up = 0; up < 2; up++) {
            char *slash = strrchr(self, '/');
            if (slash) *slash = 0;
        }
        snprintf(exe_rel, sizeof exe_rel, "%s/%s", self, SCRIPT_REL);
        if (ts_file_exists(exe_rel)) {
            snprintf(path, len, "%s", exe_rel);
            return TS_OK;
        }
    }
    return ts_fail(err, TS_ERR_IO,
                   "cannot find %s (tried %s%s%s); name it with --hf-script FILE or TESSERA_HF_SCRIPT", SCRIPT_REL,
                   src[0] ? src : "", src[0] && exe_rel[0] ? " and " : "", exe_rel);
}

static ts_status write_prompts(const char *path, const char *model_dir, const int32_t *const *prompts,
                               const int *lens, int n, ts_error *err) {
    json_t *root = json_object(), *seqs = json_array();
    json_object_set_new(root, "generator", json_string("tessera deploy, phase 0 (the token ids it compares)"));
    json_object_set_new(root, "model", json_string(model_dir));
    for (int k = 0; k < n; k++) {
        json_t *t = json_array();
        for (int i = 0; i < lens[k]; i++) json_array_append_new(t, json_integer(prompts[k][i]));
        json_array_append_new(seqs, json_pack("{s:o}", "tokens", t));
    }
    json_object_set_new(root, "sequences", seqs);
    int bad = json_dump_file(root, path, JSON_INDENT(2));
    json_decref(root);
    return bad ? ts_fail(err, TS_ERR_IO, "cannot write %s", path) : TS_OK;
}

ts_status ts_hf_golden_generate(const char *model_dir, const char *dir, const int32_t *const *prompts, const int *lens,
                                int n, const ts_hf_golden_opts *o, char **script_used, ts_error *err) {
    if (script_used) *script_used = NULL;
    char script[4096];
    ts_status s = ts_hf_golden_script(o->script, script, sizeof script, err);
    if (s) return s;
    if (ts_mkdir_p(dir) != 0) return ts_fail(err, TS_ERR_IO, "cannot create %s: %s", dir, strerror(errno));
    char *pp = ts_path_join(dir, "hf_prompts.json"), *gp = ts_path_join(dir, "golden.json");
    if (!pp || !gp) {
        free(pp), free(gp);
        return ts_fail(err, TS_ERR_NOMEM, "out of memory");
    }
    s = write_prompts(pp, model_dir, prompts, lens, n, err);
    if (!s && remove(gp) != 0 && errno != ENOENT) s = ts_fail(err, TS_ERR_IO, "cannot remove the stale %s", gp);
    char th[16];
    snprintf(th, sizeof th, "%d", o->threads);
    char *argv[] = {(char *)o->python, script, (char *)model_dir, (char *)dir, "--prompts", pp,
                    o->threads > 0 ? "--threads" : NULL, th, NULL};
    if (!s) {
        if (o->out) {
            fprintf(o->out, "  golden logits from transformers: %s %s %s %s --prompts %s%s%s\n", o->python, script,
                    model_dir, dir, pp, o->threads > 0 ? " --threads " : "", o->threads > 0 ? th : "");
        }
        fflush(NULL);
        pid_t pid = fork();
        if (pid < 0) s = ts_fail(err, TS_ERR_IO, "fork: %s", strerror(errno));
        else if (pid == 0) {
            if (o->out == stderr) dup2(2, 1); /* --json: stdout stays for the JSON reports */
            else if (!o->out) {
                int fd = open("/dev/null", O_WRONLY);
                if (fd >= 0) dup2(fd, 1);
            }
            execvp(argv[0], argv);
            fprintf(stderr, "tessera: cannot run the --hf-python interpreter %s: %s\n", argv[0], strerror(errno));
            _exit(127);
        } else {
            int st = 0, w;
            while ((w = waitpid(pid, &st, 0)) < 0 && errno == EINTR) {}
            int code = WIFEXITED(st) ? WEXITSTATUS(st) : -1;
            if (w < 0) s = ts_fail(err, TS_ERR_IO, "golden generation: waitpid: %s", strerror(errno));
            else if (WIFSIGNALED(st))
                s = ts_fail(err, TS_ERR_IO, "golden generation: `%s %s` was killed by signal %d", o->python, script,
                            WTERMSIG(st));
            else if (code == 127)
                s = ts_fail(err, TS_ERR_IO, "golden generation: cannot run the --hf-python interpreter %s (exit 127)",
                            o->python);
            else if (code == 3)
                s = ts_fail(err, TS_ERR_IO,
                            "golden generation: %s cannot import torch/transformers (exit 3). Make a venv outside the "
                            "repository: python3 -m venv /path/venv-hf && /path/venv-hf/bin/pip install torch "
                            "transformers safetensors numpy; then --hf-python /path/venv-hf/bin/python",
                            o->python);
            else if (code != 0)
                s = ts_fail(err, TS_ERR_IO, "golden generation: `%s %s %s %s --prompts %s` exited with %d (its message "
                            "is above)", o->python, script, model_dir, dir, pp, code);
            else if (!ts_file_exists(gp))
                s = ts_fail(err, TS_ERR_IO, "golden generation: `%s %s` exited 0 but wrote no %s", o->python, script,
                            gp);
        }
    }
    if (!s && script_used) *script_used = strdup(script);
    free(pp);
    free(gp);
    return s;
}
