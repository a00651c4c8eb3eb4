#!/usr/bin/env bash
# What judge quality and reviewer reliability cost the service's events/s: jurystream alone over
# the peers corpus (scripts/bench-peers.sh with PEERS_ONLY=jurystream), the defaults and both
# statistics off taking turns, each run on a fresh broker. Prints each round's events/s, the
# applying thread's and the broker's CPU seconds (the broker's when started here, with loading
# the corpus) and the defaults' share of both off's events/s, then the medians, and the span of
# rounds that holds the median share with 90% confidence or more.
# Rounds, not one run: on a shared host the same build's events/s moves by a third from one
# minute to the next, so only the median of interleaved rounds compares the two. The defaults go
# first in odd rounds and second in even ones, so that neither configuration always runs right
# after the other's broker is torn down, or always first as the host drifts.
#
# usage: scripts/bench-share.sh [ROUNDS] [EVENTS] [PROJECTS]    (default 6 1000000 10000)
# PEERS_SERVICE_CONFIG appends TOML to both runs' configuration; the broker is chosen as in
# scripts/bench-peers.sh (a tansu per run unless KAFKA_BOOTSTRAP_SERVERS is set).
set -euo pipefail
cd "$(dirname "$0")/.."
rounds="${1:-6}"
events="${2:-1000000}"
projects="${3:-10000}"
both_off=$'[judge_quality]\nenabled = false\n[reviewers]\nenabled = false\n'
common="${PEERS_SERVICE_CONFIG:-}"

# One run alone: "<events/s from start> <applying thread's CPU seconds> <broker's>".
run() {
  local out
  out=$(PEERS_ONLY=jurystream PEERS_SERVICE_CONFIG="$common$1" \
    scripts/bench-peers.sh "$events" "$projects" 2>&1) || { echo "$out" >&2; return 1; }
  local rate applying
  rate=$(awk '$1 == "jurystream" && $2 ~ /^[0-9,]+$/ { gsub(",", "", $2); print $2; exit }' \
    <<<"$out")
  applying=$(grep -o 'applying [0-9.]* s' <<<"$out" | awk '{ print $2 }')
  broker=$(grep -o 'broker CPU [0-9.]* s' <<<"$out" | awk '{ print $3 }')
  echo "$rate ${applying:-?} ${broker:-?}"
}

median() {
  sort -g | awk '{ v[NR] = $1 }
    END { printf "%.10g\n", NR % 2 ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2 }'
}

# The rounds' k-th lowest and k-th highest, with the largest k whose span holds the true median
# with probability 90% or more (each round falls below the median with probability 1/2, so the
# k-th lowest exceeds it with the binomial odds of fewer than k below): how far the host's noise
# leaves the median, whatever the rounds' distribution.
median_span() {
  sort -g | awk '{ v[NR] = $1 }
    END {
      n = NR; k = 1; below = 0.5 ^ n; term = below
      # below: the chance of at most k - 1 rounds under the median, Bin(n, 1/2).
      while (k < n / 2) {
        next_term = term * (n - k + 1) / k
        if (1 - 2 * (below + next_term) < 0.9) break
        below += next_term; term = next_term; k++
      }
      printf "%s-%s%% (%.0f%% sure)\n", v[k], v[n + 1 - k], 100 * (1 - 2 * below)
    }'
}

echo "round  defaults events/s (applying s, broker s)  both off events/s (applying s, broker s)  share"
shares=() defaults=() off=()
for round in $(seq "$rounds"); do
  if ((round % 2)); then
    defaults_run=$(run "")
    off_run=$(run "$both_off")
  else
    off_run=$(run "$both_off")
    defaults_run=$(run "")
  fi
  read -r d d_applying d_broker <<<"$defaults_run"
  read -r o o_applying o_broker <<<"$off_run"
  share=$(awk -v d="$d" -v o="$o" 'BEGIN { printf "%.0f", 100 * d / o }')
  printf "%5d  %14s (%s, %s)  %14s (%s, %s)  %4s%%\n" "$round" "$d" "$d_applying" "$d_broker" \
    "$o" "$o_applying" "$o_broker" "$share"
  shares+=("$share") defaults+=("$d") off+=("$o")
done
printf "median  defaults %s events/s, both off %s events/s, share %s%% (%s rounds)\n" \
  "$(printf '%s\n' "${defaults[@]}" | median)" "$(printf '%s\n' "${off[@]}" | median)" \
  "$(printf '%s\n' "${shares[@]}" | median)" "$rounds"
printf "the median share lies in %s\n" "$(printf '%s\n' "${shares[@]}" | median_span)"
