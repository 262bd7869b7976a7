/* The test prompts of phases 3-5 and the evaluator (prompts.h): a fixed table of texts, each
 * encoded by the model's tokenizer, or seeded random ids when the model has none. A random-id
 * prompt makes a trained model's oracle nearly flat or oddly peaked; real text puts its
 * decisive and competitive positions where ordinary input puts them. */
#include "deploy/prompts.h"

#include <stdlib.h>
#include <string.h>

#include "core/error.h"
#include "core/metrics.h"
#include "deploy/gates.h"
#include "deploy/phases.h"

/* A prompt is what `tessera run` would feed the model for the text: BOS first when the
 * tokenizer says to add one (ts_tok_add_bos: a tokenizer.json that names a BOS, a GGUF's
 * add_bos_token). Each text gives at least TS_PHASE_PROMPT_MAX (64) tokens with the Llama-3 and Qwen
 * tokenizers (tests/test_prompts.c), so a prompt is one text's first tokens. Phase 3's position
 * prompts take texts 0-5, its lockstep prompts 6-13 and phase 5's lockstep prompts 14-21, so
 * each test starts from text of its own; the order mixes kinds within each group. */
static const struct {
    const char *name, *text;
} k_texts[TS_PROMPT_TEXTS] = {
    /* plain narrative English: the most common input, many decisive function words */
    {"english_prose",
     "The lighthouse keeper had not spoken to another person in eleven days when the supply boat finally "
     "rounded the northern point. He watched it from the gallery, one hand on the cold iron rail, counting "
     "the waves that broke over its bow. The fog had lifted in the night, and for the first time that week "
     "he could see the mainland: a thin grey line of cliffs, a church spire, the smoke of chimneys rising "
     "straight up into the still morning air."},
    /* code: indentation, punctuation and identifiers, where the next token is often forced */
    {"python_code",
     "import json\n"
     "from pathlib import Path\n\n\n"
     "def load_scores(path: Path) -> dict[str, float]:\n"
     "    \"\"\"Read a JSON file of per-user scores and return the mean score of each user.\"\"\"\n"
     "    with path.open(encoding=\"utf-8\") as f:\n"
     "        data = json.load(f)\n"
     "    result = {}\n"
     "    for user, scores in data.items():\n"
     "        if not scores:\n"
     "            continue\n"
     "        result[user] = sum(scores) / len(scores)\n"
     "    return result\n"},
    /* dialogue: turn-taking and short replies, the shape of chat traffic */
    {"dialogue",
     "\"Are you coming to the market tomorrow?\" asked Maria.\n"
     "\"I can't,\" said Tom. \"My sister is visiting, and I promised to fix her bicycle.\"\n"
     "\"Again? What happened this time?\"\n"
     "\"The chain broke on the hill by the school. She walked it home in the rain.\"\n"
     "\"Poor thing. Bring her along on Saturday, then. We could all have lunch at the cafe by the river.\"\n"
     "\"That sounds good. I'll ask her tonight.\""},
    /* numbers, dates and prices: digit tokenization and arithmetic-looking continuations */
    {"numbers_dates_prices",
     "Invoice 2024-0387, issued 14 March 2024, due 13 April 2024.\n"
     "1. Oak desk, 160 x 80 cm: 2 x 349.00 EUR = 698.00 EUR\n"
     "2. Office chair, model C-12: 4 x 129.50 EUR = 518.00 EUR\n"
     "3. Delivery on 2024-03-21 between 08:00 and 12:00: 45.00 EUR\n"
     "Subtotal: 1,261.00 EUR; VAT 19%: 239.59 EUR; total: 1,500.59 EUR.\n"
     "Phone +49 30 1234 5678, account DE89 3704 0044 0532 0130 00."},
    /* French: a Latin-script language with accents and elisions */
    {"french",
     "Le matin, la petite ville s'éveille lentement. Les boulangers ouvrent leurs portes avant l'aube, et "
     "l'odeur du pain chaud se répand dans les rues étroites. Sur la place du marché, les marchands "
     "installent leurs étals de fruits, de fromages et de fleurs. Les enfants traversent la place en "
     "courant pour ne pas être en retard à l'école, tandis que les anciens s'assoient déjà à la terrasse "
     "du café pour lire le journal."},
    /* Chinese: no spaces, one or more tokens per character */
    {"chinese",
     "春天来了，山上的雪慢慢融化，小河里的水也变得清澈起来。村子里的人们开始在田里播种，孩子们在草地上放风筝。"
     "老人们坐在门前晒太阳，聊着去年的收成和今年的天气。傍晚的时候，炊烟从一家家的屋顶升起，空气中飘着饭菜的香味。"
     "这是一年中最让人感到希望的季节。"},
    /* German: long compounds split into several tokens */
    {"german",
     "Die Bundesregierung hat am Mittwoch einen Gesetzentwurf zur Förderung erneuerbarer Energien "
     "beschlossen. Hausbesitzer sollen künftig Zuschüsse für Wärmepumpen und Solaranlagen erhalten, wenn "
     "sie ihre alten Ölheizungen austauschen. Kritiker bemängeln, dass die Antragsverfahren zu kompliziert "
     "seien und die Handwerksbetriebe schon jetzt keine freien Termine mehr hätten."},
    /* C: braces, pointers and types, as in this repository */
    {"c_code",
     "#include <stdio.h>\n#include <stdlib.h>\n\n"
     "/* Returns the number of lines in a file, or -1 if it cannot be read. */\n"
     "static long count_lines(const char *path) {\n"
     "    FILE *f = fopen(path, \"r\");\n"
     "    if (!f) return -1;\n"
     "    long n = 0;\n"
     "    int c;\n"
     "    while ((c = fgetc(f)) != EOF)\n"
     "        if (c == '\\n') n++;\n"
     "    fclose(f);\n"
     "    return n;\n"
     "}\n"},
    /* Spanish */
    {"spanish",
     "Cuando llegamos al pueblo ya era de noche y todas las tiendas estaban cerradas. Un hombre mayor que "
     "paseaba a su perro nos indicó el camino hacia la única pensión que quedaba abierta. La dueña nos "
     "recibió con una sonrisa cansada, nos ofreció un plato de sopa caliente y nos explicó que el autobús "
     "hacia la costa solo pasaba dos veces por semana, los martes y los viernes por la mañana."},
    /* Russian: Cyrillic, several bytes per character */
    {"russian",
     "Осенью в нашем саду всегда много работы. Нужно собрать последние яблоки, убрать опавшие листья и "
     "укрыть розы перед первыми морозами. Дедушка каждый год говорит, что зима будет холодной, и каждый "
     "год заготавливает дрова на два месяца больше, чем нужно. По вечерам мы пьём чай с вареньем и "
     "слушаем, как ветер стучит в окна старого дома."},
    /* Japanese: three scripts mixed */
    {"japanese",
     "駅前の小さな本屋は、毎朝九時に店を開けます。店主の田中さんは、もう四十年もこの店を続けています。"
     "最近はインターネットで本を買う人が増えましたが、近所の子どもたちは今でも放課後に漫画を読みに来ます。"
     "田中さんは「本屋は町の図書室のようなものだ」と笑いながら話してくれました。"},
    /* technical English: instructions with units and jargon */
    {"english_technical",
     "To replace the cartridge, first switch off the water supply at the main valve and open the tap to "
     "release the pressure. Remove the decorative cap with a flat screwdriver, then unscrew the retaining "
     "nut counterclockwise using a 17 mm spanner. Pull the old cartridge straight out, clean the valve "
     "seat, and insert the new cartridge so that the lugs line up with the notches in the body. Tighten "
     "the nut to 8 N m; overtightening will crack the ceramic discs."},
    /* Arabic: right-to-left script */
    {"arabic",
     "في صباح كل يوم جمعة، يذهب أحمد مع والده إلى السوق القديم في وسط المدينة. يشتريان الخبز الطازج "
     "والخضروات والفواكه من الباعة الذين يعرفونهم منذ سنوات طويلة. بعد ذلك يجلسان في مقهى صغير قرب "
     "النافورة، ويشربان الشاي بالنعناع، ويتحدثان عن أخبار الأسبوع وعن خطط العائلة للعطلة الصيفية."},
    /* Hindi: Devanagari, many tokens per word in most vocabularies */
    {"hindi",
     "हमारे गाँव में हर साल दिवाली के समय एक बड़ा मेला लगता है। लोग दूर-दूर से अपने परिवारों के साथ आते हैं। "
     "बच्चे झूलों पर बैठते हैं और मिठाइयाँ खाते हैं, जबकि बड़े लोग पुराने दोस्तों से मिलकर बातें करते हैं। "
     "रात को पूरा गाँव दीयों की रोशनी से जगमगा उठता है।"},
    /* structured data: keys, quotes and brackets */
    {"json_data",
     "{\n  \"id\": 48213,\n  \"name\": \"Harbour View Apartments\",\n  \"address\": {\"street\": \"12 Quay Road\", "
     "\"city\": \"Cork\", \"postcode\": \"T12 X70A\"},\n  \"units\": [\n    {\"number\": \"1A\", \"bedrooms\": 2, "
     "\"rent\": 1450, \"available\": true},\n    {\"number\": \"2C\", \"bedrooms\": 1, \"rent\": 1120, "
     "\"available\": false}\n  ],\n  \"updated\": \"2024-05-02T09:30:00Z\"\n}\n"},
    /* Italian */
    {"italian",
     "La nonna preparava il sugo ogni domenica mattina, e il profumo di pomodoro e basilico riempiva tutta "
     "la casa. Noi bambini aspettavamo impazienti il momento di sederci a tavola, mentre il nonno "
     "raccontava per l'ennesima volta la storia del suo viaggio in bicicletta da Napoli a Roma, quando "
     "aveva appena diciotto anni e nessuna idea di quanto fosse lunga la strada."},
    /* Korean: Hangul syllables */
    {"korean",
     "우리 동네에는 오래된 빵집이 하나 있습니다. 아침 일곱 시가 되면 갓 구운 빵 냄새가 골목 전체에 퍼집니다. "
     "주인 할머니는 삼십 년 동안 같은 자리에서 가게를 운영해 오셨습니다. 학생들은 학교에 가기 전에 들러서 "
     "단팥빵이나 크림빵을 사 가고, 할머니는 언제나 웃으며 인사를 건네십니다."},
    /* Vietnamese: Latin script stacked with diacritics, one syllable per word */
    {"vietnamese",
     "Mỗi sáng, bà tôi dậy từ lúc trời còn tối để nấu một nồi phở lớn. Khách quen trong xóm thường ghé qua "
     "trước khi đi làm, ngồi trên những chiếc ghế nhựa thấp bên lề đường. Bà nhớ từng người thích ăn gì: "
     "ông Ba thích nhiều hành, cô Lan không ăn rau thơm, còn mấy cậu sinh viên lúc nào cũng xin thêm nước dùng."},
    /* mathematics: symbols and formulas, where the next token is often forced */
    {"math",
     "Let f(x) = 3x^2 - 2x + 5. Then f'(x) = 6x - 2, so the minimum is at x = 1/3, where "
     "f(1/3) = 3(1/9) - 2/3 + 5 = 14/3. The integral of f from 0 to 2 is [x^3 - x^2 + 5x] from 0 to 2 "
     "= 8 - 4 + 10 = 14. For the sum of the first n odd numbers, 1 + 3 + 5 + ... + (2n - 1) = n^2, "
     "which follows by induction: n^2 + (2n + 1) = (n + 1)^2."},
    /* a shell session: commands, paths and program output */
    {"shell_session",
     "$ ls -l /var/log/nginx\n"
     "total 2048\n"
     "-rw-r----- 1 www-data adm  834512 Jun  3 14:02 access.log\n"
     "-rw-r----- 1 www-data adm   12044 Jun  3 13:58 error.log\n"
     "$ grep -c \" 404 \" /var/log/nginx/access.log\n"
     "117\n"
     "$ sudo systemctl reload nginx && echo reloaded\n"
     "reloaded\n"
     "$ df -h /\n"
     "Filesystem      Size  Used Avail Use% Mounted on\n"
     "/dev/sda1        40G   23G   15G  61% /\n"},
    /* verse: line breaks and rhyme */
    {"poetry",
     "The river keeps its counsel in the dark,\n"
     "and carries down the hill the summer's rain;\n"
     "it does not know the name of any lark,\n"
     "nor count the fields of barley and of grain.\n"
     "But in the morning, when the mist is thin,\n"
     "the herons stand like statues at its side,\n"
     "and every stone it ever wandered in\n"
     "remembers it, long after it has dried.\n"},
    /* markup: tags and attributes */
    {"html",
     "<!DOCTYPE html>\n<html lang=\"en\">\n<head>\n  <meta charset=\"utf-8\">\n  <title>Opening hours</title>\n"
     "</head>\n<body>\n  <h1>Opening hours</h1>\n  <table class=\"hours\">\n"
     "    <tr><th>Monday to Friday</th><td>09:00 to 18:00</td></tr>\n"
     "    <tr><th>Saturday</th><td>10:00 to 14:00</td></tr>\n"
     "  </table>\n  <p>Closed on public holidays.</p>\n</body>\n</html>\n"},
};

/* Which text prompt k starts from: phase 3's prompts (k 0-5), its lockstep prompts (100-107)
 * and phase 5's (300-307) each their own group; any other k wraps around the table. A seed
 * other than 0 rotates the table by 1 to N-1 places, so it never gives deploy's own set. */
static int first_text(uint64_t seed, int k) {
    int base = k < 100 ? k : k < 300 ? 6 + (k - 100) : 14 + (k - 300);
    int rot = seed ? 1 + (int)((seed - 1) % (TS_PROMPT_TEXTS - 1)) : 0;
    return (int)(((unsigned)base + (unsigned)rot) % TS_PROMPT_TEXTS);
}

static int random_ids(ts_prompt_set *p, const char *why) {
    p->text = 0;
    snprintf(p->why, sizeof p->why, "%s", why);
    ts_tok_free(p->tok);
    p->tok = NULL;
    return 0;
}

/* Every id inside the model's vocabulary; else the first one outside. */
static int first_bad_id(const int32_t *ids, int n, int V) {
    for (int i = 0; i < n; i++)
        if (ids[i] < 0 || ids[i] >= V) return i;
    return -1;
}

ts_status ts_prompts_open(const ts_model *m, const char *force_random, ts_prompt_set *p, ts_error *err) {
    memset(p, 0, sizeof *p);
    p->c = ts_model_config(m);
    if (force_random) return random_ids(p, force_random), TS_OK;
    ts_error e;
    ts_tok *tok = NULL;
    char why[sizeof p->why];
    if (ts_phase_model_tokenizer(m, &tok, &e)) {
        snprintf(why, sizeof why, "the tokenizer could not be loaded: %.400s", e.msg);
        return random_ids(p, why), TS_OK;
    }
    if (!tok) return random_ids(p, "the model has no tokenizer"), TS_OK;
    p->tok = tok;
    int V = p->c->n_vocab;
    if (ts_tok_n_vocab(tok) > V) {
        snprintf(why, sizeof why, "the tokenizer's %d tokens exceed the model's vocabulary of %d", ts_tok_n_vocab(tok), V);
        return random_ids(p, why), TS_OK;
    }
    uint64_t h = 0xcbf29ce484222325ull; /* FNV-1a over (count, ids) of every text */
    for (int i = 0; i < TS_PROMPT_TEXTS; i++) {
        const char *txt = k_texts[i].text;
        ts_status s = ts_tok_encode(tok, txt, strlen(txt), ts_tok_add_bos(tok), &p->ids[i], &p->n_ids[i], &e);
        if (s == TS_ERR_NOMEM) {
            ts_prompts_close(p);
            return ts_fail(err, s, "%s", e.msg);
        }
        int bad = s ? -1 : first_bad_id(p->ids[i], p->n_ids[i], V);
        if (s || bad >= 0) {
            if (s) snprintf(why, sizeof why, "the tokenizer cannot encode text \"%s\": %.380s", k_texts[i].name, e.msg);
            else snprintf(why, sizeof why, "the tokenizer encodes text \"%s\" with id %d, outside the model's vocabulary of %d",
                          k_texts[i].name, p->ids[i][bad], V);
            for (int j = 0; j <= i; j++) free(p->ids[j]), p->ids[j] = NULL, p->n_ids[j] = 0;
            return random_ids(p, why), TS_OK;
        }
        for (int j = -1; j < p->n_ids[i]; j++) {
            uint32_t v = j < 0 ? (uint32_t)p->n_ids[i] : (uint32_t)p->ids[i][j];
            for (int b = 0; b < 4; b++) h = (h ^ ((v >> (8 * b)) & 0xff)) * 0x100000001b3ull;
        }
    }
    snprintf(p->fingerprint, sizeof p->fingerprint, "%016llx", (unsigned long long)h);
    p->text = 1;
    return TS_OK;
}

const char *ts_prompt_text(int i, const char **name) {
    if (i < 0 || i >= TS_PROMPT_TEXTS) return NULL;
    if (name) *name = k_texts[i].name;
    return k_texts[i].text;
}

void ts_prompts_close(ts_prompt_set *p) {
    for (int i = 0; i < TS_PROMPT_TEXTS; i++) free(p->ids[i]), p->ids[i] = NULL;
    ts_tok_free(p->tok);
    p->tok = NULL;
}

/* Texts i, i+1, ... joined by blank lines until they encode to at least n tokens; NULL when
 * the whole table is shorter, or on an error (*why says which). *used: the texts joined. */
static int32_t *joined(const ts_prompt_set *p, int i, int n, int *got, int *used, char *why, size_t len) {
    size_t cap = 0, sz = 0;
    for (int j = 0; j < TS_PROMPT_TEXTS; j++) cap += strlen(k_texts[j].text) + 2;
    char *buf = malloc(cap + 1);
    int32_t *ids = NULL;
    *got = 0;
    if (!buf) return snprintf(why, len, "out of memory"), NULL;
    for (*used = 1; *used <= TS_PROMPT_TEXTS; ++*used) {
        const char *t = k_texts[(i + *used - 1) % TS_PROMPT_TEXTS].text;
        if (*used > 1) memcpy(buf + sz, "\n\n", 2), sz += 2;
        memcpy(buf + sz, t, strlen(t)), sz += strlen(t);
        ts_error e;
        free(ids);
        ids = NULL;
        if (ts_tok_encode(p->tok, buf, sz, ts_tok_add_bos(p->tok), &ids, got, &e)) {
            snprintf(why, len, "%.150s", e.msg);
            break;
        }
        if (*got >= n) break;
    }
    free(buf);
    if (ids && *got < n) {
        snprintf(why, len, "the whole table encodes to %d tokens, fewer than %d", *got, n);
        free(ids), ids = NULL;
    }
    return ids;
}

void ts_prompts_get(const ts_prompt_set *p, uint64_t seed, int k, int32_t *t, int n, char *name, size_t len) {
    if (!p->text) {
        ts_phase_prompt_tokens(p->c, seed, k, t, n);
        snprintf(name, len, "random ids");
        return;
    }
    int i = first_text(seed, k);
    if (p->n_ids[i] >= n) {
        memcpy(t, p->ids[i], sizeof(int32_t) * (size_t)n);
        snprintf(name, len, "%s", k_texts[i].name);
        return;
    }
    /* A tokenizer that packs a text into fewer tokens than this prompt needs: the next texts
     * follow it, encoded together as one text would be. */
    char why[200];
    int got, used;
    int32_t *ids = joined(p, i, n, &got, &used, why, sizeof why);
    int bad = ids ? first_bad_id(ids, n, p->c->n_vocab) : -1;
    if (ids && bad < 0) {
        memcpy(t, ids, sizeof(int32_t) * (size_t)n);
        size_t w = (size_t)snprintf(name, len, "%s", k_texts[i].name);
        for (int j = 1; j < used && w < len; j++)
            w += (size_t)snprintf(name + w, len - w, "+%s", k_texts[(i + j) % TS_PROMPT_TEXTS].name);
    } else {
        if (ids) snprintf(why, sizeof why, "id %d outside the model's vocabulary", ids[bad]);
        ts_phase_prompt_tokens(p->c, seed, k, t, n);
        snprintf(name, len, "random ids (text \"%s\" and those after it: %s)", k_texts[i].name, why);
    }
    free(ids);
}

json_t *ts_prompts_json(const ts_prompt_set *p) {
    if (!p->text) return json_pack("{s:s, s:s}", "kind", "random ids", "why", p->why);
    int32_t bos = ts_tok_add_bos(p->tok) ? ts_tok_bos(p->tok) : -1;
    return json_pack("{s:s, s:i, s:o, s:i, s:s}", "kind", "text", "vocab", ts_tok_n_vocab(p->tok), "bos",
                     bos >= 0 ? json_integer(bos) : json_null(), "texts", TS_PROMPT_TEXTS, "fingerprint",
                     p->fingerprint);
}

void ts_prompt_classes_prompt(ts_prompt_classes *c, int n, int decisive) {
    c->has_positions = 1;
    c->positions[1] += decisive, c->positions[0] += n - decisive;
    c->prompts[2 * decisive > n]++;
}

void ts_prompt_classes_run(ts_prompt_classes *c, int steps, int decisive, int diverged) {
    c->has_lockstep = 1;
    c->steps[1] += decisive, c->steps[0] += steps - decisive;
    c->runs[2 * decisive > steps]++;
    if (diverged >= 0) c->divergences[diverged != 0]++;
}

static json_t *pair(const int v[2]) { return json_pack("{s:i, s:i}", "decisive", v[1], "competitive", v[0]); }

json_t *ts_prompt_classes_json(const ts_prompt_classes *c) {
    json_t *o = json_pack("{s:f}", "decisive_prob", ts_threshold_find("phase3", "decisive_prob")->value);
    if (c->has_positions) {
        json_object_set_new(o, "positions", pair(c->positions));
        json_object_set_new(o, "prompts", pair(c->prompts));
    }
    if (c->has_lockstep) {
        json_object_set_new(o, "lockstep_steps", pair(c->steps));
        json_object_set_new(o, "lockstep_runs", pair(c->runs));
        json_object_set_new(o, "lockstep_divergences", pair(c->divergences));
    }
    return o;
}

void ts_prompt_classes_line(const ts_prompt_classes *c, char *buf, size_t len) {
    size_t w = (size_t)snprintf(buf, len, "decisive / competitive:");
    if (c->has_positions && w < len)
        w += (size_t)snprintf(buf + w, len - w, " positions %d / %d, prompts %d / %d%s", c->positions[1],
                              c->positions[0], c->prompts[1], c->prompts[0], c->has_lockstep ? ";" : "");
    if (c->has_lockstep && w < len)
        snprintf(buf + w, len - w, " lockstep steps %d / %d, runs %d / %d, divergences at %d / %d", c->steps[1],
                 c->steps[0], c->runs[1], c->runs[0], c->divergences[1], c->divergences[0]);
}
