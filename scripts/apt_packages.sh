# Sourced by the install scripts: installs the Debian packages among its arguments that are not
# installed yet, and nothing when all are.
#   apt_install_missing WHO required|optional PACKAGE...
# WHO prefixes the messages. `required` fails when a package cannot be installed; `optional`
# says so and carries on (the caller builds without it). apt's lists are refreshed only when
# an install from the current lists fails.
apt_install_missing() {
  local who=$1 need=$2
  shift 2
  local missing=() p
  for p in "$@"; do
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
  done
  [ ${#missing[@]} -eq 0 ] && return 0
  echo "$who: installing missing packages: ${missing[*]}" >&2
  local sudo=""
  [ "$(id -u)" -ne 0 ] && sudo="sudo"
  export DEBIAN_FRONTEND=noninteractive
  $sudo apt-get install -y -q --no-install-recommends "${missing[@]}" 2>/dev/null && return 0
  $sudo apt-get update -q
  if ! $sudo apt-get install -y -q --no-install-recommends "${missing[@]}"; then
    [ "$need" = required ] && return 1
    echo "$who: could not install ${missing[*]}; going on without them" >&2
  fi
  return 0
}
