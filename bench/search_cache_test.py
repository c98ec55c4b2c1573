"""bench search with a measurement file: a second run with the same seeds measures
nothing new and every policy sees the first run's numbers; the random policy runs its
own budget; the best known (the bar of trials to 95%) is the best of the random runs
and does not move when another model variant measures new configs; bad budgets are
refused with a clear message.

usage: search_cache_test.py TUNEFORGE WORKDIR
"""
import json
import os
import subprocess
import sys

tuneforge, work = sys.argv[1], sys.argv[2]
os.makedirs(work, exist_ok=True)
db = os.path.join(work, "measurements.db")
if os.path.exists(db):
    os.remove(db)
args = [tuneforge, "bench", "search", "--case", "matmul M=64 N=64 K=64", "--seeds", "1",
        "--trials", "16", "--random-trials", "48", "--measurements", db, "--json", "--plot", ""]


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
if first["best_measured_gflops"] != every_best:
    failures.append(f"best measured {first['best_measured_gflops']} is not the runs' best {every_best}")
args.insert(-3, "--variant")
args.insert(-3, "no repair")
third = run()
if third["best_known_gflops"] != first["best_known_gflops"]:
    failures.append("another model variant moved the best known: "
                    f"{first['best_known_gflops']} -> {third['best_known_gflops']}")
for p in first["policies"].values():
    if "trials_to_95_of_best_measured" not in p:
        failures.append("no trials to 95% of the best measured")
        break

bad = subprocess.run(args[:9] + ["--random-trials", "8", "--json"], capture_output=True, text=True)
if bad.returncode == 0 or "random-trials" not in bad.stderr:
    failures.append("--random-trials below --trials was accepted: " + bad.stderr)

for f in failures:
    print("FAIL:", f)
print("ok" if not failures else f"{len(failures)} failure(s)")
sys.exit(1 if failures else 0)
