#!/usr/bin/env python3
"""Rebuild the results part of docs/experiments.md from docs/results/*.jsonl.

    python3 bench/report.py [--results DIR] [--out docs/experiments.md]
                            [--plots docs/experiments] [--scenarios bench/scenarios]

Reads only the JSON lines `kudus experiment` appends (one per finished run)
and the scenario files (for descriptions, seeds and caps), and writes, between
the markers <!-- report:begin --> and <!-- report:end --> of the output file:

- a "Targets" table: each target of issue 16, met / missed / not yet run;
- per scenario and optimizer, a table per model: time to 0.86 (median and
  min-max over seeds; 0.85 and 0.87 too), ratio to BSP, accuracy at equal
  wall time and at equal applied samples, final accuracy, staleness
  p50/p99/max, drops, wait fraction, barriers/s, regroups, regroup lag, CPU;
- per-seed paired ratios, with the rule: a model wins only when every paired
  ratio favours it (a run that missed the target counts as slower than the
  cap, so as a loss);
- per-worker applied share against speed share;
- plots (gnuplot, PNG) under docs/experiments/: accuracy against time (1 s
  rolling mean, median line and min-max band over seeds, per model) and a bar
  chart of wait fraction with per-worker applied shares.

Everything else in docs/experiments.md (setup, protocol, scenario format) is
hand-written and left alone.  Python standard library and gnuplot only.
"""
import argparse
import glob
import json
import math
import os
import shutil
import statistics
import subprocess
import sys
import tempfile

ORDER = ["equal", "two-slow", "six-slow", "shifting", "noisy", "one-very-slow", "wide", "slow-link"]
MODEL_ORDER = ["bsp", "asp", "ssp", "ssp10", "backup", "lsp", "alsp"]
BEGIN = "<!-- report:begin -->"
END = "<!-- report:end -->"
INF = math.inf
PRIMARY_OPT = "momentum"    # the protocol's optimizer; the targets use it


# ---------------------------------------------------------------- loading

def load_results(results_dir):
    """Scenario name -> list of runs; a key recorded twice keeps the last."""
    by_key = {}
    for path in sorted(glob.glob(os.path.join(results_dir, "*.jsonl"))):
        # Not experiment runs: the tuning sweep and the benchmarks' records.
        if os.path.basename(path) in ("tuning.jsonl", "netns-links.jsonl", "vs-ddp.jsonl"):
            continue
        for n, line in enumerate(open(path), 1):
            line = line.strip()
            if not line:
                continue
            try:
                run = json.loads(line)
                key = (run["scenario"], run["model"], run["optimizer"], run["seed"])
            except (ValueError, KeyError):
                print("report: %s line %d is not a run record; ignored" % (path, n), file=sys.stderr)
                continue
            by_key[key] = run
    out = {}
    for (scenario, _, _, _), run in by_key.items():
        out.setdefault(scenario, []).append(run)
    return out


def load_scenarios(directory):
    out = {}
    for path in sorted(glob.glob(os.path.join(directory, "*.json"))):
        try:
            s = json.load(open(path))
            out[s["name"]] = s
        except (ValueError, KeyError):
            print("report: cannot read %s; skipped" % path, file=sys.stderr)
    return out


def model_key(name):
    return (MODEL_ORDER.index(name) if name in MODEL_ORDER else len(MODEL_ORDER), name)


# ---------------------------------------------------------------- figures

def t_to(run, target):
    """Time to target, INF when missed (or past the cap)."""
    v = (run.get("time_to") or {}).get("%.2f" % target)
    return INF if v is None else v


def median(xs):
    xs = [x for x in xs if x is not None and not (isinstance(x, float) and math.isnan(x))]
    return statistics.median(xs) if xs else None


def fmt_time(x, cap):
    if x is None:
        return "-"
    return "> %g" % cap if x == INF else "%.1f" % x


def fmt_num(x, fmt="%.3f"):
    return "-" if x is None else fmt % x


def fmt_ratio(r):
    """A paired ratio (value, kind): kind '=' exact, '<' or '>' a bound (one
    run missed the target, so its time counts as the cap), '?' both missed."""
    if r is None or r[1] == "?":
        return "both missed"
    value, kind = r
    return ("%s%.2f" % ("" if kind == "=" else kind, value))


def at_time(curve, t):
    """Rolling accuracy at time t (step interpolation; held after the end)."""
    best = None
    for sec, _, acc in curve:
        if sec <= t and acc is not None:
            best = acc
    return best


def at_samples(curve, s):
    best = None
    for _, samples, acc in curve:
        if samples is not None and samples <= s and acc is not None:
            best = acc
    return best


def paired(runs_a, runs_b, target, cap):
    """Per seed: (seed, (ratio, kind)) of time a / time b.  A missed run
    counts as the cap: kind '>' when a missed (a is slower than that), '<'
    when only b missed, '?' when both did."""
    b_by_seed = {r["seed"]: r for r in runs_b}
    out = []
    for ra in sorted(runs_a, key=lambda r: r["seed"]):
        rb = b_by_seed.get(ra["seed"])
        if rb is None:
            continue
        ta, tb = t_to(ra, target), t_to(rb, target)
        if ta == INF and tb == INF:
            r = (1.0, "?")
        elif ta == INF:
            r = (cap / tb, ">")
        elif tb == INF:
            r = (ta / cap, "<")
        else:
            r = (ta / tb, "=")
        out.append((ra["seed"], r))
    return out


def ratio_median(pairs):
    """The median paired ratio, as (value, kind).  With an even count it is
    the mean of the two middle ratios when both are exact, else the larger
    one (the cautious choice).  None when there are no pairs."""
    if not pairs:
        return None
    rs = sorted((r for _, r in pairs), key=lambda r: INF if r[1] == "?" else r[0])
    k = len(rs) // 2
    if len(rs) % 2:
        return rs[k]
    lo, hi = rs[k - 1], rs[k]
    if lo[1] == hi[1] == "=":
        return ((lo[0] + hi[0]) / 2, "=")
    return hi


def at_most(r, limit):
    """True when a paired ratio is surely at most limit."""
    return r is not None and r[1] in ("=", "<") and r[0] <= limit


def favours(r):
    return at_most(r, 1.0) and not (r[1] == "=" and r[0] == 1.0)


def wins_every_seed(pairs):
    return bool(pairs) and all(favours(r) for _, r in pairs)


# ---------------------------------------------------------------- one scenario

class Group:
    """The runs of one scenario with one optimizer."""

    def __init__(self, name, optimizer, runs, meta):
        self.name, self.optimizer, self.runs, self.meta = name, optimizer, runs, meta
        self.models = sorted({r["model"] for r in runs}, key=model_key)
        self.cap = runs[0].get("cap_seconds") or meta.get("cap_seconds", 180)
        self.target = runs[0].get("target") or meta.get("target", 0.86)
        self.targets = sorted({float(k) for r in runs for k in (r.get("time_to") or {})})
        ends = [r["curve"][-1][0] for r in runs if r.get("curve")]
        self.t_eq = min(ends) if ends else None
        last_samples = [max((p[1] for p in r["curve"] if p[1] is not None), default=None)
                        for r in runs if r.get("curve")]
        last_samples = [s for s in last_samples if s is not None]
        self.s_eq = min(last_samples) if last_samples else None

    def of(self, model):
        return [r for r in self.runs if r["model"] == model]

    def acc_eq_time(self, model):
        if self.t_eq is None:
            return None
        return median([at_time(r["curve"], self.t_eq) for r in self.of(model) if r.get("curve")])

    def acc_eq_samples(self, model):
        if self.s_eq is None:
            return None
        return median([at_samples(r["curve"], self.s_eq) for r in self.of(model) if r.get("curve")])

    def median_time(self, model, target=None):
        ts = [t_to(r, target or self.target) for r in self.of(model)]
        return statistics.median(ts) if ts else None


def model_table(g):
    lines = []
    tcols = [t for t in g.targets if abs(t - g.target) > 1e-9]
    head = ("| model | runs | time to %.2f (s): median (min–max) | vs BSP (median of paired) | %s"
            "acc @ %s s | acc @ %s samples | final acc | staleness p50/p99/max | dropped | wait | "
            "barriers/s | regroups | regroup lag med/max (s) | CPU | iteration check |"
            % (g.target, "".join("time to %.2f | " % t for t in tcols),
               fmt_num(g.t_eq, "%.1f"), "-" if g.s_eq is None else "{:,.0f}".format(g.s_eq)))
    lines.append(head)
    lines.append("|" + "---|" * (head.count("|") - 1))
    bsp = g.of("bsp")
    for m in g.models:
        runs = g.of(m)
        ts = [t_to(r, g.target) for r in runs]
        med = statistics.median(ts)
        rng = "%s–%s" % (fmt_time(min(ts), g.cap), fmt_time(max(ts), g.cap))
        vs = "-"
        if bsp and m != "bsp":
            vs = fmt_ratio(ratio_median(paired(runs, bsp, g.target, g.cap)))
        elif m == "bsp":
            vs = "1.00"
        extra = "".join("%s | " % fmt_time(statistics.median([t_to(r, t) for r in runs]), g.cap)
                        for t in tcols)
        st = "%s/%s/%s" % tuple(fmt_num(median([r.get(k) for r in runs]), "%.0f")
                                for k in ("staleness_p50", "staleness_p99", "staleness_max"))
        lag_med = median([(r.get("regroup_lag") or {}).get("median") for r in runs])
        lag_max = median([(r.get("regroup_lag") or {}).get("max") for r in runs])
        lag = "-" if lag_med is None and lag_max is None else "%s/%s" % (fmt_num(lag_med, "%.2f"),
                                                                        fmt_num(lag_max, "%.2f"))
        checks = [r.get("iteration_check") for r in runs if r.get("iteration_check")]
        if checks:
            ok = sum(1 for c in checks if c.get("ok"))
            ic = "%s× (%d/%d OK)" % (fmt_num(median([c.get("ratio") for c in checks]), "%.2f"),
                                     ok, len(checks))
        else:
            ic = "-"
        lines.append("| %s | %d | %s (%s) | %s | %s%s | %s | %s | %s | %s | %s | %s | %s | %s | %s | %s |" % (
            m, len(runs), fmt_time(med, g.cap), rng, vs, extra,
            fmt_num(g.acc_eq_time(m), "%.4f"), fmt_num(g.acc_eq_samples(m), "%.4f"),
            fmt_num(median([r.get("final_accuracy") for r in runs]), "%.4f"), st,
            fmt_num(median([r.get("dropped") for r in runs]), "%.0f"),
            fmt_num(median([r.get("wait_fraction") for r in runs]), "%.3f"),
            fmt_num(median([r.get("barriers_per_second") for r in runs]), "%.1f"),
            fmt_num(median([r.get("regroups") for r in runs]), "%.0f"), lag,
            fmt_num(median([r.get("cpu_fraction") for r in runs]), "%.2f"), ic))
    return lines


def comparisons(name):
    """(model, reference) pairs whose per-seed ratios a scenario reports."""
    extra = {"two-slow": [("lsp", "asp")], "six-slow": [("alsp", "lsp")],
             "shifting": [("alsp", "lsp"), ("alsp", "ssp")], "wide": [("lsp", "asp")],
             "slow-link": [("lsp", "asp"), ("alsp", "lsp")]}
    return extra.get(name, [])


def seed_lines(g):
    lines = []
    refs = [("bsp", None)] + [(ref, m) for m, ref in comparisons(g.name)]
    for ref, only in refs:
        ref_runs = g.of(ref)
        if not ref_runs:
            continue
        for m in g.models:
            if m == ref or (only and m != only):
                continue
            pairs = paired(g.of(m), ref_runs, g.target, g.cap)
            if not pairs:
                continue
            verdict = "**wins on every seed**" if wins_every_seed(pairs) else (
                "wins on no seed" if not any(favours(r) for _, r in pairs) else "mixed")
            lines.append("- %s / %s: %s — %s" % (m, ref, ", ".join(
                "seed %s %s" % (s, fmt_ratio(r)) for s, r in pairs), verdict))
    return lines


def share_lines(g):
    """Per-worker applied share against speed share, by model (medians over seeds)."""
    lines = ["| model | applied share min / median / max | slowest worker: applied vs speed share | "
             "rows applied once per epoch |", "|---|---|---|---|"]
    for m in g.models:
        shares, slow, epochs_ok, epochs = [], [], 0, 0
        for r in g.of(m):
            pw = [w for w in r.get("per_worker") or [] if w.get("applied_share") is not None]
            shares += [w["applied_share"] for w in pw]
            with_speed = [w for w in pw if w.get("speed_share") is not None]
            if with_speed:
                w = min(with_speed, key=lambda w: w["speed_share"])
                slow.append((w["applied_share"], w["speed_share"]))
            rows = r.get("epoch_row_share") or []
            epochs += 1
            epochs_ok += bool(rows) and all(abs(x - 1) < 1e-9 for x in rows)
        if not shares:
            continue
        sl = "-"
        if slow:
            a, s = median([x[0] for x in slow]), median([x[1] for x in slow])
            sl = "%.4f vs %.4f (%s)" % (a, s, "%.2f×" % (a / s) if s else "-")
        lines.append("| %s | %.4f / %.4f / %.4f | %s | %d of %d runs |" % (
            m, min(shares), statistics.median(shares), max(shares), sl, epochs_ok, epochs))
    return lines


# ---------------------------------------------------------------- targets

def target_rows(groups, scenarios):
    """One row per target of issue 16: (scenario, target, measured, status)."""
    rows = []

    def group(name):
        return groups.get((name, PRIMARY_OPT))

    def need(g, *models):
        return g is not None and all(g.of(m) for m in models)

    def not_run(g, *models):
        if g is None:
            return "not yet run"
        return "not yet run (no %s runs yet)" % ", ".join(m.upper() for m in models if not g.of(m))

    def ratio_check(g, a, b, limit):
        pairs = paired(g.of(a), g.of(b), g.target, g.cap)
        r = ratio_median(pairs)
        ok = at_most(r, limit)
        return ok, "%s/%s median paired ratio %s (per seed: %s)%s" % (
            a.upper(), b.upper(), fmt_ratio(r), ", ".join(fmt_ratio(x) for _, x in pairs),
            "; wins on every seed" if wins_every_seed(pairs) else "")

    def status(ok_list, g, models):
        seeds = len(scenarios.get(g.name, {}).get("seeds", [])) if g else 0
        have = min(len(g.of(m)) for m in models)
        partial = "" if not seeds or have >= seeds else " (%d of %d seeds)" % (have, seeds)
        return ("met" if all(ok_list) else "missed") + partial

    g = group("equal")
    if need(g, "bsp", "lsp", "alsp"):
        oks, parts = [], []
        for m in ("lsp", "alsp"):
            ok, text = ratio_check(g, m, "bsp", 1.05)
            oks.append(ok)
            parts.append(text)
            a, b = g.acc_eq_samples(m), g.acc_eq_samples("bsp")
            ok2 = a is not None and b is not None and abs(a - b) <= 0.003
            oks.append(ok2)
            parts.append("%s acc @ equal samples %s vs BSP %s" % (m.upper(), fmt_num(a, "%.4f"),
                                                                   fmt_num(b, "%.4f")))
        rows.append(("equal", "LSP and ALSP ≤ 1.05× BSP's time; accuracy at equal samples within 0.3 "
                     "points of BSP", "; ".join(parts), status(oks, g, ("bsp", "lsp", "alsp"))))
    else:
        rows.append(("equal", "LSP and ALSP ≤ 1.05× BSP's time; accuracy at equal samples within 0.3 "
                     "points of BSP", "-", not_run(g, "bsp", "lsp", "alsp")))

    g = group("two-slow")
    text = "LSP ≤ 0.45× BSP and ≤ 1.0× ASP"
    if need(g, "bsp", "asp", "lsp"):
        ok1, t1 = ratio_check(g, "lsp", "bsp", 0.45)
        ok2, t2 = ratio_check(g, "lsp", "asp", 1.0)
        rows.append(("two-slow", text, t1 + "; " + t2, status([ok1, ok2], g, ("bsp", "asp", "lsp"))))
    else:
        rows.append(("two-slow", text, "-", not_run(g, "bsp", "asp", "lsp")))

    g = group("six-slow")
    text = "ALSP ≤ 0.6× LSP and ≤ 0.5× BSP"
    if need(g, "bsp", "lsp", "alsp"):
        ok1, t1 = ratio_check(g, "alsp", "lsp", 0.6)
        ok2, t2 = ratio_check(g, "alsp", "bsp", 0.5)
        rows.append(("six-slow", text, t1 + "; " + t2, status([ok1, ok2], g, ("bsp", "lsp", "alsp"))))
    else:
        rows.append(("six-slow", text, "-", not_run(g, "bsp", "lsp", "alsp")))

    g = group("shifting")
    text = "ALSP ≤ 0.85× the better of LSP and SSP (≥ 3 speed changes before the target)"
    if need(g, "lsp", "ssp", "alsp"):
        better = min(("lsp", "ssp"), key=lambda m: g.median_time(m))
        ok, t = ratio_check(g, "alsp", better, 0.85)
        changes = [sum(1 for c in r.get("speed_changes") or [] if 0 < c <= t_to(r, g.target))
                   for r in g.of("alsp")]
        pre = bool(changes) and min(changes) >= 3
        t += "; better of LSP/SSP is %s; speed changes before ALSP's target: %s" % (
            better.upper(), ", ".join(str(c) for c in changes) or "-")
        rows.append(("shifting", text, t, status([ok, pre], g, ("lsp", "ssp", "alsp"))
                     + ("" if pre else " (fewer than 3 changes before the target)")))
    else:
        rows.append(("shifting", text, "-", not_run(g, "lsp", "ssp", "alsp")))

    g = group("noisy")
    text = "LSP ≤ 0.7× BSP; SSP as it comes"
    if need(g, "bsp", "lsp"):
        ok, t = ratio_check(g, "lsp", "bsp", 0.7)
        if g.of("ssp"):
            t += "; SSP/BSP median paired ratio %s" % fmt_ratio(ratio_median(paired(g.of("ssp"), g.of("bsp"),
                                                                                   g.target, g.cap)))
        rows.append(("noisy", text, t, status([ok], g, ("bsp", "lsp"))))
    else:
        rows.append(("noisy", text, "-", not_run(g, "bsp", "lsp")))

    g = group("one-very-slow")
    text = "every row applied once per epoch; the slow worker's applied share = its speed share ±20 % (LSP, ALSP)"
    if need(g, "lsp", "alsp"):
        oks, parts = [], []
        all_runs = g.runs
        rows_ok = all((r.get("epoch_row_share") or []) and all(abs(x - 1) < 1e-9 for x in r["epoch_row_share"])
                      for r in all_runs)
        oks.append(rows_ok)
        parts.append("epoch row share 1.0 in %d of %d runs" % (
            sum(1 for r in all_runs if (r.get("epoch_row_share") or [])
                and all(abs(x - 1) < 1e-9 for x in r["epoch_row_share"])), len(all_runs)))
        for m in ("lsp", "alsp"):
            rel = []
            for r in g.of(m):
                pw = [w for w in r.get("per_worker") or [] if w.get("speed_share") and
                      w.get("applied_share") is not None]
                if pw:
                    w = min(pw, key=lambda w: w["speed_share"])
                    rel.append(w["applied_share"] / w["speed_share"])
            ok = bool(rel) and all(abs(x - 1) <= 0.2 for x in rel)
            oks.append(ok)
            parts.append("%s slow worker applied/speed share: %s" % (
                m.upper(), ", ".join("%.2f" % x for x in rel) or "-"))
        rows.append(("one-very-slow", text, "; ".join(parts), status(oks, g, ("lsp", "alsp"))))
    else:
        rows.append(("one-very-slow", text, "-", not_run(g, "lsp", "alsp")))

    g = group("wide")
    text = "LSP's accuracy at equal samples ≥ ASP + 1 point, and LSP's time ≤ 0.8× ASP's"
    if need(g, "asp", "lsp"):
        a, b = g.acc_eq_samples("lsp"), g.acc_eq_samples("asp")
        ok1 = a is not None and b is not None and a >= b + 0.01
        ok2, t2 = ratio_check(g, "lsp", "asp", 0.8)
        rows.append(("wide", text, "LSP %s vs ASP %s at equal samples; %s" % (
            fmt_num(a, "%.4f"), fmt_num(b, "%.4f"), t2), status([ok1, ok2], g, ("asp", "lsp"))))
    else:
        rows.append(("wide", text, "-", not_run(g, "asp", "lsp")))
    return rows


# ---------------------------------------------------------------- plots

def gnuplot(script):
    if not shutil.which("gnuplot"):
        return False
    r = subprocess.run(["gnuplot"], input=script, text=True, capture_output=True)
    if r.returncode != 0:
        print("report: gnuplot failed: %s" % r.stderr.strip()[:500], file=sys.stderr)
    return r.returncode == 0


def plot_accuracy(g, tmp, png):
    end = max(r["curve"][-1][0] for r in g.runs if r.get("curve"))
    steps = 300
    grid = [end * i / steps for i in range(steps + 1)]
    series = []
    for i, m in enumerate(g.models):
        data = os.path.join(tmp, "%s-%s-%s.dat" % (g.name, g.optimizer, m))
        with open(data, "w") as f:
            for t in grid:
                vals = [at_time(r["curve"], t) for r in g.of(m) if r.get("curve")]
                vals = [v for v in vals if v is not None]
                if vals:
                    f.write("%.3f %.4f %.4f %.4f\n" % (t, statistics.median(vals), min(vals), max(vals)))
        series.append((m, data, i + 1))
    plots = []
    for m, data, lc in series:
        plots.append("'%s' using 1:3:4 with filledcurves fs transparent solid 0.15 noborder lc %d notitle"
                     % (data, lc))
    for m, data, lc in series:
        plots.append("'%s' using 1:2 with lines lw 2 lc %d title '%s'" % (data, lc, m))
    targets = "".join("set arrow from graph 0, first %g to graph 1, first %g nohead dt 3 lc rgb 'gray'\n"
                      % (t, t) for t in g.targets)
    script = ("set terminal pngcairo size 960,560\nset output '%s'\n"
              "set title 'Kudus %s (%s): test accuracy, 1 s rolling mean; median and min-max over seeds'\n"
              "set xlabel 'seconds of training'\nset ylabel 'test accuracy'\nset yrange [0.7:0.9]\n"
              "set key bottom right\nset grid\n%splot %s\n"
              % (png, g.name, g.optimizer, targets, ", ".join(plots)))
    return gnuplot(script)


def plot_shares(g, tmp, png):
    wait = os.path.join(tmp, "%s-%s-wait.dat" % (g.name, g.optimizer))
    with open(wait, "w") as f:
        for i, m in enumerate(g.models):
            w = median([r.get("wait_fraction") for r in g.of(m)])
            f.write("%d %s %.4f\n" % (i, m, w if w is not None else 0))
    # Applied share by worker, workers sorted by speed share (slowest right),
    # median over seeds by position.
    share_files = []
    speed_file = os.path.join(tmp, "%s-%s-speed.dat" % (g.name, g.optimizer))
    speed_cols = None
    for i, m in enumerate(g.models):
        cols, speeds = [], []
        for r in g.of(m):
            pw = [w for w in r.get("per_worker") or [] if w.get("applied_share") is not None]
            pw.sort(key=lambda w: (-(w.get("speed_share") or 0), w.get("rank", 0)))
            cols.append([w["applied_share"] for w in pw])
            speeds.append([w.get("speed_share") or 0 for w in pw])
        n = min((len(c) for c in cols), default=0)
        if n == 0:
            continue
        path = os.path.join(tmp, "%s-%s-%s-share.dat" % (g.name, g.optimizer, m))
        with open(path, "w") as f:
            for k in range(n):
                f.write("%d %.5f\n" % (k, statistics.median(c[k] for c in cols)))
        share_files.append((m, path, i + 1))
        if speed_cols is None:
            speed_cols = [statistics.median(s[k] for s in speeds) for k in range(n)]
    if speed_cols:
        with open(speed_file, "w") as f:
            for k, v in enumerate(speed_cols):
                f.write("%d %.5f\n" % (k, v))
    right = ", ".join("'%s' using 1:2 with linespoints lw 2 lc %d title '%s'" % (p, lc, m)
                      for m, p, lc in share_files)
    if speed_cols:
        right += ", '%s' using 1:2 with lines dt 2 lw 2 lc rgb 'black' title 'speed share'" % speed_file
    script = ("set terminal pngcairo size 1100,460\nset output '%s'\nset multiplot layout 1,2 title "
              "'Kudus %s (%s): medians over seeds'\n"
              "set style fill solid 0.6\nset boxwidth 0.7\nset grid ytics\nset yrange [0:*]\n"
              "set title 'wait fraction'\nplot '%s' using 1:3:xtic(2) with boxes lc rgb '#4477aa' notitle\n"
              "set title 'applied share per worker (fastest left, slowest right)'\nset xlabel 'worker'\n"
              "set key bottom left\nplot %s\nunset multiplot\n"
              % (png, g.name, g.optimizer, wait, right or "0 notitle"))
    return gnuplot(script)


# ---------------------------------------------------------------- the document

def tuning_lines(results_dir):
    path = os.path.join(results_dir, "tuning.jsonl")
    if not os.path.exists(path):
        return []
    rows = {}
    for line in open(path):
        if line.strip():
            try:
                r = json.loads(line)
            except ValueError:
                continue
            base = r["model"].rsplit("-lr", 1)[0]
            rows.setdefault(base, []).append(r)
    out = ["### Learning-rate tuning (`equal`, seed 100)", "",
           "| model | lr: time to 0.86 (s) / final accuracy |", "|---|---|"]
    for base in sorted(rows, key=model_key):
        cells = []
        for r in sorted(rows[base], key=lambda r: r["lr"]):
            t = (r.get("time_to") or {}).get("0.86")
            cells.append("%g: %s / %s" % (r["lr"], "> %g" % r.get("cap_seconds", 180) if t is None
                                          else "%.1f" % t, fmt_num(r.get("final_accuracy"), "%.4f")))
        out.append("| %s | %s |" % (base, "; ".join(cells)))
    return out + [""]


def build(args):
    results = load_results(args.results)
    scenarios = load_scenarios(args.scenarios)
    names = [n for n in ORDER if n in results or n in scenarios]
    names += sorted(n for n in set(results) | set(scenarios) if n not in names)
    groups = {}
    for name, runs in results.items():
        for opt in sorted({r["optimizer"] for r in runs}):
            sub = [r for r in runs if r["optimizer"] == opt]
            groups[(name, opt)] = Group(name, opt, sub, scenarios.get(name, {}))
    os.makedirs(args.plots, exist_ok=True)
    rel_plots = os.path.relpath(args.plots, os.path.dirname(os.path.abspath(args.out)))
    out = [BEGIN, "",
           "<!-- Generated by bench/report.py from docs/results/*.jsonl; edits here are overwritten. -->",
           "", "## Targets", "",
           "Rule: a ratio is the median over seeds of the paired ratio (same seed, same speeds) of the "
           "times to 0.86. A run that missed 0.86 within the cap counts as taking the cap, which makes "
           "its ratios bounds (\">2.10\": slower than that; \"<0.30\": faster than that); a target is met "
           "only when the median is surely within it. A model *wins* only when every paired ratio favours it. \"Equal samples\" is the smallest number of "
           "applied samples any run of the scenario reached; \"equal time\" the earliest end of a run.",
           "", "| scenario | target | measured | status |", "|---|---|---|---|"]
    for sc, target, measured, st in target_rows(groups, scenarios):
        out.append("| %s | %s | %s | **%s** |" % (sc, target, measured, st))
    out += ["", "## Results", ""]
    out += tuning_lines(args.results)
    tmp = tempfile.mkdtemp(prefix="kudus-report-")
    try:
        for name in names:
            meta = scenarios.get(name, {})
            out += ["### %s" % name, ""]
            if meta.get("description"):
                out += [meta["description"], ""]
            opts = sorted({o for (n, o) in groups if n == name}, key=lambda o: (o != PRIMARY_OPT, o))
            if not opts:
                out += ["Not yet run.", ""]
                continue
            for opt in opts:
                g = groups[(name, opt)]
                seeds = sorted({r["seed"] for r in g.runs})
                out += ["**Optimizer %s**, seeds %s, cap %g s, %d runs." % (
                    opt, ", ".join(str(s) for s in seeds), g.cap, len(g.runs)), ""]
                out += model_table(g) + [""]
                sl = seed_lines(g)
                if sl:
                    out += ["Per-seed paired ratios of the time to %.2f:" % g.target, ""] + sl + [""]
                out += share_lines(g) + [""]
                stem = "%s-%s" % (name, opt) if opt != PRIMARY_OPT else name
                acc_png = os.path.join(args.plots, stem + "-accuracy.png")
                shares_png = os.path.join(args.plots, stem + "-shares.png")
                if plot_accuracy(g, tmp, acc_png):
                    out += ["![%s accuracy](%s/%s)" % (stem, rel_plots, os.path.basename(acc_png)), ""]
                if plot_shares(g, tmp, shares_png):
                    out += ["![%s wait and shares](%s/%s)" % (stem, rel_plots, os.path.basename(shares_png)), ""]
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    out.append(END)
    block = "\n".join(out) + "\n"
    doc = open(args.out).read() if os.path.exists(args.out) else ""
    # The markers count only on lines of their own, so prose may name them.
    lines = doc.split("\n")
    try:
        b = lines.index(BEGIN)
        e = lines.index(END, b + 1)
        doc = "\n".join(lines[:b]) + ("\n" if b else "") + block.rstrip("\n") + "\n" + "\n".join(lines[e + 1:])
    except ValueError:
        doc = doc.rstrip("\n") + "\n\n" + block
    with open(args.out + ".tmp", "w") as f:
        f.write(doc)
    os.replace(args.out + ".tmp", args.out)
    print("report: %d scenario(s) with results, %d runs; wrote %s and plots in %s" % (
        len(results), sum(len(v) for v in results.values()), args.out, args.plots))


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--results", default="docs/results", help="directory of SCENARIO.jsonl files")
    p.add_argument("--out", default="docs/experiments.md", help="document to update between the markers")
    p.add_argument("--plots", default="docs/experiments", help="directory for the PNG plots")
    p.add_argument("--scenarios", default="bench/scenarios", help="scenario files (descriptions, seeds)")
    build(p.parse_args())


if __name__ == "__main__":
    main()
