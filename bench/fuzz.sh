#!/usr/bin/env bash
# Runs the fuzz targets of the parsers of outside input under libFuzzer (cargo-fuzz) for a set
# time each, and prints one line per target: executions, executions/s, peak RSS, findings.
# Targets: fuzz/ (canon_url, spider_yaml, bus_message, robots_txt, html_page, api_body),
# crates/silk-router/fuzz (config_load), crates/silk-selector/fuzz (its targets).
#
#   bench/fuzz.sh [SECONDS_PER_TARGET]      (default 60; the goal is 10 M executions each)
#
# cargo-fuzz needs nightly features; with the machine's stable toolchain they are enabled
# with RUSTC_BOOTSTRAP=1 (cargo-fuzz only passes the sanitizer and coverage flags). New
# inputs go to fuzz/corpus/<target>/ (not committed); crashes to fuzz/artifacts/<target>/.
# Results go in docs/benchmarks.md ("Fuzzing") by hand, with the date and the commit.
set -euo pipefail
cd "$(dirname "$0")/.."
SECONDS_PER_TARGET="${1:-60}"
command -v cargo-fuzz >/dev/null || cargo install cargo-fuzz --locked
export RUSTC_BOOTSTRAP=1
report() { # dir target log
  local runs rss crashes
  runs="$(grep -Eo 'Done [0-9]+ runs' "$3" | tail -1 | grep -Eo '[0-9]+' || echo 0)"
  rss="$(grep -Eo 'rss: [0-9]+Mb' "$3" | tail -1 | grep -Eo '[0-9]+' || echo '?')"
  crashes="$(ls "$1/artifacts/$2" 2>/dev/null | wc -l)"
  printf '%-14s %12s runs  %9s/s  rss %5s MB  findings %s\n' "$2" "$runs" \
    "$((runs / SECONDS_PER_TARGET))" "$rss" "$crashes"
}
run_target() { # dir target [seed dir]
  local dir="$1" target="$2" seeds="${3:-}" log
  log="$(mktemp)"
  mkdir -p "$dir/corpus/$target"
  (cd "$dir" && cargo fuzz build -O "$target" >/dev/null 2>&1)
  (cd "$dir" && cargo fuzz run -O "$target" "corpus/$target" ${seeds:+"$seeds"} -- \
      -max_total_time="$SECONDS_PER_TARGET" -timeout=10 -rss_limit_mb=2048 -max_len=65536 \
      -print_final_stats=1 >"$log" 2>&1) || true
  report "$dir" "$target" "$log"
  rm -f "$log"
}
# TARGETS (space-separated) picks some: the fuzz/ targets by name, `config_load`, `selector`.
TARGETS="${TARGETS:-canon_url spider_yaml bus_message robots_txt html_page api_body config_load selector}"
for target in $TARGETS; do
  case "$target" in
    config_load) run_target crates/silk-router/fuzz config_load seeds/config_load ;;
    selector)
      for t in $(cd crates/silk-selector/fuzz && cargo fuzz list); do
        run_target crates/silk-selector/fuzz "$t"
      done ;;
    *) run_target fuzz "$target" "seeds/$target" ;;
  esac
done
