"""The peer table of docs/reproductions/simulator-cost.md: each public simulator's CPU against Halyard's on its inputs.

Rendered from the JSON the side-by-side harnesses store, never typed:

* Synergy (msr-fiddle/synergy's simulator): ``docs/reproductions/simulator-cost.json``, written by
  ``benchmarks/bench_synergy_public_config.py --json docs/reproductions/simulator-cost.json`` (Halyard's side: CPU
  seconds, passes, the event log's SHA-256). With ``--public-simulator`` the same command also runs the public
  simulator on the same trace (``benchmarks/synergy_public_perjob.py public``, a child process) and stores its CPU
  seconds and mean JCT beside Halyard's (a row's ``public``); a row without it quotes issue 38's one-off figure.
* Dally (aakash-sharma/cluster-sim): ``docs/reproductions/dally-public-comparison.json`` (both sides' child-process
  CPU seconds per run, ``benchmarks/dally_public_perjob.py``).
* EasyScale (its SC'23 artifact): ``docs/reproductions/easyscale-public-comparison.json`` (both sides' CPU seconds
  per workload and policy, ``benchmarks/easyscale_public_perjob.py``).

    .venv/bin/python benchmarks/simulator_cost.py      # re-render docs/reproductions/simulator-cost.md from the JSON

``tests/test_reproduction_pages.py`` fails when the committed page differs from this rendering.
"""

from __future__ import annotations

import importlib.util
import json
import statistics
import sys
from pathlib import Path
from types import ModuleType

ROOT = Path(__file__).resolve().parents[1]
PAGE_NAME = "simulator-cost.md"
MEASURE_NAME = "4000-4999"  # the Synergy rows' measured jobs (bench_synergy_public_config.MEASURE)
JSON_NAME = "simulator-cost.json"
DALLY_JSON = "dally-public-comparison.json"
EASYSCALE_JSON = "easyscale-public-comparison.json"
POLLUX_ALL = ("pollux+submitted-batch+rounds-only+penalize-starts+pollux-costs+explore-doubling"
              "+isolated-links")  # every named difference removed (pollux-public-comparison.md)
# Harnesses whose JSON holds per-job runs of both sides (peer, page and JSON name, Halyard's preset).
TIRESIAS_EXACT = ("tiresias+fixed-duration+free-restarts+any-gpus+three-queues+reference-lists+late-demotion"
                  "+second-rounds")  # every named difference removed (tiresias-public-comparison.md)
PERJOB_PEERS = (("Tiresias (SymbioticLab/Tiresias, Python 2.7)", "tiresias-public-comparison", "tiresias"),
                ("Tiresias (SymbioticLab/Tiresias, Python 2.7)", "tiresias-public-comparison", TIRESIAS_EXACT),
                ("Gavel (stanford-futuredata/gavel)", "gavel-public-comparison", "gavel"),
                ("Pollux (petuum/adaptdl osdi21-artifact)", "pollux-public-comparison", "pollux"),
                ("Pollux (petuum/adaptdl osdi21-artifact)", "pollux-public-comparison", POLLUX_ALL))
GOAL = 100.0  # the goal set for the simulator: at least 100x less CPU than each peer


def _script(name: str) -> ModuleType:
    """``benchmarks/<name>.py`` as a module (the folder is not a package)."""
    spec = importlib.util.spec_from_file_location(f"_cost_{name}", ROOT / "benchmarks" / f"{name}.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


def _x(peer: float, ours: float) -> str:
    ratio = peer / ours
    return f"**{ratio:.0f}x**" if ratio >= GOAL else f"{ratio:.1f}x"


def synergy_rows(data: dict) -> list[str]:
    rows = []
    for row in data["synergy"]["rows"]:
        ours = data["synergy"]["halyard"][row["policy"]]
        public = row["public_cpu_s"]
        measured = row.get("public")
        if measured is None:
            said = f"{public:.0f} s (issue 38, not re-measured; Halyard then {row['halyard_cpu_s_then']} s)"
            agreement = row["agreement"]
        else:  # measured beside Halyard's by the command in the last column (bench_synergy_public_config.py)
            said = f"{public:.0f} s (measured in the same run; its whole process {measured['process_cpu_s']:.0f} s)"
            agreement = (f"mean JCT of jobs {MEASURE_NAME}: public {measured['mean_jct_h']:.1f} h over "
                         f"{measured['measured_jobs']:,} jobs, Halyard {ours['mean_jct_h']:.1f} h; {row['agreement']}")
        rows.append(f"| Synergy (msr-fiddle/synergy simulator) | {row['configuration']} (`{row['policy']}`) "
                    f"| {said} | {ours['cpu_s']:.1f} s "
                    f"({ours['passes']:,} passes) | {_x(public, ours['cpu_s'])} | {agreement} "
                    f"| `{row.get('public_command', data['synergy']['command'])}` |")
    return rows


def dally_rows(data: dict) -> list[str]:
    """One row per cluster-sim lease length: summed CPU over its runs, the per-run ratio's range."""
    groups: dict[float, list[dict]] = {}
    for run in data["runs"]:
        groups.setdefault(run["public_lease_s"], []).append(run)
    rows = []
    for lease, runs in sorted(groups.items()):
        peer = sum(r["public_cpu_s"] for r in runs)
        ours = sum(r["halyard_cpu_s"] for r in runs)
        per_run = [r["public_cpu_s"] / r["halyard_cpu_s"] for r in runs]
        jct = [r["compare"]["halyard_mean_jct_s"] / r["compare"]["public_mean_jct_s"] for r in runs]
        agree = sum(r["compare"]["agree"] for r in runs)
        both = sum(r["compare"]["finished_both"] for r in runs)
        policies = sorted({r["policy"] for r in runs})
        lease_text = "no lease end (1e9 s)" if lease >= 1e8 else f"{lease:g}-s leases"
        rows.append(f"| Dally (aakash-sharma/cluster-sim) | {lease_text}; {len(runs)} runs of 60 jobs "
                    f"({', '.join(policies)}) | {peer:.1f} s | {ours:.1f} s | {_x(peer, ours)} "
                    f"(per run {min(per_run):.1f}-{max(per_run):.1f}x) | mean JCT Halyard / public: median "
                    f"{statistics.median(jct):.2f}, {min(jct):.2f}-{max(jct):.2f} over the runs; {agree:,} of "
                    f"{both:,} jobs within 5 % "
                    f"| `benchmarks/dally_public_perjob.py` ({len(data['commands'])} commands in {DALLY_JSON}) |")
    return rows


def easyscale_rows(data: dict) -> list[str]:
    es = _script("easyscale_public_perjob")
    workloads = data["workloads"].values()
    peer = sum(r["cpu_s"] for w in workloads for r in w["artifact"].values())
    ours = sum(w["halyard"][p]["cpu_s"] for w in workloads for p in es.PUBLIC_POLICIES)
    jct = [es.stats(w["halyard"][h])["mean_jct_s"] / es.stats(w["artifact"][a])["mean_jct_s"]
           for w in workloads for h, a in es.PUBLIC_POLICIES.items()]
    return [f"| EasyScale (SC'23 artifact) | {len(data['workloads'])} workloads x "
            f"{', '.join(es.PUBLIC_POLICIES)} | {peer:.1f} s | {ours:.1f} s | {_x(peer, ours)} "
            f"| mean JCT Halyard / artifact: median {statistics.median(jct):.2f}, {min(jct):.2f}-{max(jct):.2f} "
            f"over the {len(jct)} runs (per job: {es.PAGE_NAME}) "
            f"| `{data['command']}` |"]


def perjob_rows(peer: str, data: dict, preset: str, page: str) -> list[str]:
    """One row for a harness that stores ``workloads`` of ``{public, halyard: {preset: run}}`` (benchmarks/perjob.py
    runs): both sides' child-process CPU summed over the workloads, the ``preset``'s mean JCT over the peer's on
    the jobs both finished, and the jobs within 5 %."""
    perjob = _script("perjob")
    runs = [(w["public"], w["halyard"][preset]) for w in data["workloads"].values()]
    theirs = sum(pub["cpu_s"] for pub, _ in runs)
    ours = sum(run["cpu_s"] for _, run in runs)
    jct, within, both = [], 0, 0
    for pub, run in runs:
        pub_c, run_c = perjob.common(pub, run)
        jct.append(perjob.stats(run_c)["mean_jct_s"] / perjob.stats(pub_c)["mean_jct_s"])
        n = len(perjob.jcts(pub_c))
        within += round(perjob.agree(pub, run) * n)
        both += n
    return [f"| {peer} | {len(runs)} workloads ({', '.join(data['workloads'])}), `{preset}` | {theirs:.1f} s "
            f"| {ours:.1f} s | {_x(theirs, ours)} | mean JCT Halyard / public: "
            f"{', '.join(f'{r:.3f}' for r in jct)}; {within:,} of {both:,} jobs within 5 % ({page}) "
            f"| `{data['command']}` |"]


def peer_table(docs: Path) -> str:
    head = ("| peer | configuration | the peer's CPU | Halyard's CPU | ratio | result agreement "
            "| regenerate with |")
    lines = [head, "| --- | --- | --- | --- | --- | --- | --- |"]
    lines += synergy_rows(json.loads((docs / JSON_NAME).read_text(encoding="utf-8")))
    lines += dally_rows(json.loads((docs / DALLY_JSON).read_text(encoding="utf-8")))
    lines += easyscale_rows(json.loads((docs / EASYSCALE_JSON).read_text(encoding="utf-8")))
    for peer, name, preset in PERJOB_PEERS:
        lines += perjob_rows(peer, json.loads((docs / f"{name}.json").read_text(encoding="utf-8")), preset,
                             f"{name}.md")
    return "\n".join(lines) + "\n"


def synergy_work(docs: Path) -> str:
    """Halyard's side of the Synergy rows: the counts behind its CPU (benchmarks/opcounts.py), each policy
    with issue 38's skips off where the JSON has it, and the event log's digest."""
    data = json.loads((docs / JSON_NAME).read_text(encoding="utf-8"))["synergy"]
    lines = ["| Halyard policy | CPU s | passes (skipped) | jobs keyed per pass | reasons told per pass "
             "| round placements | TUNE re-packs run | link settles / states solved | event log SHA-256 |",
             "| --- | --- | --- | --- | --- | --- | --- | --- | --- |"]
    runs = [(f"`{name}`", r) for name, r in data["halyard"].items()]
    runs += [(f"`{name}` before (issue 38's switches off)", r) for name, r in data.get("before", {}).items()]
    for name, r in runs:
        work = r["work"]
        retuned = f"{work['retuned']:,}" if "retuned" in work else "—"
        told = f"{work['told'] / max(1, r['passes']):.1f}" if "told" in work else "—"
        lines.append(f"| {name} | {r['cpu_s']:.1f} | {r['passes']:,} ({work.get('skipped', 0):,}) "
                     f"| {work['keyed'] / max(1, r['passes']):.1f} | {told} "
                     f"| {work.get('rounds', 0):,} | {retuned} | {work['settles']:,} / {work['links_solved']:,} "
                     f"| `{r['sha256'][:16]}` |")
    return "\n".join(lines) + "\n"


def pages(docs: Path) -> dict[Path, str]:
    """The page's generated blocks from the stored JSON (no simulation)."""
    sys.path.insert(0, str(ROOT / "benchmarks"))
    try:
        from reproduce_easyscale import filled
    finally:
        sys.path.remove(str(ROOT / "benchmarks"))
    return {docs / PAGE_NAME: filled(docs / PAGE_NAME, {"peers": peer_table(docs), "synergy": synergy_work(docs)})}


def main() -> int:
    for path, text in pages(ROOT / "docs" / "reproductions").items():
        path.write_text(text, encoding="utf-8")
        print(f"wrote {path}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
