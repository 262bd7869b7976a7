/* Opening single-file and sharded safetensors checkpoints. A sharded index is trusted for
 * nothing: every name it lists must be in the shard it names, every shard tensor must be
 * listed, and shard names may not leave the directory. */
#include "io/tensor_store.h"

#include <stdlib.h>
#include <string.h>

#include "core/error.h"
#include "io/json.h"

static int cmp_name(const void *a, const void *b) {
    return strcmp(((const ts_tensor *)a)->name, ((const ts_tensor *)b)->name);
}

const ts_tensor *ts_store_find(const ts_store *st, const char *name) {
    ts_tensor key;
    key.name = (char *)name;
    return bsearch(&key, st->tensors, (size_t)st->n_tensors, sizeof key, cmp_name);
}

uint64_t ts_store_file_bytes(const ts_store *st) {
    uint64_t n = 0;
    for (int i = 0; i < st->n_maps; i++) n += st->maps[i].size;
    return n;
}

void ts_store_close(ts_store *st) {
    ts_tensors_free(st->tensors, st->n_tensors);
    for (int i = 0; i < st->n_maps; i++) ts_mmap_close(&st->maps[i]);
    free(st->maps);
    for (int i = 0; i < st->n_heap; i++) free(st->heap[i]);
    free(st->heap);
    memset(st, 0, sizeof *st);
}

/* Maps one file and appends its tensors to the store's table. */
static ts_status add_file(ts_store *st, const char *path, ts_error *err) {
    ts_mmap *m = &st->maps[st->n_maps];
    ts_status s = ts_mmap_open(m, path, err);
    if (s) return s;
    st->n_maps++;
    ts_tensor *t;
    int n;
    s = ts_st_parse(m->data, m->size, m->path, &t, &n, err);
    if (s) return s;
    ts_tensor *grown = realloc(st->tensors, (size_t)(st->n_tensors + n + 1) * sizeof *grown);
    if (!grown) {
        ts_tensors_free(t, n);
        return ts_fail(err, TS_ERR_NOMEM, "%s: out of memory", path);
    }
    st->tensors = grown;
    memcpy(st->tensors + st->n_tensors, t, (size_t)n * sizeof *t);
    st->n_tensors += n;
    free(t); /* names moved into the table */
    return TS_OK;
}

static int bad_shard_name(const char *f) {
    return f[0] == 0 || strchr(f, '/') || strcmp(f, ".") == 0 || strcmp(f, "..") == 0;
}

static ts_status open_sharded(ts_store *st, const char *dir, const char *index_path,
                              ts_error *err) {
    json_t *root;
    ts_status s = ts_json_load_file(index_path, 64u << 20, &root, err);
    if (s) return s;
    json_t *wm = json_object_get(root, "weight_map");
    if (!json_is_object(wm)) {
        s = ts_fail(err, TS_ERR_FORMAT, "%s: \"weight_map\" is %s, expected an object", index_path,
                    ts_json_type_name(wm));
        goto done;
    }
    /* Collect the distinct shard file names, in first-seen order. */
    size_t n_entries = json_object_size(wm);
    const char **files = calloc(n_entries + 1, sizeof *files);
    st->maps = calloc(n_entries + 1, sizeof *st->maps);
    if (!files || !st->maps) {
        free(files);
        s = ts_fail(err, TS_ERR_NOMEM, "%s: out of memory", index_path);
        goto done;
    }
    int n_files = 0;
    const char *key;
    json_t *v;
    json_object_foreach(wm, key, v) {
        if (!json_is_string(v) || bad_shard_name(json_string_value(v))) {
            s = ts_fail(err, TS_ERR_FORMAT,
                        "%s: weight_map[\"%s\"] must be a file name inside the model directory",
                        index_path, key);
            break;
        }
        int seen = 0;
        for (int i = 0; i < n_files && !seen; i++) seen = strcmp(files[i], json_string_value(v)) == 0;
        if (!seen) files[n_files++] = json_string_value(v);
    }
    for (int i = 0; i < n_files && !s; i++) {
        char *path = ts_path_join(dir, files[i]);
        if (!path) {
            s = ts_fail(err, TS_ERR_NOMEM, "out of memory");
            break;
        }
        if (!ts_file_exists(path)) {
            const char *example = "?";
            json_object_foreach(wm, key, v) if (strcmp(json_string_value(v), files[i]) == 0) {
                example = key;
                break;
            }
            s = ts_fail(err, TS_ERR_IO,
                        "%s: shard \"%s\" listed in the index (for tensor \"%s\") is missing",
                        index_path, files[i], example);
        } else {
            s = add_file(st, path, err);
        }
        free(path);
    }
    free(files);
    if (s) goto done;
    /* Every tensor must sit in the shard the index names, and every listed tensor must exist. */
    for (int i = 0; i < st->n_tensors && !s; i++) {
        const ts_tensor *t = &st->tensors[i];
        const json_t *f = json_object_get(wm, t->name);
        const char *base = strrchr(t->file, '/');
        base = base ? base + 1 : t->file;
        if (!f)
            s = ts_fail(err, TS_ERR_SHAPE, "%s: tensor \"%s\" is not listed in %s", t->file,
                        t->name, index_path);
        else if (strcmp(json_string_value(f), base) != 0)
            s = ts_fail(err, TS_ERR_FORMAT, "%s: tensor \"%s\" is in %s, but the index says %s",
                        index_path, t->name, base, json_string_value(f));
    }
    if (!s && (size_t)st->n_tensors != n_entries) {
        json_object_foreach(wm, key, v) {
            int found = 0;
            for (int i = 0; i < st->n_tensors && !found; i++)
                found = strcmp(st->tensors[i].name, key) == 0;
            if (!found) {
                s = ts_fail(err, TS_ERR_SHAPE, "%s: tensor \"%s\" is listed but missing from %s",
                            index_path, key, json_string_value(v));
                break;
            }
        }
        /* Counts differ yet every listed name was found: a name appears in two shards, which
         * the duplicate check below reports. */
    }
done:
    json_decref(root);
    return s;
}

ts_status ts_store_open(ts_store *st, const char *dir, ts_error *err) {
    memset(st, 0, sizeof *st);
    char *single = ts_path_join(dir, "model.safetensors");
    char *index = ts_path_join(dir, "model.safetensors.index.json");
    ts_status s = TS_OK;
    if (!single || !index) s = ts_fail(err, TS_ERR_NOMEM, "out of memory");
    else if (ts_file_exists(index)) {
        st->sharded = 1;
        s = open_sharded(st, dir, index, err);
    } else if (ts_file_exists(single)) {
        st->maps = calloc(1, sizeof *st->maps);
        s = st->maps ? add_file(st, single, err) : ts_fail(err, TS_ERR_NOMEM, "out of memory");
    } else {
        s = ts_fail(err, TS_ERR_IO,
                    "%s: no model.safetensors or model.safetensors.index.json in this directory",
                    dir);
    }
    free(single);
    free(index);
    if (!s) s = ts_store_index(st, err);
    if (s) ts_store_close(st);
    return s;
}

ts_status ts_store_index(ts_store *st, ts_error *err) {
    if (st->n_tensors < 2) return TS_OK;
    qsort(st->tensors, (size_t)st->n_tensors, sizeof *st->tensors, cmp_name);
    for (int i = 1; i < st->n_tensors; i++)
        if (strcmp(st->tensors[i - 1].name, st->tensors[i].name) == 0)
            return ts_fail(err, TS_ERR_FORMAT, "tensor \"%s\" appears twice (in %s and %s)", st->tensors[i].name,
                           st->tensors[i - 1].file, st->tensors[i].file);
    return TS_OK;
}
