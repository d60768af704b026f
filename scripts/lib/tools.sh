# shellcheck shell=bash
# Go tools used by lint, installed once into the cache (outside the work tree).
SECKILL_CACHE_DIR="${SECKILL_CACHE_DIR:-${XDG_CACHE_HOME:-$HOME/.cache}/seckill}"
TOOLS_BIN="$SECKILL_CACHE_DIR/tools/bin"

# ensure_tool NAME MODULE@VERSION: installs NAME into TOOLS_BIN unless it is there.
ensure_tool() {
  local name=$1 pkg=$2 stamp="$TOOLS_BIN/.$1.version"
  if [[ -x "$TOOLS_BIN/$name" && -f "$stamp" && "$(cat "$stamp")" == "$pkg" ]]; then
    return 0
  fi
  echo "[tools] installing $pkg"
  mkdir -p "$TOOLS_BIN"
  GOBIN="$TOOLS_BIN" go install "$pkg"
  echo "$pkg" >"$stamp"
}
