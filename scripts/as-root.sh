# Sourced by the quick-start scripts: re-run the calling script as root.
# They install packages and load BPF programs, so they need root; a root
# shell (a container, a cloud VM's root login) runs them as is, any other
# user through sudo.
if [[ $EUID -ne 0 ]]; then
  if command -v sudo >/dev/null; then
    exec sudo --preserve-env=SLOWPATH_GUEST_CACHE,SLOWPATH_TOOLS_CACHE,SLOWPATH_APT_STATE,CI "$0" "$@"
  fi
  echo "$(basename "$0"): needs root (it installs packages and loads BPF programs): run it as root" >&2
  exit 1
fi
