# Entry points. `make demo` and `make test` are the README's two commands: each runs the
# idempotent set-up first, so a fresh Debian machine needs nothing else.
BUILD ?= build
ASAN_BUILD ?= build-asan
FUZZ_BUILD ?= build-fuzz
JOBS ?= $(shell nproc)
FUZZ_SECONDS ?= 20
DEMO_PRESET ?= qwen3-0.6b-tiny
DEMO_DIR ?= demo/$(DEMO_PRESET)

BENCH_MODELS ?= llama-3.2-1b qwen3-0.6b
BENCH_DIR ?= bench-models
BENCH_ARGS ?= --prefill 128,512 --decode 128 --gen 16 --trials 5

.PHONY: setup build test test-fast test-asan fuzz fuzz-long demo bench bench-serve bench-serve-sbs bench-chunk bench-lookup deploy-all clean

setup:
	@bash scripts/setup.sh

build: setup
	cmake -S . -B $(BUILD) -DCMAKE_BUILD_TYPE=Release -DTS_WERROR=ON >/dev/null
	cmake --build $(BUILD) -j$(JOBS)

# Every test: the release build (warnings are errors), the same suite under ASan+UBSan, and a
# bounded libFuzzer run of each fuzz target. A test that cannot run here exits 77, which ctest
# counts as skipped (not passed); scripts/test-skips.sh then prints each skip's reason.
test: build
	cd $(BUILD) && ctest --output-on-failure -j$(JOBS) --output-junit junit.xml
	@bash scripts/test-skips.sh $(BUILD)
	$(MAKE) --no-print-directory test-asan
	$(MAKE) --no-print-directory fuzz
	@echo "all test stages passed"

test-fast: build
	cd $(BUILD) && ctest --output-on-failure -j$(JOBS) --output-junit junit.xml
	@bash scripts/test-skips.sh $(BUILD)

test-asan: setup
	cmake -S . -B $(ASAN_BUILD) -DCMAKE_BUILD_TYPE=RelWithDebInfo -DTS_SANITIZE=ON -DTS_WERROR=ON >/dev/null
	cmake --build $(ASAN_BUILD) -j$(JOBS)
	cd $(ASAN_BUILD) && ASAN_OPTIONS=detect_leaks=1 UBSAN_OPTIONS=print_stacktrace=1 \
		ctest --output-on-failure -j$(JOBS) --output-junit junit.xml
	@bash scripts/test-skips.sh $(ASAN_BUILD)

fuzz: setup
	CC=clang cmake -S . -B $(FUZZ_BUILD) -DCMAKE_BUILD_TYPE=RelWithDebInfo -DTS_FUZZ=ON -DTS_SANITIZE=ON >/dev/null
	cmake --build $(FUZZ_BUILD) -j$(JOBS)
	bash scripts/fuzz.sh $(FUZZ_BUILD) $(FUZZ_SECONDS)

fuzz-long:
	$(MAKE) fuzz FUZZ_SECONDS=600

demo: build
	rm -rf $(DEMO_DIR)
	$(BUILD)/tessera synth $(DEMO_PRESET) $(DEMO_DIR)
	$(BUILD)/tessera inspect $(DEMO_DIR)
	$(BUILD)/tessera deploy $(DEMO_DIR) --out deployments/$(DEMO_PRESET)
	@cat deployments/$(DEMO_PRESET)/report.md

# Every seed preset at full size through phases 0-7, unattended (scripts/deploy_all.sh): synth
# checkpoints are written once into $(BENCH_DIR) (the 4B/8B ones are large); a failure does not
# stop the others; the table of exit code, wall time, verdict and peak RSS is printed and
# written to deployments/deploy-all.md; the target fails when any deployment failed.
# DEPLOY_ARGS go to every `tessera deploy` (e.g. DEPLOY_ARGS="--phases 0-3").
# HF_PYTHON=/path/venv-hf/bin/python (torch + transformers) compares phase 0 with Hugging Face;
# without it phase 0 is "not compared".
HF_PYTHON ?=
DEPLOY_ALL ?= qwen2.5-0.5b qwen3-0.6b llama-3.2-1b qwen2.5-1.5b qwen3-1.7b smollm2-1.7b llama-3.2-3b qwen2.5-3b qwen3-4b
DEPLOY_ARGS ?=
deploy-all: build
	bash scripts/deploy_all.sh --bin $(BUILD)/tessera --models $(BENCH_DIR) --out deployments \
		--args "$(DEPLOY_ARGS)$(if $(HF_PYTHON), --hf-python $(HF_PYTHON))" $(DEPLOY_ALL)

# tessera serve's time to first token with and without the prefix cache, on a full-size synth
# qwen3-0.6b (scripts/bench_serve.sh); never part of `make test`.
bench-serve: build
	bash scripts/bench_serve.sh --bin $(BUILD)/tessera --model $(BENCH_DIR)/qwen3-0.6b

# Chunked prefill: a decoding stream's longest gap while a ~2,000-token prompt is prefilled, and
# that prompt's time to first token, with --prefill-chunk 0 and 256 (scripts/bench_chunk.sh).
bench-chunk: build
	bash scripts/bench_chunk.sh --bin $(BUILD)/tessera --model $(BENCH_DIR)/qwen3-0.6b

# Speed of the cpu target on full-size synth models (written once into $(BENCH_DIR)), with the
# machine's own peaks measured in the same run. Prints ratios; never part of `make test`.
bench: build
	@mkdir -p $(BENCH_DIR)
	@for m in $(BENCH_MODELS); do \
		[ -f $(BENCH_DIR)/$$m/model.safetensors ] || $(BUILD)/tessera synth $$m $(BENCH_DIR)/$$m || exit 1; \
		$(BUILD)/tessera bench $(BENCH_DIR)/$$m $(BENCH_ARGS) || exit 1; \
	done

# Prompt-lookup speculative decoding (scripts/bench_lookup.sh): tokens/s with and without it on
# the synth qwen3-0.6b (full acceptance), acceptance on stories260K, one request through serve.
# tessera serve and llama.cpp's llama-server side by side on one GGUF file under the same
# concurrent load (scripts/bench_serve_sbs.sh: requests/s, p50/p99 time to first token).
# llama.cpp is built outside the repository: LLAMA_SERVER=/path/to/build/bin/llama-server,
# SBS_MODEL=FILE.gguf (e.g. the BF16 GGUF convert_hf_to_gguf.py makes of bench-models/qwen3-0.6b).
LLAMA_SERVER ?=
SBS_MODEL ?=
SBS_ARGS ?=
bench-serve-sbs: build
	bash scripts/bench_serve_sbs.sh --bin $(BUILD)/tessera --model "$(SBS_MODEL)" --llama-server "$(LLAMA_SERVER)" $(SBS_ARGS)

bench-lookup: build
	@mkdir -p $(BENCH_DIR)
	bash scripts/bench_lookup.sh $(BUILD)/tessera $(BENCH_DIR)/qwen3-0.6b $(BUILD)/fixtures-shared/tokenizers/qwen3

clean:
	rm -rf $(BUILD) $(ASAN_BUILD) $(FUZZ_BUILD) demo deployments
