#!/usr/bin/env python3
"""Rebuild the results part of docs/experiments.md from docs/results/*.jsonl.

    python3 bench/report.py [--results DIR] [--out docs/experiments.md]
                            [--plots docs/experiments] [--scenarios bench/scenarios]

Reads only the JSON lines `kudus experiment` appends (one per finished run)
and the scenario files (for descriptions, seeds and caps), and writes, between
the markers <!-- report:begin --> and <!-- report:end --> of the output file:

- "Targets" tables: the targets of issue 32, one table per sweep from the
  second on (newest first), each judged on that sweep's runs only, then those
  of issue 16, judged on the first sweep's; each target met / missed / not
  yet run;
- per scenario, the newest sweep first, and per optimizer, a table per
  model: time to 0.86 (median and min-max over seeds; 0.85 and 0.87 too),
  ratio to BSP, accuracy at equal wall time and at equal applied samples,
  final accuracy, staleness p50/p99/max, drops, wait fraction, barriers/s,
  early releases (when recorded), regroups, regroup lag, CPU; for `auto`
  runs, the model each ended as and its switches;
- per-seed paired ratios, with the rule: a model wins only when every paired
  ratio favours it (a run that missed the target counts as slower than the
  cap, so as a loss);
- per-worker applied share against speed share;
- a scenario's sweeps side by side: runs, median time and median paired
  ratio to BSP of each model in each sweep;
- plots (gnuplot, PNG) under docs/experiments/, drawn from the newest sweep
  with runs of the scenario and optimizer: accuracy against time (1 s
  rolling mean, median line and min-max band over seeds, per model) and a bar
  chart of wait fraction with per-worker applied shares.

Sweeps.  A record's identity is (scenario, sweep, model, optimizer, seed); a
record without "sweep" belongs to sweep "1".  Runs of different sweeps never
replace each other, and paired ratios are only taken within one sweep (same
seed, same sweep): a sweep is a set of frozen rules and defaults.

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
MODEL_ORDER = ["bsp", "asp", "ssp", "ssp10", "backup", "lsp", "alsp", "auto"]
BEGIN = "<!-- report:begin -->"
END = "<!-- report:end -->"
INF = math.inf
PRIMARY_OPT = "momentum"    # the protocol's optimizer; the targets use it
FIRST_SWEEP = "1"           # issue 16's runs: every record without "sweep"
SECOND_SWEEP = "2"          # issue 32's runs, on build eb0c9a4
THIRD_SWEEP = "3"           # issue 32's protocol again, on today's defaults
# Sweeps that run one protocol (models, seeds): a scenario file's plan holds
# for each of them, whichever one the file names.
SAME_PROTOCOL = (SECOND_SWEEP, THIRD_SWEEP)
ADAPTIVE = "auto"           # the model that picks BSP, LSP or ALSP itself


# ---------------------------------------------------------------- loading

def sweep_of(run):
    """The sweep a record belongs to, as a string; "1" when it names none."""
    s = run.get("sweep")
    return FIRST_SWEEP if s is None else str(s)


def sweep_key(s):
    """Sort key of sweep names: numbers in order, then any other name."""
    try:
        return (0, int(s), s)
    except ValueError:
        return (1, 0, s)


def sweep_title(s):
    names = {FIRST_SWEEP: "First sweep", SECOND_SWEEP: "Second sweep", THIRD_SWEEP: "Third sweep"}
    return "%s (sweep %s)" % (names[s], s) if s in names else "Sweep %s" % s


def planned_for(meta, sweep):
    """True when a scenario file's plan (seeds, models) is that of sweep."""
    planned = str(meta.get("sweep", FIRST_SWEEP))
    return planned == sweep or (planned in SAME_PROTOCOL and sweep in SAME_PROTOCOL)


def load_results(results_dir):
    """Scenario name -> list of runs.  A run's key is (scenario, sweep, model,
    optimizer, seed); a key recorded twice keeps the last."""
    by_key = {}
    for path in sorted(glob.glob(os.path.join(results_dir, "*.jsonl"))):
        # Not experiment runs: the tuning sweep and the benchmarks' records.
        if os.path.basename(path) in ("tuning.jsonl", "netns-links.jsonl", "vs-ddp.jsonl"):
            continue
        other = 0
        for n, line in enumerate(open(path), 1):
            line = line.strip()
            if not line:
                continue
            try:
                run = json.loads(line)
            except ValueError:
                run = None
            # A benchmark's record (no "scenario") is counted, not named:
            # several results files hold nothing but those.
            if isinstance(run, dict) and "scenario" not in run:
                other += 1
                continue
            try:
                key = (run["scenario"], sweep_of(run), run["model"], run["optimizer"], run["seed"])
            except (KeyError, TypeError):
                print("report: %s line %d is not a run record; ignored" % (path, n), file=sys.stderr)
                continue
            by_key[key] = run
        if other:
            print("report: %s: %d line(s) without \"scenario\" (not experiment runs); ignored"
                  % (path, other), file=sys.stderr)
    out = {}
    for (scenario, _, _, _, _), run in by_key.items():
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


def fmt_ratio(r, digits=2):
    """A paired ratio (value, kind): kind '=' exact, '<' or '>' a bound (one
    run missed the target, so its time counts as the cap), '?' both missed."""
    if r is None or r[1] == "?":
        return "both missed"
    value, kind = r
    return ("%s%.*f" % ("" if kind == "=" else kind, digits, value))


def fmt_against(r, limit):
    """fmt_ratio, with a third decimal when two would show the limit itself."""
    close = r is not None and r[1] != "?" and "%.2f" % r[0] == "%.2f" % limit
    return fmt_ratio(r, 3 if close else 2)


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


def seed_times(runs, target):
    """Seed -> time to target (INF when missed)."""
    return {r["seed"]: t_to(r, target) for r in runs}


def paired(runs_a, runs_b, target, cap):
    """Per seed: (seed, (ratio, kind)) of time a / time b.  A missed run
    counts as the cap: kind '>' when a missed (a is slower than that), '<'
    when only b missed, '?' when both did.  The runs must be of one sweep."""
    return paired_times(seed_times(runs_a, target), seed_times(runs_b, target), cap)


def paired_times(times_a, times_b, cap):
    """paired() on seed -> time maps: the seeds both have, in order."""
    out = []
    for seed in sorted(times_a):
        if seed not in times_b:
            continue
        ta, tb = times_a[seed], times_b[seed]
        if ta == INF and tb == INF:
            r = (1.0, "?")
        elif ta == INF:
            r = (cap / tb, ">")
        elif tb == INF:
            r = (ta / cap, "<")
        else:
            r = (ta / tb, "=")
        out.append((seed, r))
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
    """The runs of one scenario in one sweep with one optimizer."""

    def __init__(self, name, sweep, optimizer, runs, meta):
        self.name, self.sweep, self.optimizer, self.runs, self.meta = name, sweep, optimizer, runs, meta
        self.tag = "%s-s%s-%s" % (name, sweep, optimizer)     # temporary file names
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

    def best_fixed(self):
        """The model other than auto with the lowest median time to the
        target (ties: the first in MODEL_ORDER), or None."""
        fixed = [m for m in self.models if m != ADAPTIVE]
        if not fixed:
            return None
        return min(fixed, key=lambda m: (self.median_time(m), model_key(m)))


def model_table(g):
    lines = []
    tcols = [t for t in g.targets if abs(t - g.target) > 1e-9]
    # Early releases (phases released before every member arrived) are
    # recorded from the second sweep on; the column appears when any run has them.
    early = any("early_releases" in r for r in g.runs)
    head = ("| model | runs | time to %.2f (s): median (min–max) | vs BSP (median of paired) | %s"
            "acc @ %s s | acc @ %s samples | final acc | staleness p50/p99/max | dropped | wait | "
            "barriers/s | %sregroups | regroup lag med/max (s) | CPU | iteration check |"
            % (g.target, "".join("time to %.2f | " % t for t in tcols),
               fmt_num(g.t_eq, "%.1f"), "-" if g.s_eq is None else "{:,.0f}".format(g.s_eq),
               "early releases | " if early else ""))
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
        er = ("%s | " % fmt_num(median([r.get("early_releases") for r in runs]), "%.0f")) if early else ""
        lines.append("| %s | %d | %s (%s) | %s | %s%s | %s | %s | %s | %s | %s | %s | %s%s | %s | %s | %s |" % (
            m, len(runs), fmt_time(med, g.cap), rng, vs, extra,
            fmt_num(g.acc_eq_time(m), "%.4f"), fmt_num(g.acc_eq_samples(m), "%.4f"),
            fmt_num(median([r.get("final_accuracy") for r in runs]), "%.4f"), st,
            fmt_num(median([r.get("dropped") for r in runs]), "%.0f"),
            fmt_num(median([r.get("wait_fraction") for r in runs]), "%.3f"),
            fmt_num(median([r.get("barriers_per_second") for r in runs]), "%.1f"), er,
            fmt_num(median([r.get("regroups") for r in runs]), "%.0f"), lag,
            fmt_num(median([r.get("cpu_fraction") for r in runs]), "%.2f"), ic))
    return lines


def samples_to(run, target):
    """Applied samples when the rolling accuracy first reached target, or None."""
    for _, samples, acc in run.get("curve") or []:
        if acc is not None and samples is not None and acc >= target:
            return samples
    return None


def split_lines(g):
    """Time to target split into its two factors: the samples a model had
    to apply to get there (statistical efficiency) and how fast it applied
    them (throughput), each as a median over seeds and as a ratio to BSP's.
    A model that loses on the first wastes its gradients; on the second, it
    waits."""
    bsp = g.of("bsp")
    if not bsp:
        return []
    def factors(runs):
        n, rate = [], []
        for r in runs:
            t, s = t_to(r, g.target), samples_to(r, g.target)
            if t != INF and s:
                n.append(s)
                rate.append(s / t)
        return median(n), median(rate)
    bn, brate = factors(bsp)
    if not bn or not brate:
        return []
    out = ["Time to %.2f split into samples applied until then and samples applied per second "
           "(runs that reached it; medians over seeds):" % g.target, "",
           "| model | samples to %.2f | × BSP | samples/s | × BSP | updates/s | staleness p99 |" % g.target,
           "|---|---|---|---|---|---|---|"]
    for m in g.models:
        runs = g.of(m)
        n, rate = factors(runs)
        out.append("| %s | %s | %s | %s | %s | %s | %s |" % (
            m, "-" if n is None else "{:,.0f}".format(n), "-" if n is None else "%.2f" % (n / bn),
            "-" if rate is None else "{:,.0f}".format(rate), "-" if rate is None else "%.2f" % (rate / brate),
            fmt_num(median([r.get("updates_per_second") for r in runs]), "%.1f"),
            fmt_num(median([r.get("staleness_p99") for r in runs]), "%.0f")))
    return out


def comparisons(name, sweep=FIRST_SWEEP):
    """(model, reference) pairs whose per-seed ratios a scenario reports
    (besides every model against BSP); from the second sweep on, those of
    issue 32's targets too."""
    extra = {"two-slow": [("lsp", "asp")], "six-slow": [("alsp", "lsp")],
             "shifting": [("alsp", "lsp"), ("alsp", "ssp")], "wide": [("lsp", "asp")],
             "slow-link": [("lsp", "asp"), ("alsp", "lsp")]}
    later = {"two-slow": [("lsp", "backup"), ("alsp", "lsp")],
             "six-slow": [("alsp", "backup"), ("alsp", "asp")]}
    out = list(extra.get(name, []))
    if sweep != FIRST_SWEEP:
        out += [p for p in later.get(name, []) if p not in out]
    return out


def seed_lines(g):
    lines = []
    refs = [("bsp", None, "")] + [(ref, m, "") for m, ref in comparisons(g.name, g.sweep)]
    best = g.best_fixed() if g.of(ADAPTIVE) else None
    if best:
        refs.append((best, ADAPTIVE, " (the best fixed model: lowest median time)"))
    for ref, only, note in refs:
        ref_runs = g.of(ref)
        if not ref_runs:
            continue
        for m in g.models:
            if m == ref or (only and m != only):
                continue
            if ref == "bsp" and m == ADAPTIVE and best == "bsp" and not only:
                continue        # said below, as against the best fixed model
            pairs = paired(g.of(m), ref_runs, g.target, g.cap)
            if not pairs:
                continue
            verdict = "**wins on every seed**" if wins_every_seed(pairs) else (
                "wins on no seed" if not any(favours(r) for _, r in pairs) else "mixed")
            lines.append("- %s / %s%s: %s — %s" % (m, ref, note, ", ".join(
                "seed %s %s" % (s, fmt_ratio(r)) for s, r in pairs), verdict))
    return lines


def computed_share(pw, w):
    """A worker's share of the gradients all workers computed (its
    iterations over everyone's): its speed on this machine, with the
    round trips and waits that stretch each worker's iterations, where the
    speed share counts the emulated compute alone."""
    total = sum(x.get("iterations") or 0 for x in pw)
    return (w.get("iterations") or 0) / total if total else None


def share_lines(g):
    """Per-worker applied share against speed share, by model (medians over seeds)."""
    lines = ["| model | applied share min / median / max | slowest worker: applied vs speed share | "
             "slowest worker: applied vs computed share | rows applied once per epoch |",
             "|---|---|---|---|---|"]
    for m in g.models:
        shares, slow, comp, epochs_ok, epochs = [], [], [], 0, 0
        for r in g.of(m):
            pw = [w for w in r.get("per_worker") or [] if w.get("applied_share") is not None]
            shares += [w["applied_share"] for w in pw]
            with_speed = [w for w in pw if w.get("speed_share") is not None]
            if with_speed:
                w = min(with_speed, key=lambda w: w["speed_share"])
                slow.append((w["applied_share"], w["speed_share"]))
                c = computed_share(pw, w)
                if c:
                    comp.append((w["applied_share"], c))
            rows = r.get("epoch_row_share") or []
            epochs += 1
            epochs_ok += bool(rows) and all(abs(x - 1) < 1e-9 for x in rows)
        if not shares:
            continue
        sl = "-"
        if slow:
            a, s = median([x[0] for x in slow]), median([x[1] for x in slow])
            sl = "%.4f vs %.4f (%s)" % (a, s, "%.2f×" % (a / s) if s else "-")
        cl = "-"
        if comp:
            a, c = median([x[0] for x in comp]), median([x[1] for x in comp])
            cl = "%.4f vs %.4f (%.2f×)" % (a, c, a / c)
        lines.append("| %s | %.4f / %.4f / %.4f | %s | %s | %d of %d runs |" % (
            m, min(shares), statistics.median(shares), max(shares), sl, cl, epochs_ok, epochs))
    return lines


def auto_lines(g):
    """One line per auto run: the model it ended as, its switches, the first."""
    lines = []
    for r in sorted(g.of(ADAPTIVE), key=lambda r: r["seed"]):
        mode = r.get("mode")
        count = r.get("switch_count")
        switches = [w for w in r.get("switches") or [] if isinstance(w, dict)]
        if count is None and "switches" in r:
            count = len(switches)
        parts = ["ends as %s" % (mode.upper() if isinstance(mode, str) else "unknown")]
        parts.append("switches unknown" if count is None else
                     "%d switch%s" % (count, "" if count == 1 else "es"))
        if switches:
            w = switches[0]
            at = w.get("at_s")
            parts.append("first %s -> %s at %s" % (
                str(w.get("from", "?")).upper(), str(w.get("to", "?")).upper(),
                "?" if not isinstance(at, (int, float)) else "%.1f s" % at))
        lines.append("- seed %s: %s" % (r["seed"], "; ".join(parts)))
    return lines


# ---------------------------------------------------------------- targets

class Judge:
    """Judges targets on the runs of one sweep (primary optimizer) alone."""

    def __init__(self, groups, scenarios, sweep):
        self.groups, self.scenarios, self.sweep = groups, scenarios, sweep

    def group(self, name):
        return self.groups.get((name, self.sweep, PRIMARY_OPT))

    @staticmethod
    def need(g, *models):
        return g is not None and all(g.of(m) for m in models)

    @staticmethod
    def not_run(g, *models):
        if g is None:
            return "not yet run"
        return "not yet run (no %s runs yet)" % ", ".join(m.upper() for m in models if not g.of(m))

    @staticmethod
    def ratio_check(g, a, b, limit):
        pairs = paired(g.of(a), g.of(b), g.target, g.cap)
        r = ratio_median(pairs)
        ok = at_most(r, limit)
        return ok, "%s/%s median paired ratio %s (per seed: %s)%s" % (
            a.upper(), b.upper(), fmt_against(r, limit), ", ".join(fmt_ratio(x) for _, x in pairs),
            "; wins on every seed" if wins_every_seed(pairs) else "")

    def status(self, ok_list, g, models):
        # The scenario file's seeds count only for the sweeps it plans.
        meta = self.scenarios.get(g.name, {}) if g else {}
        seeds = len(meta.get("seeds", [])) if planned_for(meta, self.sweep) else 0
        # Name the models that ran fewer seeds than the scenario has (ASP runs
        # 3 where others run 5, by the plan; a sweep under way has
        # fewer), not a bare count.
        short = ["%s %d" % (m.upper(), len(g.of(m))) for m in models if seeds and len(g.of(m)) < seeds]
        partial = " (of %d seeds: %s)" % (seeds, ", ".join(short)) if short else ""
        return ("met" if all(ok_list) else "missed") + partial


def one_very_slow_shares(g, models):
    """Per model: the slowest worker's applied share over its speed share,
    per run; and the epoch row check over every run of the group."""
    rel, comp = {}, {}
    for m in models:
        rel[m], comp[m] = [], []
        for r in g.of(m):
            pw = [w for w in r.get("per_worker") or [] if w.get("speed_share") and
                  w.get("applied_share") is not None]
            if pw:
                w = min(pw, key=lambda w: w["speed_share"])
                rel[m].append(w["applied_share"] / w["speed_share"])
                c = computed_share(pw, w)
                if c:
                    comp[m].append(w["applied_share"] / c)
    rows_ok = [bool(r.get("epoch_row_share")) and all(abs(x - 1) < 1e-9 for x in r["epoch_row_share"])
               for r in g.runs]
    return rel, rows_ok, comp


def t16_shifting(j):
    g = j.group("shifting")
    text = "ALSP ≤ 0.85× the better of LSP and SSP (≥ 3 speed changes before the target)"
    if j.need(g, "lsp", "alsp") and not g.of("ssp") and j.sweep != FIRST_SWEEP:
        # Later sweeps run no SSP: judged against LSP, and the status says so.
        ok, t = j.ratio_check(g, "alsp", "lsp", 0.85)
        changes = [sum(1 for c in r.get("speed_changes") or [] if 0 < c <= t_to(r, g.target))
                   for r in g.of("alsp")]
        pre = bool(changes) and min(changes) >= 3
        t += "; this sweep has no SSP runs, so the reference is LSP; speed changes before ALSP's " \
             "target: %s" % (", ".join(str(c) for c in changes) or "-")
        return ("shifting", text, t, j.status([ok, pre], g, ("lsp", "alsp")) + " (against LSP alone)"
                + ("" if pre else " (fewer than 3 changes before the target)"))
    if j.need(g, "lsp", "ssp", "alsp"):
        better = min(("lsp", "ssp"), key=lambda m: g.median_time(m))
        ok, t = j.ratio_check(g, "alsp", better, 0.85)
        changes = [sum(1 for c in r.get("speed_changes") or [] if 0 < c <= t_to(r, g.target))
                   for r in g.of("alsp")]
        pre = bool(changes) and min(changes) >= 3
        t += "; better of LSP/SSP is %s; speed changes before ALSP's target: %s" % (
            better.upper(), ", ".join(str(c) for c in changes) or "-")
        return ("shifting", text, t, j.status([ok, pre], g, ("lsp", "ssp", "alsp"))
                + ("" if pre else " (fewer than 3 changes before the target)"))
    return ("shifting", text, "-", j.not_run(g, *(("lsp", "ssp", "alsp") if j.sweep == FIRST_SWEEP
                                                  else ("lsp", "alsp"))))


def t16_noisy(j):
    g = j.group("noisy")
    text = "LSP ≤ 0.7× BSP; SSP as it comes"
    if j.need(g, "bsp", "lsp"):
        ok, t = j.ratio_check(g, "lsp", "bsp", 0.7)
        if g.of("ssp"):
            t += "; SSP/BSP median paired ratio %s" % fmt_ratio(ratio_median(paired(g.of("ssp"), g.of("bsp"),
                                                                                   g.target, g.cap)))
        return ("noisy", text, t, j.status([ok], g, ("bsp", "lsp")))
    return ("noisy", text, "-", j.not_run(g, "bsp", "lsp"))


def t16_wide(j):
    g = j.group("wide")
    text = "LSP's accuracy at equal samples ≥ ASP + 1 point, and LSP's time ≤ 0.8× ASP's"
    if j.need(g, "asp", "lsp"):
        a, b = g.acc_eq_samples("lsp"), g.acc_eq_samples("asp")
        ok1 = a is not None and b is not None and a >= b + 0.01
        ok2, t2 = j.ratio_check(g, "lsp", "asp", 0.8)
        return ("wide", text, "LSP %s vs ASP %s at equal samples; %s" % (
            fmt_num(a, "%.4f"), fmt_num(b, "%.4f"), t2), j.status([ok1, ok2], g, ("asp", "lsp")))
    return ("wide", text, "-", j.not_run(g, "asp", "lsp"))


def target_rows(groups, scenarios):
    """One row per target of issue 16, judged on the first sweep:
    (scenario, target, measured, status)."""
    j = Judge(groups, scenarios, FIRST_SWEEP)
    rows = []

    g = j.group("equal")
    text = "LSP and ALSP ≤ 1.05× BSP's time; accuracy at equal samples within 0.3 points of BSP"
    if j.need(g, "bsp", "lsp", "alsp"):
        oks, parts = [], []
        for m in ("lsp", "alsp"):
            ok, t = j.ratio_check(g, m, "bsp", 1.05)
            oks.append(ok)
            parts.append(t)
            a, b = g.acc_eq_samples(m), g.acc_eq_samples("bsp")
            ok2 = a is not None and b is not None and abs(a - b) <= 0.003
            oks.append(ok2)
            parts.append("%s acc @ equal samples %s vs BSP %s" % (m.upper(), fmt_num(a, "%.4f"),
                                                                   fmt_num(b, "%.4f")))
        rows.append(("equal", text, "; ".join(parts), j.status(oks, g, ("bsp", "lsp", "alsp"))))
    else:
        rows.append(("equal", text, "-", j.not_run(g, "bsp", "lsp", "alsp")))

    g = j.group("two-slow")
    text = "LSP ≤ 0.45× BSP and ≤ 1.0× ASP"
    if j.need(g, "bsp", "asp", "lsp"):
        ok1, t1 = j.ratio_check(g, "lsp", "bsp", 0.45)
        ok2, t2 = j.ratio_check(g, "lsp", "asp", 1.0)
        rows.append(("two-slow", text, t1 + "; " + t2, j.status([ok1, ok2], g, ("bsp", "asp", "lsp"))))
    else:
        rows.append(("two-slow", text, "-", j.not_run(g, "bsp", "asp", "lsp")))

    g = j.group("six-slow")
    text = "ALSP ≤ 0.6× LSP and ≤ 0.5× BSP"
    if j.need(g, "bsp", "lsp", "alsp"):
        ok1, t1 = j.ratio_check(g, "alsp", "lsp", 0.6)
        ok2, t2 = j.ratio_check(g, "alsp", "bsp", 0.5)
        rows.append(("six-slow", text, t1 + "; " + t2, j.status([ok1, ok2], g, ("bsp", "lsp", "alsp"))))
    else:
        rows.append(("six-slow", text, "-", j.not_run(g, "bsp", "lsp", "alsp")))

    rows.append(t16_shifting(j))
    rows.append(t16_noisy(j))

    g = j.group("one-very-slow")
    text = "every row applied once per epoch; the slow worker's applied share = its speed share ±20 % (LSP, ALSP)"
    if j.need(g, "lsp", "alsp"):
        rel, rows_ok, _ = one_very_slow_shares(g, ("lsp", "alsp"))
        oks = [all(rows_ok)]
        parts = ["epoch row share 1.0 in %d of %d runs" % (sum(rows_ok), len(rows_ok))]
        for m in ("lsp", "alsp"):
            oks.append(bool(rel[m]) and all(abs(x - 1) <= 0.2 for x in rel[m]))
            parts.append("%s slow worker applied/speed share: %s" % (
                m.upper(), ", ".join("%.2f" % x for x in rel[m]) or "-"))
        rows.append(("one-very-slow", text, "; ".join(parts), j.status(oks, g, ("lsp", "alsp"))))
    else:
        rows.append(("one-very-slow", text, "-", j.not_run(g, "lsp", "alsp")))

    rows.append(t16_wide(j))
    return rows


def best_of_check(g, a, refs, limit):
    """Time of a over, per seed, the fastest of refs on that seed (a run that
    missed counts as the cap, as in paired()).  Only seeds where a and every
    ref ran count."""
    times = {m: seed_times(g.of(m), g.target) for m in refs}
    seeds = set(times[refs[0]]).intersection(*(set(times[m]) for m in refs[1:]))
    best, which = {}, {}
    for s in seeds:
        m = min(refs, key=lambda m: (times[m][s], refs.index(m)))
        best[s], which[s] = times[m][s], m
    pairs = paired_times(seed_times(g.of(a), g.target), best, g.cap)
    r = ratio_median(pairs)
    return at_most(r, limit), "%s / per-seed best of %s: median paired ratio %s (per seed: %s)%s" % (
        a.upper(), ", ".join(m.upper() for m in refs), fmt_against(r, limit),
        ", ".join("%s vs %s" % (fmt_ratio(x), which[s].upper()) for s, x in pairs),
        "; wins on every seed" if wins_every_seed(pairs) else "")


def lists_auto(meta):
    return any((m.get("consistency") or m.get("name")) == ADAPTIVE
               for m in meta.get("models", []) if isinstance(m, dict))


def ratio_row(j, scenario, model, against, limit):
    """A target row "MODEL ≤ LIMIT× AGAINST" on one scenario."""
    g = j.group(scenario)
    text = "%s ≤ %s× %s" % (model.upper(), limit, against.upper())
    if j.need(g, against, model):
        ok, t = j.ratio_check(g, model, against, limit)
        return (scenario, text, t, j.status([ok], g, (against, model)))
    return (scenario, text, "-", j.not_run(g, against, model))


def target_rows_32(groups, scenarios, names, sweep):
    """One row per target of issue 32, judged on one sweep (the second or a
    later one) alone."""
    j = Judge(groups, scenarios, sweep)
    rows = [ratio_row(j, "equal", "lsp", "bsp", 1.02)]

    g = j.group("two-slow")
    text = "LSP ≤ 1.0× backup and ≤ 0.40× BSP"
    if j.need(g, "bsp", "backup", "lsp"):
        ok1, t1 = j.ratio_check(g, "lsp", "backup", 1.0)
        ok2, t2 = j.ratio_check(g, "lsp", "bsp", 0.40)
        rows.append(("two-slow", text, t1 + "; " + t2, j.status([ok1, ok2], g, ("bsp", "backup", "lsp"))))
    else:
        rows.append(("two-slow", text, "-", j.not_run(g, "bsp", "backup", "lsp")))

    rows.append(ratio_row(j, "two-slow", "alsp", "lsp", 1.05))

    g = j.group("six-slow")
    text = ("ALSP ≤ 0.6× BSP and ≤ 0.9× the best of LSP, backup and ASP (per seed: the fastest of "
            "the three on that seed)")
    models = ("bsp", "asp", "backup", "lsp", "alsp")
    if j.need(g, *models):
        ok1, t1 = j.ratio_check(g, "alsp", "bsp", 0.6)
        ok2, t2 = best_of_check(g, "alsp", ("lsp", "backup", "asp"), 0.9)
        rows.append(("six-slow", text, t1 + "; " + t2, j.status([ok1, ok2], g, models)))
    else:
        rows.append(("six-slow", text, "-", j.not_run(g, *models)))

    rows.append(ratio_row(j, "slow-link", "alsp", "lsp", 1.0))

    g = j.group("one-very-slow")
    models = ("lsp", "alsp", ADAPTIVE)
    text = "the slow worker's applied share = its speed share ±20 % (LSP, ALSP, auto)"
    if j.need(g, *models):
        rel, rows_ok, comp = one_very_slow_shares(g, models)
        oks, parts = [], []
        for m in models:
            oks.append(bool(rel[m]) and all(abs(x - 1) <= 0.2 for x in rel[m]))
            parts.append("%s slow worker applied/speed share: %s (applied/computed: %s)" % (
                m.upper(), ", ".join("%.2f" % x for x in rel[m]) or "-",
                ", ".join("%.2f" % x for x in comp[m]) or "-"))
        parts.append("(not judged: epoch row share 1.0 in %d of %d runs)" % (sum(rows_ok), len(rows_ok)))
        rows.append(("one-very-slow", text, "; ".join(parts), j.status(oks, g, models)))
    else:
        rows.append(("one-very-slow", text, "-", j.not_run(g, *models)))

    # Issue 16's wording, judged on this sweep's runs.
    for fn in (t16_shifting, t16_noisy, t16_wide):
        rows.append(fn(j))

    text = "auto ≤ 1.05× the best fixed model"
    for name in names:
        g = j.group(name)
        meta = scenarios.get(name, {})
        listed = lists_auto(meta) and planned_for(meta, sweep)
        if not (listed or (g is not None and g.of(ADAPTIVE))):
            continue
        best = g.best_fixed() if g is not None else None
        if g is None or not g.of(ADAPTIVE) or best is None:
            rows.append((name, text, "-", "not yet run" if g is None else
                         "not yet run (no %s runs yet)" % ("AUTO" if not g.of(ADAPTIVE) else "fixed-model")))
            continue
        ok, t = j.ratio_check(g, ADAPTIVE, best, 1.05)
        t = "best fixed model %s (median %s s); %s" % (best.upper(), fmt_time(g.median_time(best), g.cap), t)
        rows.append((name, text, t, j.status([ok], g, (ADAPTIVE, best))))
    if not any(r[1].startswith("auto ") for r in rows):
        rows.append(("every scenario with an auto run", text, "-", "not yet run"))
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
        data = os.path.join(tmp, "%s-%s.dat" % (g.tag, m))
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
              "set title 'Kudus %s (%s, sweep %s): test accuracy, 1 s rolling mean; median and min-max over seeds'\n"
              "set xlabel 'seconds of training'\nset ylabel 'test accuracy'\nset yrange [0.7:0.9]\n"
              "set key bottom right\nset grid\n%splot %s\n"
              % (png, g.name, g.optimizer, g.sweep, targets, ", ".join(plots)))
    return gnuplot(script)


def plot_shares(g, tmp, png):
    wait = os.path.join(tmp, "%s-wait.dat" % g.tag)
    with open(wait, "w") as f:
        for i, m in enumerate(g.models):
            w = median([r.get("wait_fraction") for r in g.of(m)])
            f.write("%d %s %.4f\n" % (i, m, w if w is not None else 0))
    # Applied share by worker, workers sorted by speed share (slowest right),
    # median over seeds by position.
    share_files = []
    speed_file = os.path.join(tmp, "%s-speed.dat" % g.tag)
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
        path = os.path.join(tmp, "%s-%s-share.dat" % (g.tag, m))
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
              "'Kudus %s (%s, sweep %s): medians over seeds'\n"
              "set style fill solid 0.6\nset boxwidth 0.7\nset grid ytics\nset yrange [0:*]\n"
              "set title 'wait fraction'\nplot '%s' using 1:3:xtic(2) with boxes lc rgb '#4477aa' notitle\n"
              "set title 'applied share per worker (fastest left, slowest right)'\nset xlabel 'worker'\n"
              "set key bottom left\nplot %s\nunset multiplot\n"
              % (png, g.name, g.optimizer, g.sweep, wait, right or "0 notitle"))
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
                base = r["model"].rsplit("-lr", 1)[0]
            except (ValueError, KeyError, TypeError, AttributeError):
                continue
            rows.setdefault(sweep_of(r), {}).setdefault(base, []).append(r)
    out = []
    for sweep in sorted(rows, key=sweep_key, reverse=True):
        title = "### Learning-rate tuning (`equal`, seed 100)"
        if set(rows) != {FIRST_SWEEP}:
            title += ", %s" % sweep_title(sweep).lower()
        out += [title, "", "| model | lr: time to 0.86 (s) / final accuracy |", "|---|---|"]
        for base in sorted(rows[sweep], key=model_key):
            cells = []
            for r in sorted(rows[sweep][base], key=lambda r: r["lr"]):
                t = (r.get("time_to") or {}).get("0.86")
                cells.append("%g: %s / %s" % (r["lr"], "> %g" % r.get("cap_seconds", 180) if t is None
                                              else "%.1f" % t, fmt_num(r.get("final_accuracy"), "%.4f")))
            out.append("| %s | %s |" % (base, "; ".join(cells)))
        out.append("")
    return out


def side_by_side(name, groups, sweeps):
    """Per model present in any of the sweeps (primary optimizer): runs,
    median time to the target and median paired ratio to BSP, per sweep; the
    ratios are paired within a sweep only."""
    gs = [(s, groups.get((name, s, PRIMARY_OPT))) for s in sweeps]
    models = sorted({m for _, g in gs if g for m in g.models}, key=model_key)
    target = next(g.target for _, g in gs if g)
    head = "| model | " + " | ".join(
        "sweep %s: runs | sweep %s: time to %.2f (s), median | sweep %s: vs BSP, median paired" % (s, s, target, s)
        for s, _ in gs) + " |"
    lines = [head, "|" + "---|" * (head.count("|") - 1)]
    for m in models:
        cells = []
        for _, g in gs:
            runs = g.of(m) if g else []
            if not runs:
                cells += ["0", "-", "-"]
                continue
            if m == "bsp":
                vs = "1.00"
            elif g.of("bsp"):
                vs = fmt_ratio(ratio_median(paired(runs, g.of("bsp"), g.target, g.cap)))
            else:
                vs = "-"
            cells += [str(len(runs)), fmt_time(g.median_time(m), g.cap), vs]
        lines.append("| %s | %s |" % (m, " | ".join(cells)))
    return lines


def group_lines(g, plot, args, tmp, rel_plots):
    """The tables (and, when plot, the plots) of one group."""
    name, opt = g.name, g.optimizer
    seeds = sorted({r["seed"] for r in g.runs})
    builds = sorted({str(r["build"]) for r in g.runs if r.get("build") is not None})
    out = ["**Optimizer %s**, seeds %s, cap %g s, %d runs%s." % (
        opt, ", ".join(str(s) for s in seeds), g.cap, len(g.runs),
        "" if not builds else "; build%s %s" % ("s" if len(builds) > 1 else "",
                                                ", ".join("`%s`" % b for b in builds))), ""]
    out += model_table(g) + [""]
    al = auto_lines(g)
    if al:
        out += ["`auto` per seed: the model it ended as, its switches, and the first one:", ""] + al + [""]
    sl = seed_lines(g)
    if sl:
        out += ["Per-seed paired ratios of the time to %.2f:" % g.target, ""] + sl + [""]
    out += share_lines(g) + [""]
    if sweep_of(g.runs[0]) != FIRST_SWEEP:
        sp = split_lines(g)
        if sp:
            out += sp + [""]
    if plot:
        stem = "%s-%s" % (name, opt) if opt != PRIMARY_OPT else name
        acc_png = os.path.join(args.plots, stem + "-accuracy.png")
        shares_png = os.path.join(args.plots, stem + "-shares.png")
        if plot_accuracy(g, tmp, acc_png):
            out += ["![%s accuracy](%s/%s)" % (stem, rel_plots, os.path.basename(acc_png)), ""]
        if plot_shares(g, tmp, shares_png):
            out += ["![%s wait and shares](%s/%s)" % (stem, rel_plots, os.path.basename(shares_png)), ""]
    return out


def target_table(rows):
    out = ["| scenario | target | measured | status |", "|---|---|---|---|"]
    for sc, target, measured, st in rows:
        out.append("| %s | %s | %s | **%s** |" % (sc, target, measured, st))
    return out


def sweep_notes(sweep, groups):
    """What a sweep's issue-32 table describes: the build(s) it ran."""
    if sweep == SECOND_SWEEP:
        return ["The second sweep ran one frozen build (`eb0c9a4`), older than two rules that are "
                "now defaults: its ALSP took an optimizer step per group's commit (what `--group-step each` "
                "selects today), and its barrier had no noise allowance (`--barrier-spread 0` today). "
                "Both defaults changed after it (`fastest` and `auto`, from cluster probes: the sixth to "
                "eighth parts), so the LSP, ALSP and auto rows above describe that build, not today's "
                "defaults; BSP, ASP and backup workers are unaffected. Which rule auto ran in each run, "
                "and how far two runs of one rule differ, are in the tenth part."]
    if sweep == THIRD_SWEEP:
        # The build is named from the records, so a second build slipping
        # into the sweep shows here.
        runs = [r for (_, s, _), g in groups.items() if s == sweep for r in g.runs]
        builds = sorted({str(r["build"]) for r in runs if r.get("build") is not None})
        unnamed = sum(1 for r in runs if r.get("build") is None)
        if not runs:
            name = "no runs recorded yet"
        elif not builds:
            name = "its records name none"
        else:
            name = ("`%s`" % builds[0] if len(builds) == 1 else
                    "yet its records name %d: %s" % (len(builds), ", ".join("`%s`" % b for b in builds)))
            if unnamed:
                name += "; %d run%s name%s none" % (unnamed, "" if unnamed == 1 else "s",
                                                   "s" if unnamed == 1 else "")
        return ["The third sweep runs one frozen build (%s), with today's defaults: `--group-step fastest`, "
                "`--barrier-spread auto`, and auto's split with hysteresis (see \"The third sweep\" above)."
                % name]
    return []


def build(args):
    results = load_results(args.results)
    scenarios = load_scenarios(args.scenarios)
    names = [n for n in ORDER if n in results or n in scenarios]
    names += sorted(n for n in set(results) | set(scenarios) if n not in names)
    groups = {}
    for name, runs in results.items():
        for sweep in sorted({sweep_of(r) for r in runs}, key=sweep_key):
            for opt in sorted({r["optimizer"] for r in runs if sweep_of(r) == sweep}):
                sub = [r for r in runs if r["optimizer"] == opt and sweep_of(r) == sweep]
                groups[(name, sweep, opt)] = Group(name, sweep, opt, sub, scenarios.get(name, {}))
    os.makedirs(args.plots, exist_ok=True)
    rel_plots = os.path.relpath(args.plots, os.path.dirname(os.path.abspath(args.out)))
    # Issue 32's targets, per numbered sweep from the second on: those with
    # runs and the one the scenario files plan (its table says what is not
    # yet run).  A sweep with another name is no protocol's; it is not judged.
    later = {s for (_, s, _) in groups} | {str(m.get("sweep", FIRST_SWEEP)) for m in scenarios.values()}
    later = sorted({SECOND_SWEEP} | {s for s in later if sweep_key(s)[0] == 0
                                     and sweep_key(s) >= sweep_key(SECOND_SWEEP)},
                   key=sweep_key, reverse=True)
    out = [BEGIN, "",
           "<!-- Generated by bench/report.py from docs/results/*.jsonl; edits here are overwritten. -->",
           "", "## Targets", "",
           "Rule: a ratio is the median over seeds of the paired ratio (same seed, same speeds, same "
           "sweep) of the "
           "times to 0.86. A run that missed 0.86 within the cap counts as taking the cap, which makes "
           "its ratios bounds (\">2.10\": slower than that; \"<0.30\": faster than that); a target is met "
           "only when the median is surely within it. A model *wins* only when every paired ratio favours it. \"Equal samples\" is the smallest number of "
           "applied samples any run of the scenario reached; \"equal time\" the earliest end of a run. "
           "Each table is judged on the runs of one sweep alone (optimizer %s): a sweep is a set of "
           "frozen rules and defaults, and runs of two sweeps are never paired." % PRIMARY_OPT, ""]
    for sweep in later:
        out += ["### %s: the targets of issue 32" % sweep_title(sweep), ""]
        out += target_table(target_rows_32(groups, scenarios, names, sweep))
        out += ["", "The *best fixed model* of a scenario is the model other than auto with the lowest median "
                "time to 0.86 in this sweep's runs of it; auto's ratio to it is paired by seed. In six-slow, "
                "the best of LSP, backup and ASP is taken per seed: the fastest of the three on that seed. "
                "shifting, noisy and wide keep issue 16's wording."]
        for note in sweep_notes(sweep, groups):
            out += ["", note]
        out += [""]
    out += ["### %s: the targets of issue 16" % sweep_title(FIRST_SWEEP), ""]
    out += target_table(target_rows(groups, scenarios))
    if {s for (_, s, _) in groups} <= {FIRST_SWEEP, SECOND_SWEEP}:
        order = "when it has runs in both, the first sweep beside the second, then the first sweep's full tables"
    else:
        order = "when it has runs in more than one, its sweeps side by side, then the older sweeps' full tables"
    out += ["", "## Results", "",
            "Each scenario shows its newest sweep first (the current protocol), then, %s. A record "
            "without a sweep is the first sweep's. Plots are drawn from the newest sweep with runs of "
            "the scenario and optimizer." % order, ""]
    out += tuning_lines(args.results)
    tmp = tempfile.mkdtemp(prefix="kudus-report-")
    try:
        for name in names:
            meta = scenarios.get(name, {})
            out += ["### %s" % name, ""]
            if meta.get("description"):
                out += [meta["description"], ""]
            here = sorted({s for (n, s, _) in groups if n == name}, key=sweep_key, reverse=True)
            if not here:
                out += ["Not yet run.", ""]
                continue
            planned = str(meta.get("sweep", FIRST_SWEEP))
            if sweep_key(planned) > sweep_key(here[0]):
                out += ["**%s: not yet run.**" % sweep_title(planned), ""]
            newest = {}
            for (n, s, o) in groups:
                if n == name and (o not in newest or sweep_key(s) > sweep_key(newest[o])):
                    newest[o] = s
            for i, sweep in enumerate(here):
                out += ["#### %s" % sweep_title(sweep), ""]
                opts = sorted({o for (n, s, o) in groups if n == name and s == sweep},
                              key=lambda o: (o != PRIMARY_OPT, o))
                for opt in opts:
                    out += group_lines(groups[(name, sweep, opt)], newest[opt] == sweep, args, tmp, rel_plots)
                if i == 0 and len(here) > 1 and any((name, s, PRIMARY_OPT) in groups for s in here):
                    both = sorted(here, key=sweep_key)
                    title = ("First sweep (sweep 1) beside the second" if both == [FIRST_SWEEP, SECOND_SWEEP]
                             else "Sweeps %s and %s side by side" % (", ".join(both[:-1]), both[-1]))
                    out += ["#### %s" % title, "",
                            "Optimizer %s. Ratios are paired within one sweep only (same seed, same sweep); "
                            "times are not paired across sweeps, and a model's name may stand for other "
                            "rules or defaults in another sweep." % PRIMARY_OPT, ""]
                    out += side_by_side(name, groups, both) + [""]
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
    per_sweep = {}
    for runs in results.values():
        for r in runs:
            per_sweep[sweep_of(r)] = per_sweep.get(sweep_of(r), 0) + 1
    print("report: %d scenario(s) with results, %d runs (%s); wrote %s and plots in %s" % (
        len(results), sum(per_sweep.values()),
        ", ".join("sweep %s: %d" % (s, per_sweep[s]) for s in sorted(per_sweep, key=sweep_key)) or "none",
        args.out, args.plots))


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--results", default="docs/results", help="directory of SCENARIO.jsonl files")
    p.add_argument("--out", default="docs/experiments.md", help="document to update between the markers")
    p.add_argument("--plots", default="docs/experiments", help="directory for the PNG plots")
    p.add_argument("--scenarios", default="bench/scenarios", help="scenario files (descriptions, seeds)")
    build(p.parse_args())


if __name__ == "__main__":
    main()
