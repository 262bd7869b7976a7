/* Chunked prefill's cuts (ts_sched_piece, src/serve/sched.c): for every prompt rest and step
 * budget in a range, the pieces a prompt is prefilled in never include one of a single row
 * (that would run the decode arithmetic, and the text would differ from the request alone)
 * unless the whole prompt is one token, never exceed the budget by more than one row, cover the
 * prompt exactly, and make progress at every step a slot has the whole budget (no livelock). A
 * budget left over by older slots (any size, 1 included) gives a piece or 0. The scheduler's
 * end-to-end exactness is tests/test_serve_chunk.sh. */
#include "serve/sched.h"
#include "tharness.h"

int main(void) {
    long pieces = 0;
    for (int P = 1; P <= 600; P++) {
        /* unlimited: the whole prompt at once */
        CHECK(ts_sched_piece(P, -1) == P, "no budget: %d tokens -> %d", P, ts_sched_piece(P, -1));
        for (int budget = 2; budget <= 80; budget++) {
            int rest = P, steps = 0;
            while (rest > 0) {
                int n = ts_sched_piece(rest, budget);
                steps++, pieces++;
                CHECK(n > 0 && n <= rest, "P %d budget %d: rest %d -> piece %d", P, budget, rest, n);
                if (n <= 0 || n > rest) break;
                CHECK(n <= budget || (n == budget + 1 && rest == n), "P %d budget %d: piece %d of rest %d", P, budget,
                      n, rest);
                CHECK(n != 1 || P == 1, "P %d budget %d: a piece of one row (rest %d)", P, budget, rest);
                CHECK(rest - n != 1, "P %d budget %d: leaves one row (rest %d, piece %d)", P, budget, rest, n);
                rest -= n;
            }
            /* at least budget - 1 rows a step */
            CHECK(steps <= (P + budget - 2) / (budget - 1), "P %d budget %d: %d steps", P, budget, steps);
        }
        /* what older slots left: a piece that leaves 0 or >= 2 rows, or nothing */
        for (int left = 0; left <= 40; left++) {
            int n = ts_sched_piece(P, left);
            CHECK(n == 0 || ((n >= 2 || P == 1) && P - n != 1 && (n <= left || (n == left + 1 && n == P))),
                  "rest %d, %d left: piece %d", P, left, n);
        }
    }
    printf("  %ld pieces checked\n", pieces);
    return th_finish("test_serve_sched");
}
