"""bench search with a measurement file: a second run with the same seeds measures
nothing new and every policy sees the first run's numbers; the random policy runs its
own budget; the best known (the bar of trials to 95%) is the best of the random runs
and does not move when another model variant measures new configs; with re-timing, the
best configs are timed again, with uniformly drawn probes of random's configs that
set the level (cached / re-timed), and the curves and the bar use those numbers on
that level; a level out of its range (--retime-level-range, --retime-reach-range,
forced here with a range that leaves out 100%) discards the re-timing and the
figures stay the cached ones; bad budgets and ranges are refused with a clear
message; --eval-db
--splits 0 reports the scoring speed alone, and --simulate the search simulated on
the file's records (--bar-rank K: to 95% of the K-th best config); --label-rounds R
pools R interleaved measurements into each new label.

usage: search_cache_test.py TUNEFORGE WORKDIR
"""
import json
import math
import os
import sqlite3
import statistics
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

def median(values):
    values = sorted(values)
    n = len(values)
    return values[n // 2] if n % 2 else (values[n // 2 - 1] + values[n // 2]) / 2


def check_retimed(result, name):
    """What holds of every re-timing, kept or discarded: the levels, the entries'
    medians and values, the discard rules (a level outside level_range, or a reach
    level outside reach_range x the level, the machine's speed changed between the
    runs and the rounds or between the passes: the curves keep the cached numbers),
    and pass 2's line."""
    rt = result["retimed"]
    entries = rt["entries"]
    lo, hi = rt["level_range"]
    rlo, rhi = rt["reach_range"]
    discarded = "discarded" in rt
    reach_out = "reach_discarded" in rt
    if reach_out != (bool(rt["anchors"]) and not rlo * rt["level"] <= rt["reach_level"] <= rhi * rt["level"]):
        failures.append(f"{name}: reach level {rt['reach_level']} against {rt['level']}, "
                        f"reach discarded: {reach_out}")
    if discarded != (not lo <= rt["level"] <= hi or reach_out):
        failures.append(f"{name}: level {rt['level']}, discarded: {discarded}")
    if reach_out and rt.get("discarded") != rt["reach_discarded"]:
        failures.append(f"{name}: the reach's level discarded the second pass but not the first")
    if discarded:
        for policy, p in result["policies"].items():
            if p["curves"] != p["cached_curves"]:
                failures.append(f"{name}: re-timing discarded, but {policy}'s curves are not the cached ones")
        if result["best_known_gflops"] != result["best_known_cached_gflops"]:
            failures.append(f"{name}: re-timing discarded, but the bar is not the cached one")
    reach = [e for e in entries if e["pass"] == 2]
    if not lo <= rt["level"] <= hi and (reach or rt["anchors"]):
        failures.append(f"{name}: re-timing discarded by its first pass, but a second pass ran")
    ratios, probe_ratios = [], []
    for e in entries:
        if e["probe"] and "retimed_gflops" in e:
            probe_ratios.append(e["cached_gflops"] / e["retimed_gflops"])
        if not e["samples"]:
            continue  # failed to build or run
        # Values only when the re-timing is kept; pass 2's on its own level (from its
        # anchors).
        applied = not discarded
        on_level = rt["reach_level"] if e["pass"] == 2 else rt["level"]
        if len(e["samples"]) != rt["rounds"] or ("value_gflops" in e) != applied:
            failures.append(f"{name}: {len(e['samples'])} samples of {e['config']}, "
                            f"value: {'value_gflops' in e}, discarded: {discarded}")
            continue
        if abs(e["retimed_gflops"] - median(e["samples"])) > 1e-9 * e["retimed_gflops"]:
            failures.append(f"{name}: {e['retimed_gflops']} is not the median of {e['samples']}")
        if applied and abs(e["value_gflops"] - median(e["samples"]) * on_level) > 1e-9 * e["value_gflops"]:
            failures.append(f"{name}: a pass-{e['pass']} value is not the median on its level")
        if e["random"] and e["pass"] == 1 and not e["probe"]:
            ratios.append(e["cached_gflops"] / e["retimed_gflops"])
    # The level: the probes' median ratio (>= 3 probes timed), else the best configs'.
    if ratios and abs(median(ratios) - rt["top_level"]) > 1e-9 * rt["top_level"]:
        failures.append(f"{name}: top level {rt['top_level']} is not random's median ratio")
    want_from = "probes" if len(probe_ratios) >= 3 else "random" if ratios else "any"
    level = median(probe_ratios) if want_from == "probes" else rt["top_level"]
    if rt["level_from"] != want_from or abs(level - rt["level"]) > 1e-9 * level:
        failures.append(f"{name}: level {rt['level']} from {rt['level_from']}, want {level} from {want_from}")
    # The labels' disagreement with their re-timed medians: over the probes, the level
    # taken out, |log(ratio / level)| as a fraction; median and 90th percentile.
    ld = rt.get("label_disagreement")
    if len(probe_ratios) >= 3:
        off = sorted(math.exp(abs(math.log(r / rt["level"]))) - 1 for r in probe_ratios)
        want = (median(off), off[min(len(off) - 1, int(0.9 * len(off)))], len(off))
        if not ld or any(abs(a - b) > 1e-9 for a, b in zip((ld["median"], ld["p90"], ld["probes"]), want)):
            failures.append(f"{name}: label disagreement {ld}, want median/p90/probes {want}")
    elif ld is not None:
        failures.append(f"{name}: label disagreement {ld} from {len(probe_ratios)} probes (< 3)")
    # Pass 2 times only configs outside pass 1 whose cached number is >= the line of
    # the bar after pass 1, which is at least random's best pass-1 value (its median on
    # pass 1's level, kept or not).
    p1_random = [median(e["samples"]) * rt["level"] for e in entries
                 if e["pass"] == 1 and e["random"] and e["samples"]]
    if p1_random and reach and rt["reach_bar"] < max(p1_random) * (1 - 1e-9):
        failures.append(f"{name}: reach bar {rt['reach_bar']} below random's pass-1 {max(p1_random)}")
    pass1 = {e["config"] for e in entries if e["pass"] == 1}
    for e in reach:
        if e["config"] in pass1 or e["cached_gflops"] < rt["reach_line"] * rt["reach_bar"]:
            failures.append(f"{name}: pass 2 timed {e['config']}, cached {e['cached_gflops']}, "
                            f"line {rt['reach_line']} of the bar {rt['reach_bar']}")
    return rt


check_retimed(retimed, "re-timing")
if [rt["level_range"], rt["reach_range"]] != [[0.8, 1.25], [0.8, 1.25]]:
    failures.append(f"re-timing: ranges {rt['level_range']}, {rt['reach_range']} (want 0.8-1.25 both)")
if "discarded" in rt:
    print(f"(re-timing discarded on this machine: {rt['discarded']})")
if "discarded" not in rt and retimed["best_known_cached_gflops"] != first["best_known_gflops"]:
    failures.append("re-timing: the cached bar moved")
random_last = max(c[-1] for c in retimed["policies"]["random"]["curves"])
if retimed["best_known_gflops"] != random_last:
    failures.append("re-timing: the best known is not the best of random's curves")

# A first pass's level outside --retime-level-range discards the re-timing, whatever
# the machine does: a range without 100%.
forced = subprocess.run(args + ["--retime-level-range", "5000,10000"], check=True, capture_output=True,
                        text=True).stdout
forced = json.loads(forced)["cases"][0]
frt = check_retimed(forced, "level out of range")
if (frt["level_range"] != [50, 100] or "discarded" not in frt or "reach_discarded" in frt
        or frt["reach"] != 0 or frt["anchors"] or any("value_gflops" in e for e in frt["entries"])):
    failures.append(f"level out of range: not discarded by its first pass: {json.dumps(frt)[:400]}")

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
reach_args += ["--retime", "8", "--retime-rounds", "3", "--retime-reach", "4", "--retime-reach-line", "50"]
out = subprocess.run(reach_args, check=True, capture_output=True, text=True).stdout
# scripts/bench-search-table prints this result's row as BENCHMARKS.md has it.
result_file = os.path.join(work, "reach.json")
with open(result_file, "w") as f:
    f.write(out)
table = subprocess.run([sys.executable, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..",
                                                     "scripts", "bench-search-table"), result_file],
                       check=True, capture_output=True, text=True).stdout
row = [line for line in table.splitlines() if line.startswith("| matmul 128×256×64 |")]
rt2 = json.loads(out)["cases"][0]["retimed"]
if len(row) != 1 or len(row[0].split("|")) != 14 or "goals met (cases): accuracy" not in table:
    failures.append("scripts/bench-search-table: no row of 12 cells for the case:\n" + table)
elif "discarded" not in rt2 and f"| {rt2['reach']} (" not in row[0]:
    failures.append(f"scripts/bench-search-table: the row does not show the reach {rt2['reach']}: {row[0]}")

con = sqlite3.connect(db2)
cached = {c: f / m / 1e9 for c, f, m in con.execute(
    "SELECT r.config_json, w.flops, r.median_cost FROM records r JOIN workloads w ON "
    "w.id = r.workload_id WHERE r.error_kind = 'none' AND r.median_cost > 0")}


def check_reach(result, name):
    rt2 = check_retimed(result, name)
    pass1 = {e["config"] for e in rt2["entries"] if e["pass"] == 1}
    got = {e["config"] for e in rt2["entries"] if e["pass"] == 2}
    above = sorted(((g, c) for c, g in cached.items()
                    if c not in pass1 and g >= 0.5 * rt2["reach_bar"]), reverse=True)
    want = {c for g, c in above[:4]}  # at most --retime-reach, best first
    if rt2["reach_cap"] != 4 or not rt2["seconds"] > 0 or rt2["reach_seconds"] < 0 or \
            (got and not rt2["reach_seconds"] > 0):
        failures.append(f"{name}: cap {rt2['reach_cap']} (want 4), seconds {rt2['seconds']}, "
                        f"reach_seconds {rt2['reach_seconds']}")
    if rt2["reach_wanted"] != len(above):
        failures.append(f"{name}: {rt2['reach_wanted']} wanted, {len(above)} above 50% of the bar")
    if got != want:
        failures.append(f"{name}: timed {len(got)} configs, want the {len(want)} best above 50% "
                        f"of the bar {rt2['reach_bar']}")
    if not got or rt2["reach_line"] != 0.5:
        failures.append(f"{name}: {len(got)} configs timed at line {rt2['reach_line']} (want 4 at 0.5)")
    # The anchors: pass 1's first 8 configs timed (the top, best cached first, then the
    # probes), again in pass 2's rounds; pass 2's level is their median pass-1 value
    # (the entry's median on pass 1's level) / pass-2 median.
    p1_top = [e for e in rt2["entries"] if e["pass"] == 1 and e["samples"]]
    anchors = rt2["anchors"]
    if got and [a["config"] for a in anchors] != [e["config"] for e in p1_top[:8]]:
        failures.append(f"{name}: the anchors are not pass 1's first configs")
    if any(abs(a["pass1_gflops"] - median(e["samples"]) * rt2["level"]) > 1e-9 * a["pass1_gflops"]
           for a, e in zip(anchors, p1_top)):
        failures.append(f"{name}: an anchor's pass-1 value is not its entry's")
    anchor_ratios = [a["pass1_gflops"] / median(a["samples"]) for a in anchors if a["samples"]]
    want_level = median(anchor_ratios) if len(anchor_ratios) >= 3 else rt2["level"]
    want_from = "anchors" if len(anchor_ratios) >= 3 else "pass 1"
    print(f"({name}: {len(anchors)} anchors, its level from {rt2['reach_level_from']})")
    if rt2["reach_level_from"] != want_from or abs(rt2["reach_level"] - want_level) > 1e-9 * want_level:
        failures.append(f"{name}: level {rt2['reach_level']} from {rt2['reach_level_from']}, "
                        f"want {want_level} from {want_from}")
    return rt2


if "discarded" in rt2 and "reach_discarded" not in rt2:
    check_retimed(json.loads(out)["cases"][0], "reach")
    print(f"(reach not checked: re-timing discarded on this machine: {rt2['discarded']})")
else:
    check_reach(json.loads(out)["cases"][0], "reach")
# The reach's level outside --retime-reach-range x the first pass's discards both
# passes, whatever the machine does (and the first pass's range takes any level).
out = subprocess.run(reach_args + ["--retime-level-range", "1,10000", "--retime-reach-range", "5000,10000"],
                     check=True, capture_output=True, text=True).stdout
rt3 = check_reach(json.loads(out)["cases"][0], "reach out of range")
if "reach_discarded" not in rt3 or rt3["reach_range"] != [50, 100]:
    failures.append(f"reach out of range: not discarded: {json.dumps(rt3)[:400]}")

for flag in ("--retime-level-range", "--retime-reach-range"):
    for value in ("80", "0,125", "125,80", "80,125,150", "80,x", "100,10001"):
        bad = subprocess.run(args[:9] + [flag, value, "--json"], capture_output=True, text=True)
        if bad.returncode == 0 or flag[2:] not in bad.stderr:
            failures.append(f"{flag} {value} was accepted: " + bad.stderr)

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

# --simulate: the search simulated on the file's records, cold (the file holds one
# shape: no transfer or log start), per seed; reproducible, as it looks every trial up.
sim_args = [tuneforge, "bench", "search", "--eval-db", db, "--splits", "0", "--simulate", "3",
            "--variant", "default", "--json"]
sims = [json.loads(subprocess.run(sim_args, check=True, capture_output=True, text=True).stdout)
        ["workloads"][0].get("simulated", []) for _ in range(2)]
sim = sims[0]
con = sqlite3.connect(db)
gflops = {}
for c, g in con.execute("SELECT r.config_json, CASE WHEN r.error_kind = 'none' AND r.median_cost > 0 THEN "
                        "w.flops / r.median_cost ELSE 0 END FROM records r JOIN workloads w ON w.id = r.workload_id"):
    gflops[c] = max(gflops.get(c, 0), g)
within = sum(g >= 0.95 * max(gflops.values()) for g in gflops.values())
if len(sim) != 1 or sim[0]["start"] != "cold" or len(sim[0]["trials_to_95"]) != 3:
    failures.append(f"--simulate 3: want one cold start with 3 seeds: {sim}")
elif (sim[0]["configs"] != len(gflops) or sim[0]["within_95"] != within
      or abs(sim[0]["random_expected"] - (len(gflops) + 1) / (within + 1)) > 1e-9
      or not all(1 <= t <= len(gflops) for t in sim[0]["trials_to_95"])
      or sim[0]["median"] != sorted(sim[0]["trials_to_95"])[1]):
    failures.append(f"--simulate 3: {sim[0]} against {len(gflops)} configs, {within} within 95%")
if sims[0] != sims[1]:
    failures.append(f"--simulate: two runs differ: {sims[0]} vs {sims[1]}")
bad = subprocess.run(sim_args[:8] + ["-1"], capture_output=True, text=True)
if bad.returncode == 0 or "simulate" not in bad.stderr:
    failures.append("--simulate -1 was accepted: " + bad.stderr)

# --bar-rank K: the bar is the K-th best config's number (the same runs, a lower bar).
ranked = sorted((g / 1e9 for g in gflops.values()), reverse=True)  # GFLOP/s
rank = min(3, len(ranked))
low = json.loads(subprocess.run(sim_args + ["--bar-rank", str(rank)], check=True, capture_output=True,
                                text=True).stdout)["workloads"][0].get("simulated", [])
low_within = sum(g >= 0.95 * ranked[rank - 1] for g in ranked)
if (len(low) != 1 or low[0]["bar_rank"] != rank or abs(low[0]["bar_gflops"] - ranked[rank - 1]) > 1e-6
        or abs(low[0]["best_gflops"] - ranked[0]) > 1e-6 or low[0]["within_95"] != low_within
        or (sim and any(t > u for t, u in zip(low[0]["trials_to_95"], sim[0]["trials_to_95"])))):
    failures.append(f"--bar-rank {rank}: {low} against rank {rank}'s {ranked[rank - 1]}, "
                    f"{low_within} within 95%, rank 1: {sim}")
bad = subprocess.run(sim_args + ["--bar-rank", "0"], capture_output=True, text=True)
if bad.returncode == 0 or "bar-rank" not in bad.stderr:
    failures.append("--bar-rank 0 was accepted: " + bad.stderr)
# A rank beyond a workload's configs is that workload's error (the others still run).
over = json.loads(subprocess.run(sim_args + ["--bar-rank", str(len(ranked) + 1)], check=True,
                                 capture_output=True, text=True).stdout)["workloads"][0].get("simulated", [])
if len(over) != 1 or "bar rank" not in over[0].get("error", ""):
    failures.append(f"--bar-rank {len(ranked) + 1} of {len(ranked)} configs: no error: {over}")
bad = subprocess.run(sim_args[:7] + ["--bar-rank", "2"], capture_output=True, text=True)
if bad.returncode == 0 or "--simulate" not in bad.stderr:
    failures.append("--bar-rank without --simulate was accepted: " + bad.stderr)

# The model+log runs' log model has the variant's options (live, not only --eval-db):
# GEMM log models are 6 deep by default, "log model depth8" forces 8 on every space.
pair_db = os.path.join(work, "pair.db")
if os.path.exists(pair_db):
    os.remove(pair_db)
pair_args = [tuneforge, "bench", "search", "--case", "matmul M=64 N=64 K=64;matmul M=32 N=96 K=48",
             "--seeds", "1", "--trials", "16", "--random-trials", "32", "--measurements", pair_db,
             "--json", "--plot", "", "--retime", "0"]
for variant, depth in (("default", 6), ("log model depth8", 8)):
    cases = json.loads(subprocess.run(pair_args + ["--variant", variant], check=True, capture_output=True,
                                      text=True).stdout)["cases"]
    depths = [c.get("log_model_max_depth") for c in cases]
    if depths != [depth, depth] or any(len(c["policies"].get("model+log", {}).get("curves", [])) != 1
                                       for c in cases):
        failures.append(f"--variant '{variant}': log model depths {depths} (want {depth} in both cases, "
                        "each with a model+log run)")

# --log FILE: one case runs warm alone, from a shared log's records of the other shapes
# (here pair.db's 32x96x48 configs, each once), read before the run measures anything:
# the log may be the measurement file itself, and the case's own shape is not in it.
con = sqlite3.connect(pair_db)
other_configs, own_configs = (con.execute(
    "SELECT COUNT(DISTINCT r.config_json) FROM records r JOIN workloads w ON r.workload_id = w.id "
    "WHERE w.task_text LIKE ?", (pattern,)).fetchone()[0]
    for pattern in ("matmul M=32 N=96 K=48%", "matmul M=64 N=64 K=64%"))
con.close()
log_args = [tuneforge, "bench", "search", "--case", "matmul M=64 N=64 K=64", "--seeds", "1",
            "--trials", "16", "--random-trials", "16", "--measurements", pair_db, "--json",
            "--plot", "", "--retime", "0"]
alone = json.loads(subprocess.run(log_args, check=True, capture_output=True, text=True).stdout)
if "model+log" in alone["cases"][0]["policies"]:
    failures.append("one case without --log ran warm (no other shape to start from)")
warm = json.loads(subprocess.run(log_args + ["--log", pair_db], check=True, capture_output=True,
                                 text=True).stdout)
case = warm["cases"][0]
if (warm.get("log") != pair_db or case["transfer_records"] != other_configs or other_configs < 32 or
        own_configs < 16 or
        any(len(case["policies"].get(p, {}).get("curves", [])) != 1 for p in ("model+transfer", "model+log"))):
    failures.append(f"--log: log {warm.get('log')!r}, {case['transfer_records']} transfer records "
                    f"(want the other shape's {other_configs} distinct configs), policies "
                    f"{sorted(case['policies'])}")
for log, why in ((os.path.join(work, "missing.db"), "no such database file"), (db, "holds no record of matmul")):
    bad = subprocess.run(log_args + ["--log", log], capture_output=True, text=True)
    if bad.returncode == 0 or "--log" not in bad.stderr or why.lower() not in bad.stderr.lower():
        failures.append(f"--log {log} was accepted or unclear: " + bad.stderr)
if os.path.exists(os.path.join(work, "missing.db")):
    failures.append("--log created the missing file")
# A case whose op the log holds in no other shape (a model's one dense layer beside its
# matmuls) runs cold alone; the other case still runs warm from the log.
mixed_args = list(log_args)
mixed_args[mixed_args.index("--case") + 1] = "matmul M=64 N=64 K=64;dense M=1 N=64 K=64 bias=1 relu=0"
mixed = subprocess.run(mixed_args + ["--log", pair_db], capture_output=True, text=True)
if mixed.returncode != 0:
    failures.append("--log with a case of an op the log lacks failed: " + mixed.stderr)
else:
    by_op = {c["task"].split()[0]: c for c in json.loads(mixed.stdout)["cases"]}
    if (sorted(by_op) != ["dense", "matmul"] or "model+log" not in by_op["matmul"]["policies"] or
            "model+log" in by_op["dense"]["policies"] or "no record of dense" not in mixed.stderr):
        failures.append("--log with a dense case beside matmul: policies "
                        f"{ {op: sorted(c['policies']) for op, c in by_op.items()} }, stderr {mixed.stderr!r}")

# --label-rounds R: every new config's label pools R interleaved measurements, so each
# record holds at least 3 samples per round (a measurement takes 3 to 7).
for rounds, lo, hi in ((1, 3, 7), (3, 9, 21)):
    label_db = os.path.join(work, f"labels{rounds}.db")
    if os.path.exists(label_db):
        os.remove(label_db)
    out = json.loads(subprocess.run(args[:7] + ["--trials", "8", "--random-trials", "8", "--retime", "0",
                                                "--measurements", label_db, "--label-rounds", str(rounds),
                                                "--json", "--plot", ""],
                                    check=True, capture_output=True, text=True).stdout)
    con = sqlite3.connect(label_db)
    counts = [len(json.loads(c)) for (c,) in
              con.execute("SELECT costs_json FROM records WHERE error_kind = 'none'")]
    medians_agree = all(abs(m - statistics.median(json.loads(c))) <= 1e-9 * m
                        for c, m in con.execute("SELECT costs_json, median_cost FROM records "
                                                "WHERE error_kind = 'none'"))
    con.close()
    if out.get("label_rounds") != rounds or not counts or min(counts) < lo or max(counts) > hi:
        failures.append(f"--label-rounds {rounds}: JSON {out.get('label_rounds')}, samples per record "
                        f"{sorted(set(counts))} (want {lo}..{hi})")
    if not medians_agree:
        failures.append(f"--label-rounds {rounds}: a record's cost is not the median of its samples")
for value in ("0", "21"):
    bad = subprocess.run(args[:9] + ["--label-rounds", value, "--json"], capture_output=True, text=True)
    if bad.returncode == 0 or "label-rounds" not in bad.stderr:
        failures.append(f"--label-rounds {value} was accepted: " + bad.stderr)

for f in failures:
    print("FAIL:", f)
print("ok" if not failures else f"{len(failures)} failure(s)")
sys.exit(1 if failures else 0)
