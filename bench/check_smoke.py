#!/usr/bin/env python3
"""Runs a bench subcommand at its smoke size and checks what its JSON means, not only
that it exited 0: the counts add up, percentiles are ordered, ratios are the ratios of
the figures they come from. Figures themselves are not asserted (a busy machine moves
them), except that bench search's cost model must rank held-out configs clearly better
than a coin; a report that is inconsistent with itself fails.

usage: check_smoke.py farm|db|model|product|search_model TUNEFORGE [bench arguments...]
"""
import json
import math
import subprocess
import sys


def fail(why):
    print("check_smoke: " + why, file=sys.stderr)
    sys.exit(1)


def check(cond, why):
    if not cond:
        fail(why)


def positive(report, *keys):
    for k in keys:
        v = report.get(k)
        check(isinstance(v, (int, float)) and math.isfinite(v) and v > 0, f"{k} is {v!r}, not a positive number")


def ordered(report, *keys):
    values = [report[k] for k in keys]
    check(values == sorted(values), "not ordered: " + ", ".join(f"{k}={report[k]}" for k in keys))


def check_farm(r, args):
    check(r["failed_jobs"] == 0, f"{r['failed_jobs']} failed jobs")
    trials = int(args[args.index("--measurements") + 1]) if "--measurements" in args else r["trials"]
    check(r["trials"] == trials, f"trials {r['trials']}, asked for {trials}")
    # Every measurement is a record; re-measured finalists add to the trials.
    check(r["records"] == r["measurements"], f"records {r['records']} != measurements {r['measurements']}")
    check(r["measurements"] >= r["trials"], f"measurements {r['measurements']} < trials {r['trials']}")
    check(r["leases"] >= r["measurements"], f"leases {r['leases']} < measurements {r['measurements']}")
    positive(r, "measurements_per_second", "wall_seconds", "server_cpu_seconds")
    ordered(r, "dispatch_overhead_p50_ms", "dispatch_overhead_p99_ms", "dispatch_overhead_max_ms")
    ordered(r, "lease_to_result_p50_ms", "lease_to_result_p99_ms")
    # A lease lasts at least the simulated measurement.
    check(r["lease_to_result_p50_ms"] >= r["sleep_ms"], "a lease shorter than the simulated measurement")
    if "--poll-dashboard" in args:
        check(r["dashboard_requests"] >= 3, f"{r['dashboard_requests']} dashboard requests (one poll is 3)")
        check(r["dashboard_failures"] == 0, f"{r['dashboard_failures']} dashboard requests failed")
        ordered(r, "dashboard_p50_ms", "dashboard_p99_ms")


def check_db(r, args):
    records = int(args[args.index("--records") + 1])
    check(r["records"] == records, f"records {r['records']}, asked for {records}")
    positive(r, "insert_records_per_second", "db_insert_records_per_second", "export_seconds", "import_seconds",
             "export_file_bytes", "db_file_bytes", "best_p50_us", "topk10_p50_us")
    ordered(r, "best_p50_us", "best_p99_us")
    ordered(r, "topk10_p50_us", "topk10_p99_us")
    # The insert loop includes Database::Insert: it cannot be faster than it.
    check(r["insert_records_per_second"] <= r["db_insert_records_per_second"] * 1.001,
          "the whole insert loop is faster than Database::Insert alone")
    check(abs(r["insert_records_per_second"] * r["insert_seconds"] - records) < 0.01 * records,
          "insert rate x time is not the record count")
    endpoints = {"/ (the page)", "/api/jobs", "/api/job (a job of 20,000 points)", "/api/agents",
                 "/api/log (random page)", "/api/log?op=matmul&target=...", "/api/record"}
    check(set(r["dashboard_ms"]) == endpoints, f"dashboard endpoints timed: {sorted(r['dashboard_ms'])}")
    for name, ms in r["dashboard_ms"].items():
        check(0 < ms["p50"] <= ms["p99"], f"{name}: p50 {ms['p50']} p99 {ms['p99']}")


def check_model(r, args):
    runs = int(args[args.index("--runs") + 1])
    threads = [int(t) for t in args[args.index("--threads") + 1].split(",")]
    check([x["threads"] for x in r["results"]] == threads, f"results for threads {[x['threads'] for x in r['results']]}")
    for x in r["results"]:
        engines = x["engines"]
        for name in ("untuned", "onnxruntime"):
            check(name in engines, f"no {name} engine at {x['threads']} threads")
        for name, e in engines.items():
            check(len(e["samples_ms"]) == runs, f"{name}: {len(e['samples_ms'])} samples, asked for {runs}")
            check(all(s > 0 for s in e["samples_ms"]), f"{name}: a sample is not positive")
            check(e["min_ms"] == min(e["samples_ms"]), f"{name}: min_ms is not the samples' minimum")
            ordered(e, "min_ms", "median_ms")
        ours = engines["tuned"] if "tuned" in engines else engines["untuned"]
        check(abs(x["ort_over_ours"] - engines["onnxruntime"]["median_ms"] / ours["median_ms"]) < 1e-6 * x["ort_over_ours"],
              "ort_over_ours is not onnxruntime's median over ours")
        check(x["kernels"] > 0 and x["default_tasks"] + x["tuned_tasks"] > 0, "no kernels or tasks")


def check_product(r, args):
    seeds = int(args[args.index("--seeds") + 1]) if "--seeds" in args else 3
    check(len(r["cases"]) > 0, "no case")
    for case in r["cases"]:
        runs = case["runs"]
        check(len(runs) == 2 * seeds, f"{case['task']}: {len(runs)} runs, expected {2 * seeds}")
        sums = {"model": 0.0, "random": 0.0}
        for run in runs:
            want = r["trials"] if run["policy"] == "model" else r["random_trials"]
            check(run["trials"] == want, f"{case['task']} {run['policy']}: {run['trials']} trials, expected {want}")
            check(run["trials_done"] >= 1, f"{case['task']} {run['policy']}: no trial done")
            check(run["best_config"].startswith("{"), f"{case['task']} {run['policy']}: no best config")
            positive(run, "job_gflops", "retimed_gflops", "seconds")
            sums[run["policy"]] += run["retimed_gflops"]
        ratio = sums["model"] / sums["random"]
        check(abs(case["model_over_random"] - ratio) <= 1e-9 * ratio,
              f"{case['task']}: model_over_random {case['model_over_random']} is not {ratio}")
        for policy in ("model", "random"):
            fraction = sums[policy] / seeds / r["fma_peak_gflops"]
            got = case[f"{policy}_peak_fraction"]
            check(abs(got - fraction) <= 1e-9 * fraction, f"{case['task']}: {policy}_peak_fraction {got} is not {fraction}")
        vendor = case["vendor"]
        check("error" in vendor or (vendor.get("name") and vendor.get("gflops", 0) > 0),
              f"{case['task']}: vendor has neither a figure nor an error: {vendor}")
    check(set(r["by_op"]) == {c["op"] for c in r["cases"]}, "by_op does not name the cases' operators")
    positive(r, "model_over_random", "model_over_random_job", "fma_peak_gflops")


# A cost model ranking held-out configs no better than a coin (pairwise accuracy 0.5)
# is broken; a working one ranks these cases' configs (scalar against vector code,
# packed against not) at 0.8-0.95.
MIN_PAIRWISE_ACCURACY = 0.65


def check_search_model(r, args):
    seeds = int(args[args.index("--seeds") + 1]) if "--seeds" in args else 3
    trials = int(args[args.index("--trials") + 1])
    check(len(r["cases"]) > 0, "no case")
    for case in r["cases"]:
        name = case["task"]
        positive(case, "best_known_gflops", "best_measured_gflops")
        check(set(case["policies"]) >= {"random", "model", "model+transfer", "model+log"},
              f"{name}: policies {sorted(case['policies'])}")
        for policy, p in case["policies"].items():
            check(len(p["curves"]) == seeds, f"{name} {policy}: {len(p['curves'])} curves for {seeds} seeds")
            for curve in p["curves"]:
                check(len(curve) == p["budget"], f"{name} {policy}: a curve of {len(curve)} for budget {p['budget']}")
                check(all(a <= b for a, b in zip(curve, curve[1:])), f"{name} {policy}: best-so-far curve falls")
                check(curve[-1] <= case["best_measured_gflops"] * (1 + 1e-9),
                      f"{name} {policy}: ends above the best measured")
        check(case["policies"]["model"]["budget"] == trials, f"{name}: model budget is not {trials}")
        model = case["model"]
        check(model["test"] >= 8, f"{name}: only {model['test']} held-out configs")
        accuracy = model["rank:pairwise"]["pairwise_accuracy"]
        check(accuracy >= MIN_PAIRWISE_ACCURACY,
              f"{name}: held-out pairwise accuracy {accuracy:.3f} < {MIN_PAIRWISE_ACCURACY} (a coin gets 0.5)")


def main():
    if len(sys.argv) < 3 or sys.argv[1] not in ("farm", "db", "model", "product", "search_model"):
        fail(__doc__.strip().splitlines()[-1])
    what, binary, args = sys.argv[1], sys.argv[2], sys.argv[3:]
    sub = {"product": ["search", "--product"], "search_model": ["search"]}.get(what, [what])
    cmd = [binary, "bench"] + sub + args + (["--json"] if "--json" not in args else [])
    p = subprocess.run(cmd, stdout=subprocess.PIPE, text=True)
    check(p.returncode == 0, f"{' '.join(cmd)} exited {p.returncode}")
    try:
        report = json.loads(p.stdout)
    except json.JSONDecodeError as e:
        fail(f"not JSON: {e}: {p.stdout[:200]!r}")
    {"farm": check_farm, "db": check_db, "model": check_model, "product": check_product,
     "search_model": check_search_model}[what](report, args)
    print(f"check_smoke: bench {what}: consistent")


if __name__ == "__main__":
    main()
