# Shared by scripts/demo.sh, scripts/test.sh and scripts/bench.sh (sourced, not run).
# ensure_packages PKG...: checks Debian packages with dpkg; as root, installs the missing ones with
# apt-get; otherwise prints the apt-get line and exits 1. $ATTNX_SCRIPT names the caller in messages.
ensure_packages() {
  local missing=() p
  if ! command -v dpkg >/dev/null 2>&1; then
    echo "${ATTNX_SCRIPT:-attnx}: dpkg not found (not Debian?); not checking packages: $*" >&2
    return 0
  fi
  for p in "$@"; do
    if ! dpkg -s "$p" 2>/dev/null | grep -q '^Status: install ok installed'; then
      missing+=("$p")
    fi
  done
  if [ ${#missing[@]} -eq 0 ]; then
    return 0
  fi
  if [ "$(id -u)" -ne 0 ]; then
    echo "${ATTNX_SCRIPT:-attnx}: missing Debian packages: ${missing[*]}" >&2
    echo "${ATTNX_SCRIPT:-attnx}: install them with:" >&2
    echo "  sudo apt-get install ${missing[*]}" >&2
    exit 1
  fi
  echo "${ATTNX_SCRIPT:-attnx}: installing missing Debian packages: ${missing[*]}"
  if ! apt-get update; then
    echo "${ATTNX_SCRIPT:-attnx}: apt-get update failed" >&2
    exit 1
  fi
  if ! DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends "${missing[@]}"; then
    echo "${ATTNX_SCRIPT:-attnx}: apt-get install ${missing[*]} failed" >&2
    exit 1
  fi
}
