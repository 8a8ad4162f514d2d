# Sourced by every scripts/reproduce/<slug>.sh (not run on its own): the checkout's tools without an
# activated venv. Puts <checkout>/.venv/bin, the venv that `make install` creates (VENV=<dir> names
# another, as in the Makefile; relative to the checkout), first on PATH when it exists, so `icml26`,
# `accelerate`, `python` and `vllm` are the venv's. Without it, the icml26 already on PATH is used;
# with neither, the script stops here with a message naming `make install`.
_icml26_repo="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
_icml26_venv="${VENV:-.venv}"
[[ "$_icml26_venv" == /* ]] || _icml26_venv="$_icml26_repo/$_icml26_venv"
if [[ -d "$_icml26_venv/bin" ]]; then
  PATH="$_icml26_venv/bin:$PATH"
  export PATH
fi
if ! command -v icml26 >/dev/null 2>&1; then
  echo "$(basename "$0"): no icml26 command: run \`make install\` in $_icml26_repo (it creates" \
    "$_icml26_venv), or activate an environment where the package is installed" >&2
  exit 1
fi
unset _icml26_repo _icml26_venv
