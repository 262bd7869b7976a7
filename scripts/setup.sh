#!/usr/bin/env bash
# Installs what building and testing tessera needs on a fresh Debian machine. Idempotent:
# packages already present are not fetched again, so it is cheap to run before every build.
set -euo pipefail

# time: GNU time, the peak RSS column of `make deploy-all`. libmicrohttpd-dev: tessera serve's
# HTTP layer; curl: the serve tests' client.
DEBS=(build-essential cmake pkg-config libjansson-dev libpcre2-dev libutf8proc-dev libssl-dev libmicrohttpd-dev curl clang libclang-rt-14-dev time python3 python3-venv)

missing=()
for p in "${DEBS[@]}"; do
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if ((${#missing[@]})); then
    echo "setup: installing ${missing[*]}"
    SUDO=""
    [ "$(id -u)" -ne 0 ] && SUDO="sudo"
    $SUDO apt-get update -qq
    DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq "${missing[@]}" >/dev/null
fi

# Python test tools: none are needed by the tests yet (fixtures are committed; regenerating
# them needs torch + transformers in a separate venv, see tools/gen_hf_fixtures.py).
if [ -f tools/requirements-test.txt ]; then
    python3 -m pip install -q -r tools/requirements-test.txt
fi
# The unmodified `openai` client for tests/test_serve_openai.sh, from PyPI into a venv under
# build/ (ignored by git, outside the sources); without it that test is skipped, saying why.
VENV="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)/build/venv-test"
if ! "$VENV/bin/python" -c "import openai" 2>/dev/null; then
    echo "setup: making $VENV (pip install openai)"
    if ! { python3 -m venv "$VENV" && "$VENV/bin/pip" install -q openai; }; then
        echo "setup: warning: could not install openai into $VENV; test_serve_openai will be skipped" >&2
    fi
fi
echo "setup: ok"
