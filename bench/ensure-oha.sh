# Sourced by the benchmarks that run oha: puts it on PATH, installing it
# with `cargo install oha --locked` into OHA_CACHE (default
# ~/.cache/loadfleet-bench) when it is nowhere to be found. There is no
# Debian package; the build takes a few minutes on two cores, once.
OHA_CACHE=${OHA_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/loadfleet-bench}
export PATH=$PATH:$OHA_CACHE/bin
command -v oha >/dev/null || cargo install oha --locked --root "$OHA_CACHE"
