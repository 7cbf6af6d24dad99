"""The operation counts that explain a simulation's CPU time (issue 38, Deliver 3: count work, not only time).

The machine's timing noise reaches 20-50% between runs, so a benchmark also prints the work it did:

* ``passes`` / ``skipped``: scheduling passes run, and passes the core skipped as word-for-word repeats
  of a quiet one (the core keeps both counts itself);
* ``keyed``: jobs keyed by a staged policy's ordering stage (calls of the key its ``key`` method returns,
  from the in-order walk, the ranking and the sorts alike), so ``keyed / passes`` is the jobs keyed per
  pass;
* ``settles`` / ``links_solved``: the link-contention fabric's settles (``Fabric._solve`` calls) and the
  link states it actually simulated (cache misses handed to the fluid or mean-field kernel);
* ``victims``: Dally's preemption victims built (``_Victim`` objects; made lazily, only when a pass
  walks that far down the list);
* ``offers``: Dally's offers answered by Algorithm 1 (``delay_decision`` calls, wherever Dally's modules
  make them: its pass, ``+reauction``, ``+hoard``'s bids; and the offers ``DelayScheduling.offer`` answered
  with a machine alone, ``machine_offer`` finding one, before any timer is asked, which then asks no
  ``delay_decision``, and the re-auction's bids that find one by bisection, ``KeptOffers.machine``; in
  ``+staggered``'s incremental auctions one per bid, ``Auctions.decide``, which asks ``delay_decision`` only
  when no machine fits; and the re-auction's waiting bids answered from their offer's summary alone,
  ``rejection``, which then asks no ``delay_decision``);
* ``victim_lists``: the lists of Dally's victims made (``NwSensPreemption.listed`` calls: every running job's
  Nw_sens, the victims above the pass's lowest waiting one sorted worst first);
* ``searches``: Dally's preemption searches worked out (``_with_victims`` calls: the cheapest victims that free
  one placement), after those its pass answered from the searches that found nothing;
* ``releases``: ``+staggered``'s lease-end releases, each an auction (``Auctions.run``'s releases);
* ``retakes``: those answered without an auction: the released job bid alone and took back its own GPUs
  (``Auctions.retakes``; each is also one of ``offers``).

The library keeps no counters, so :func:`counting` wraps those methods for the length of a ``with``
block and restores them after. Each wrapper is one Python call per counted call (the fabric and the
victims at class level, the ranking on the one policy instance), so a counted run costs a few percent
more CPU than an uncounted one: a timing that matters is taken with and without them.
"""

from __future__ import annotations

import contextlib
from collections import Counter
from collections.abc import Iterator

from halyard.emulator import fabric as fabric_module
from halyard.policies import dally as dally_policy_module
from halyard.policies import dally_bids, dally_clustersim, dally_pass, dally_stages, dally_staggered
from halyard.policies import dally_preemption as dally_module

COUNT_NAMES = ("passes", "skipped", "keyed", "settles", "links_solved", "victims", "offers", "victim_lists", "searches",
               "releases", "retakes")
# The modules that call Algorithm 1 by the name they imported it under (each is wrapped for ``offers``).
OFFER_MODULES = (dally_stages, dally_policy_module, dally_clustersim)


@contextlib.contextmanager
def counting(policy: object) -> Iterator[Counter[str]]:
    """Count ``keyed``, ``settles``, ``links_solved``, ``victims`` and ``offers`` while the block runs (add
    the core's ``passes`` and ``skipped`` with :func:`add_core`)."""
    counts: Counter[str] = Counter({name: 0 for name in COUNT_NAMES})
    fabric_cls, victim_cls = fabric_module.Fabric, dally_module._Victim
    saved = {"_solve": fabric_cls._solve, "_fluid": fabric_cls._fluid, "_mean_field": fabric_cls._mean_field}
    victim_init = victim_cls.__init__

    def solve(self, links):
        counts["settles"] += 1
        return saved["_solve"](self, links)

    def kernel(name):
        def solved(self, links):
            counts["links_solved"] += len(links)
            return saved[name](self, links)
        return solved

    def made(self, *args, **kwargs):
        counts["victims"] += 1
        victim_init(self, *args, **kwargs)

    decide, machine = dally_stages.delay_decision, dally_stages.machine_offer

    def offered(*args, **kwargs):
        counts["offers"] += 1
        return decide(*args, **kwargs)

    def machine_found(*args, **kwargs):
        picked = machine(*args, **kwargs)
        if picked is not None:  # (when it finds none, the delay_decision that follows counts the offer)
            counts["offers"] += 1
        return picked

    kept_machine = dally_bids.KeptOffers.machine
    rejection = dally_policy_module.rejection

    def rejected(*args, **kwargs):
        why = rejection(*args, **kwargs)
        if why is not None:  # (the re-auction's waiting bid answered from its offer's summary; None: delay_decision)
            counts["offers"] += 1
        return why

    def machine_kept(self, *args, **kwargs):
        picked = kept_machine(self, *args, **kwargs)
        if picked is not None:  # (as machine_found: a bid with no machine asks delay_decision, which counts it)
            counts["offers"] += 1
        return picked

    auctions = dally_staggered.Auctions
    auction_decide, auction_run, listed = auctions.decide, auctions.run, dally_module.NwSensPreemption.listed
    auction_retakes = auctions.retakes
    search = dally_module._with_victims

    def bid(self, *args, **kwargs):
        counts["offers"] += 1  # (its delay_decision, if asked, is not counted again: not wrapped in its module)
        return auction_decide(self, *args, **kwargs)

    def run(self, ended, releases):
        counts["releases"] += len(releases)
        return auction_run(self, ended, releases)

    def retook(self, job):
        own = auction_retakes(self, job)
        if own is not None:
            counts["retakes"] += 1
            counts["offers"] += 1
        return own

    def listing(self, *args, **kwargs):
        counts["victim_lists"] += 1
        return listed(self, *args, **kwargs)

    def searched(*args, **kwargs):
        counts["searches"] += 1
        return search(*args, **kwargs)

    ordering = getattr(policy, "ordering", None)
    # The ordering's key, and SRTF's key without the starvation guard's rank (Srtf.remaining_key), which its
    # ranking keys most jobs by.
    keys = {name: getattr(ordering, name) for name in ("key", "remaining_key") if hasattr(ordering, name)}
    owns = {name: name in vars(ordering) for name in keys}  # already instance attributes (wrapped)
    for name, key in keys.items():
        def counted_key(*args, _key=key, **kwargs):
            inner = _key(*args, **kwargs)

            def keyed(job):
                counts["keyed"] += 1
                return inner(job)
            return keyed
        setattr(ordering, name, counted_key)
    fabric_cls._solve = solve
    fabric_cls._fluid, fabric_cls._mean_field = kernel("_fluid"), kernel("_mean_field")
    victim_cls.__init__ = made
    for module in OFFER_MODULES:
        module.delay_decision = offered
    dally_stages.machine_offer = machine_found
    dally_bids.KeptOffers.machine = machine_kept
    dally_policy_module.rejection = rejected
    auctions.decide, auctions.run, dally_module.NwSensPreemption.listed = bid, run, listing
    auctions.retakes = retook
    dally_module._with_victims = dally_pass._with_victims = searched
    try:
        yield counts
    finally:
        auctions.decide, auctions.run, dally_module.NwSensPreemption.listed = auction_decide, auction_run, listed
        auctions.retakes = auction_retakes
        dally_module._with_victims = dally_pass._with_victims = search
        for name, method in saved.items():
            setattr(fabric_cls, name, method)
        victim_cls.__init__ = victim_init
        for module in OFFER_MODULES:
            module.delay_decision = decide
        dally_stages.machine_offer = machine
        dally_bids.KeptOffers.machine = kept_machine
        dally_policy_module.rejection = rejection
        for name, key in keys.items():
            if owns[name]:
                setattr(ordering, name, key)
            else:
                delattr(ordering, name)  # the instance attribute shadowed the class's method


def add_core(counts: Counter[str], core: object) -> Counter[str]:
    """``counts`` with the core's own ``passes`` and ``skipped`` passes added."""
    counts["passes"] = core.passes
    counts["skipped"] = core.skipped_passes
    return counts


def line(counts: Counter[str]) -> str:
    """One printable line: the counts (a caller's own after them), and the jobs keyed per pass."""
    passes = max(1, counts.get("passes", 0))
    names = [*COUNT_NAMES, *sorted(set(counts) - set(COUNT_NAMES))]  # and a caller's own counts
    return (" ".join(f"{name}={counts.get(name, 0)}" for name in names)
            + f" keyed/pass={counts.get('keyed', 0) / passes:.1f}")
