"""bench search with a measurement file: a second run with the same seeds measures
nothing new and every policy sees the first run's numbers; the random policy runs its
own budget; the best known (the bar of trials to 95%) is the best of the random runs
and does not move when another model variant measures new configs; with re-timing, the
best configs are timed again, with uniformly drawn probes of random's configs that
set the level (cached / re-timed), and the curves and the bar use those numbers on
that level; bad budgets are refused with a clear message; --eval-db
--splits 0 reports the scoring speed alone.

usage: search_cache_test.py TUNEFORGE WORKDIR
"""
import json
import os
import sqlite3
import subprocess
import sys

tuneforge, work = sys.argv[1], sys.argv[2]
os.makedirs(work, exist_ok=True)
db = os.path.join(work, "measurements.db")
if os.path.exists(db):
    os.remove(db)
args = [tuneforge, "bench", "search", "--case", "matmul M=64 N=64 K=64", "--seeds", "1",
        "--trials", "16", "--random-trials", "48", "--measurements", db, "--json", "--plot", "", "--retime", "0"]


def run():
    out = subprocess.run(args, check=True, capture_output=True, text=True).stdout
    return json.loads(out)["cases"][0]


first, second = run(), run()
failures = []
if first["stored_measurements"] != 0:
    failures.append(f"a new file held {first['stored_measurements']} measurements")
if second["stored_measurements"] < 48:
    failures.append(f"the second run found {second['stored_measurements']} stored (< 48)")
for policy in ("random", "model"):
    a, b = first["policies"][policy], second["policies"][policy]
    if a["curves"] != b["curves"]:
        failures.append(f"{policy}: the rerun's curve differs (not served from the file)")
if len(first["policies"]["random"]["curves"][0]) != 48:
    failures.append("random did not run its 48 trials")
if len(first["policies"]["model"]["curves"][0]) != 16:
    failures.append("model did not run its 16 trials")
if "random_at_3x_budget" not in first or "model_at_budget" not in first:
    failures.append("no 'model at T vs random at 3T' comparison")

random_best = max(c[-1] for c in first["policies"]["random"]["curves"])
every_best = max(c[-1] for p in first["policies"].values() for c in p["curves"])
if first["best_known_gflops"] != random_best:
    failures.append(f"best known {first['best_known_gflops']} is not random's best {random_best}")
if first["best_known_random_trials"] != 48:
    failures.append(f"best known from {first['best_known_random_trials']} random trials, not 48")
if first["best_known_cached_gflops"] != random_best:
    failures.append(f"without re-timing, the cached bar {first['best_known_cached_gflops']} "
                    f"is not random's best {random_best}")
if first["best_measured_gflops"] != every_best:
    failures.append(f"best measured {first['best_measured_gflops']} is not the runs' best {every_best}")
args.insert(-5, "--variant")
args.insert(-5, "no repair")
third = run()
if third["best_known_gflops"] != first["best_known_gflops"]:
    failures.append("another model variant moved the best known: "
                    f"{first['best_known_gflops']} -> {third['best_known_gflops']}")
for p in first["policies"].values():
    if "trials_to_95_of_best_measured" not in p:
        failures.append("no trials to 95% of the best measured")
        break

# Re-timing: everything is served from the file, then the best configs are timed again.
args[-1] = "8"
args += ["--retime-rounds", "3", "--retime-reach", "32"]
retimed = run()
rt = retimed["retimed"]
entries = rt.get("entries", [])
if (not 1 <= rt.get("configs", 0) <= 8 or rt.get("probes") != 4 or not 0 <= rt.get("reach", -1) <= 32
        or len(entries) != rt["configs"] + rt["probes"] + rt["reach"] or rt["rounds"] != 3):
    failures.append(f"re-timing: {rt.get('configs')} configs, {rt.get('probes')} probes, "
                    f"{rt.get('reach')} reach, {rt.get('rounds')} rounds (want 1-8, 4, 0-32, 3)")
# Pass 1: the best configs, then the probes (random's, drawn uniformly); pass 2: the reach.
top = [e for e in entries if e["pass"] == 1 and not e["probe"]]
probes = [e for e in entries if e["probe"]]
reach = [e for e in entries if e["pass"] == 2]
if len(probes) != rt.get("probes") or any(not e["random"] or e["pass"] != 1 for e in probes):
    failures.append("re-timing: the probes are not random's configs of pass 1")
if entries != top + probes + reach or any(e["probe"] for e in reach):
    failures.append("re-timing: entries are not the best configs, the probes, then the reach")
if len({e["config"] for e in entries}) != len(entries):
    failures.append("re-timing: a config was timed twice")
if retimed["policies"]["random"]["cached_curves"] != third["policies"]["random"]["curves"]:
    failures.append("re-timing: the cached curves are not the file's numbers")
cached_top = max(c[-1] for p in retimed["policies"].values() for c in p["cached_curves"])
if not entries or max(e["cached_gflops"] for e in entries) != cached_top:
    failures.append("re-timing: the best cached config was not timed again")
random_cached_top = max(c[-1] for c in retimed["policies"]["random"]["cached_curves"])
if max((e["cached_gflops"] for e in entries if e["random"]), default=0) != random_cached_top:
    failures.append("re-timing: random's best cached config was not timed again")
# A level outside [0.8, 1.25] (the machine's speed changed between the runs and the
# rounds) discards the re-timing: the curves stay the cached numbers.
# The same when the second pass's level (from its anchors) is outside [0.8, 1.25] x
# the first's: both passes are discarded.
discarded = "discarded" in rt
reach_out = "reach_discarded" in rt
if reach_out != (bool(rt["anchors"]) and not 0.8 * rt["level"] <= rt["reach_level"] <= 1.25 * rt["level"]):
    failures.append(f"re-timing: reach level {rt['reach_level']} against {rt['level']}, "
                    f"reach discarded: {reach_out}")
if discarded != (not 0.8 <= rt["level"] <= 1.25 or reach_out):
    failures.append(f"re-timing: level {rt['level']}, discarded: {discarded}")
if discarded:
    print(f"(re-timing discarded on this machine: {rt['discarded']})")
    for name, p in retimed["policies"].items():
        if p["curves"] != p["cached_curves"]:
            failures.append(f"re-timing discarded, but {name}'s curves are not the cached ones")
    if retimed["best_known_gflops"] != retimed["best_known_cached_gflops"]:
        failures.append("re-timing discarded, but the bar is not the cached one")
def median(values):
    values = sorted(values)
    n = len(values)
    return values[n // 2] if n % 2 else (values[n // 2 - 1] + values[n // 2]) / 2
ratios, probe_ratios = [], []
if not 0.8 <= rt["level"] <= 1.25 and reach:
    failures.append("re-timing discarded by its first pass, but a second pass ran")
for e in entries:
    if e["probe"] and "retimed_gflops" in e:
        probe_ratios.append(e["cached_gflops"] / e["retimed_gflops"])
    if not e["samples"]:
        continue  # failed to build or run
    # Pass 2's values are on its own level (from its anchors).
    applied = not discarded
    on_level = rt["reach_level"] if e["pass"] == 2 else rt["level"]
    if len(e["samples"]) != 3 or ("value_gflops" in e) != applied:
        failures.append(f"re-timing: {len(e['samples'])} samples of {e['config']}")
        continue
    s = sorted(e["samples"])
    if abs(e["retimed_gflops"] - s[1]) > 1e-9 * s[1]:
        failures.append(f"re-timing: {e['retimed_gflops']} is not the median of {s}")
    if applied and abs(e["value_gflops"] - s[1] * on_level) > 1e-9 * e["value_gflops"]:
        failures.append(f"re-timing: a pass-{e['pass']} value is not the median on its level")
    if e["random"] and e in top:
        ratios.append(e["cached_gflops"] / e["retimed_gflops"])
# The level: the probes' median ratio (>= 3 probes timed), else the best configs'.
if ratios and abs(median(ratios) - rt["top_level"]) > 1e-9 * rt["top_level"]:
    failures.append(f"re-timing: top level {rt['top_level']} is not random's median ratio")
want_from = "probes" if len(probe_ratios) >= 3 else "random" if ratios else "any"
level = median(probe_ratios) if want_from == "probes" else rt["top_level"]
if rt["level_from"] != want_from or abs(level - rt["level"]) > 1e-9 * level:
    failures.append(f"re-timing: level {rt['level']} from {rt['level_from']}, want {level} from {want_from}")
random_top = [e for e in top if e["random"] and "value_gflops" in e]
if random_top:
    # Pass 2 times every config not yet timed whose cached number is at least 95% of
    # the bar after pass 1 (at least random's best re-timed value of pass 1).
    bar1 = max(e["value_gflops"] for e in random_top + [e for e in probes if "value_gflops" in e])
    for e in reach:
        if e["cached_gflops"] < 0.95 * bar1:
            failures.append(f"re-timing: pass 2 timed {e['config']}, cached {e['cached_gflops']} "
                            f"below 95% of the bar {bar1}")
    if retimed["best_known_cached_gflops"] != first["best_known_gflops"]:
        failures.append("re-timing: the cached bar moved")
random_last = max(c[-1] for c in retimed["policies"]["random"]["curves"])
if retimed["best_known_gflops"] != random_last:
    failures.append("re-timing: the best known is not the best of random's curves")

# Pass 2, the reach, on a file of this run's configs alone (so the run's configs are
# the file's): every config outside pass 1 whose cached number is >= the line (here
# 50%) of the bar after pass 1 is timed again, the best first up to the cap, and no
# other.
db2 = os.path.join(work, "reach.db")
if os.path.exists(db2):
    os.remove(db2)
reach_args = [tuneforge, "bench", "search", "--case", "matmul M=128 N=256 K=64", "--seeds", "1",
              "--trials", "16", "--random-trials", "48", "--measurements", db2, "--json", "--plot", ""]
subprocess.run(reach_args + ["--retime", "0"], check=True, capture_output=True)
# A line of 50% (--retime-reach-line) so that the reach is never empty and its anchors
# are timed.
out = subprocess.run(reach_args + ["--retime", "8", "--retime-rounds", "3", "--retime-reach", "4",
                                   "--retime-reach-line", "50"], check=True,
                     capture_output=True, text=True).stdout
rt2 = json.loads(out)["cases"][0]["retimed"]
# scripts/bench-search-table prints this result's row as BENCHMARKS.md has it.
result_file = os.path.join(work, "reach.json")
with open(result_file, "w") as f:
    f.write(out)
table = subprocess.run([sys.executable, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..",
                                                     "scripts", "bench-search-table"), result_file],
                       check=True, capture_output=True, text=True).stdout
row = [line for line in table.splitlines() if line.startswith("| matmul 128×256×64 |")]
if len(row) != 1 or len(row[0].split("|")) != 14 or "goals met (cases): accuracy" not in table:
    failures.append("scripts/bench-search-table: no row of 12 cells for the case:\n" + table)
elif "discarded" not in rt2 and f"| {rt2['reach']} (" not in row[0]:
    failures.append(f"scripts/bench-search-table: the row does not show the reach {rt2['reach']}: {row[0]}")
if "discarded" in rt2 and "reach_discarded" not in rt2:
    print(f"(reach not checked: re-timing discarded on this machine: {rt2['discarded']})")
else:
    con = sqlite3.connect(db2)
    cached = {c: f / m / 1e9 for c, f, m in con.execute(
        "SELECT r.config_json, w.flops, r.median_cost FROM records r JOIN workloads w ON "
        "w.id = r.workload_id WHERE r.error_kind = 'none' AND r.median_cost > 0")}
    pass1 = {e["config"] for e in rt2["entries"] if e["pass"] == 1}
    got = {e["config"] for e in rt2["entries"] if e["pass"] == 2}
    above = sorted(((g, c) for c, g in cached.items()
                    if c not in pass1 and g >= 0.5 * rt2["reach_bar"]), reverse=True)
    want = {c for g, c in above[:4]}  # at most --retime-reach, best first
    if rt2["reach_cap"] != 4 or not rt2["seconds"] > 0 or rt2["reach_seconds"] < 0 or \
            (got and not rt2["reach_seconds"] > 0):
        failures.append(f"reach: cap {rt2['reach_cap']} (want 4), seconds {rt2['seconds']}, "
                        f"reach_seconds {rt2['reach_seconds']}")
    if rt2["reach_wanted"] != len(above):
        failures.append(f"reach: {rt2['reach_wanted']} wanted, {len(above)} above 50% of the bar")
    if got != want:
        failures.append(f"reach: timed {len(got)} configs, want the {len(want)} best above 50% "
                        f"of the bar {rt2['reach_bar']}")
    if not got or rt2["reach_line"] != 0.5:
        failures.append(f"reach: {len(got)} configs timed at line {rt2['reach_line']} (want 4 at 0.5)")
    # The anchors: pass 1's first 8 configs timed (the top, best cached first, then the
    # probes), again in pass 2's rounds; pass 2's level is their median pass-1 value /
    # pass-2 median.
    p1_top = [e for e in rt2["entries"] if e["pass"] == 1 and e["samples"]]
    anchors = rt2["anchors"]
    if got and [a["config"] for a in anchors] != [e["config"] for e in p1_top[:8]]:
        failures.append("reach: the anchors are not pass 1's first configs")
    # An anchor's value is its entry's pass-1 value, its median on pass 1's level (the
    # entries drop their values when the re-timing is discarded, the anchors keep them).
    if any(abs(a["value_gflops"] - median(e["samples"]) * rt2["level"]) > 1e-9 * a["value_gflops"]
           for a, e in zip(anchors, p1_top)):
        failures.append("reach: an anchor's pass-1 value is not its entry's")
    anchor_ratios = [a["value_gflops"] / median(a["samples"]) for a in anchors if a["samples"]]
    want_level = median(anchor_ratios) if len(anchor_ratios) >= 3 else rt2["level"]
    want_from = "anchors" if len(anchor_ratios) >= 3 else "pass 1"
    print(f"(reach: {len(anchors)} anchors, its level from {rt2['reach_level_from']})")
    if rt2["reach_level_from"] != want_from or abs(rt2["reach_level"] - want_level) > 1e-9 * want_level:
        failures.append(f"reach: level {rt2['reach_level']} from {rt2['reach_level_from']}, "
                        f"want {want_level} from {want_from}")
    out_of_range = not 0.8 * rt2["level"] <= rt2["reach_level"] <= 1.25 * rt2["level"]
    if got and ("reach_discarded" in rt2) != out_of_range:
        failures.append(f"reach: level {rt2['reach_level']} against {rt2['level']}, "
                        f"discarded: {'reach_discarded' in rt2}")
    if "reach_discarded" in rt2 and (rt2.get("discarded") != rt2["reach_discarded"] or
                                     any("value_gflops" in e for e in rt2["entries"])):
        failures.append("reach: its level discarded the second pass but not the first")
    for e in rt2["entries"]:
        if e["pass"] == 2 and e["samples"] and "reach_discarded" not in rt2 and \
                abs(e["value_gflops"] - median(e["samples"]) * rt2["reach_level"]) > 1e-9 * e["value_gflops"]:
            failures.append("reach: a value is not its median on the reach's level")
    p1_random = [e["value_gflops"] for e in rt2["entries"]
                 if e["pass"] == 1 and e["random"] and "value_gflops" in e]
    if p1_random and rt2["reach_bar"] < max(p1_random):
        failures.append(f"reach: bar {rt2['reach_bar']} below random's re-timed {max(p1_random)}")

# --heuristics: every run starts with the template's heuristic configs (a quarter of
# the 16 trials), so the two seeds' runs start alike.
out = subprocess.run(args[:5] + ["--seeds", "2", "--trials", "16", "--random-trials", "48",
                                 "--measurements", db, "--json", "--plot", "", "--retime", "0",
                                 "--heuristics"], check=True, capture_output=True, text=True).stdout
warm = json.loads(out)["cases"][0]["policies"]
for policy in ("random", "model"):
    a, b = warm[policy]["curves"]
    if a[:4] != b[:4]:
        failures.append(f"--heuristics: {policy}'s two seeds start differently: {a[:4]} vs {b[:4]}")

bad = subprocess.run(args[:9] + ["--random-trials", "8", "--json"], capture_output=True, text=True)
if bad.returncode == 0 or "random-trials" not in bad.stderr:
    failures.append("--random-trials below --trials was accepted: " + bad.stderr)

for flag, value in (("--retime-reach", "-1"), ("--retime-reach-line", "0"),
                    ("--retime-reach-line", "101")):
    bad = subprocess.run(args[:9] + [flag, value, "--json"], capture_output=True, text=True)
    if bad.returncode == 0 or flag[2:] not in bad.stderr:
        failures.append(f"{flag} {value} was accepted: " + bad.stderr)

# --eval-db with --splits 0: the scoring speed of the file's workload alone.
out = subprocess.run([tuneforge, "bench", "search", "--eval-db", db, "--splits", "0", "--json"],
                     check=True, capture_output=True, text=True).stdout
workloads = json.loads(out)["workloads"]
if len(workloads) != 1 or workloads[0]["variants"] or workloads[0].get("scoring", {}).get("candidates", 0) < 1:
    failures.append("--eval-db --splits 0: not one workload with a scoring speed and no variant: " + out[:300])
bad = subprocess.run([tuneforge, "bench", "search", "--eval-db", db, "--splits", "-1"], capture_output=True, text=True)
if bad.returncode == 0 or "splits" not in bad.stderr:
    failures.append("--splits -1 was accepted: " + bad.stderr)

for f in failures:
    print("FAIL:", f)
print("ok" if not failures else f"{len(failures)} failure(s)")
sys.exit(1 if failures else 0)
