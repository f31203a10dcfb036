"""What the sensors say of a tick: the warnings and infos they log, and why they request nothing,
from the tick's plan alone: one function per sensor (`landing`, `retired`, `events`, `settled`), and two for
what the done-file sensor finds before its tick (`not_configured`, `reconciled`).

A unit nobody will ask for again is warned about once per table and tick, not once per unit,
with one example, why, and what a person does next. No Dagster, no Spark.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass

from kafka_landing.handoff.units import HOUR, LoadUnit
from kafka_landing.naming import event_table, pending_dir
from kafka_landing.warehouse.queue.runs import MAX_ATTEMPTS, retire_config
from kafka_landing.warehouse.queue.settled import SettledPlan
from kafka_landing.warehouse.queue.tick import TickPlan


@dataclass(frozen=True)
class Messages:
    warnings: list[str]  # logged first, in order
    infos: list[str]  # then these
    skip: str  # why nothing is requested, when nothing is


def not_configured(landed: Iterable[tuple[str, str]], configured: Iterable[tuple[str, str]], retired_by: str
                   ) -> str | None:
    """The warning about done files of tables no topic's config names (`landed` less `configured`);
    `retired_by`: the sensor that empties the hours a routing change retired."""
    configured = set(configured)
    if unknown := sorted(f"{d}.{t}" for d, t in landed if (d, t) not in configured):
        return (f"done files for tables not in the topic config, not loaded by any asset: {unknown} (hours a "
                f"routing change retired are emptied by {retired_by})")
    return None


def reconciled(marked: Sequence[LoadUnit]) -> str | None:
    """The info about the done files the reconciliation marked."""
    if marked:
        return (f"reconciliation found {len(marked)} done file(s) not loaded and not marked pending, e.g. "
                f"{marked[0].done_file}: marked")
    return None


def landing(plan: TickPlan, scanned: int, assets: Mapping[tuple[str, str], str]) -> Messages:
    """The done-file sensor's: `scanned` done files reconciled before the tick; `assets`: each
    table's asset, as people read it."""
    warnings = _given_up(plan, "hour(s)", "Fix the cause, then materialise those hours or re-land them: either "
                                          f"clears them (why for each: {pending_dir(True)}/).")
    for name, units in sorted(plan.not_taken.items()):
        u = units[0][0]
        warnings.append(f"{name}: {len(units)} hour(s) pending but not loaded, e.g. {u.done_file}: hour "
                        f"{u.partition_key} is not a partition of {assets[(u.dataset, u.table)]} "
                        "(before its topic's first hour, or not ended yet)")
    for name, units in sorted(plan.gone.items()):
        warnings.append(f"{name}: {len(units)} pending load(s) whose done file is gone, e.g. {units[0].done_file}: "
                        "nothing to load; marker(s) removed")
    return Messages(warnings, [f"{u}: {why}" for u, why in plan.refused] + _progress(plan), (
        f"nothing to request: {plan.waiting} load(s) in flight; {len(plan.moved)} moved aside this tick, "
        f"{sum(len(v) for v in plan.given_up.values())} given up in all ({pending_dir(True)}/); "
        f"{sum(len(v) for v in plan.not_taken.values())} not a partition; {scanned} done files reconciled"))


def retired(hours: TickPlan, events: TickPlan, job: str) -> Messages:
    """The retired-hours sensor's, of its two ticks; `job`: the job that empties them."""
    warnings = [f"{u}: not emptied and not requested again: {why}. Fix the cause, then launch {job} with "
                f"{retire_config(u)}, or drop it by hand." for u, _, why in [*hours.moved, *events.moved]]
    warnings += [f"{u}: not emptied and not requested again until a landing hour changes it: {why}"
                 for u, why in events.refused]
    return Messages(warnings, [], (
        f"nothing retired to empty: {hours.examined} hour(s) and {events.examined} event partition(s) of tables in "
        f"no topic config examined, {hours.waiting + events.waiting} in flight, "
        f"{len(hours.moved) + len(events.moved)} moved aside"))


def events(plan: TickPlan) -> Messages:
    """The event-partition sensor's."""
    warnings = [f"event partition not loaded and not requested again until a landing hour changes it: {why}. Fix "
                "the cause, then materialise it (or re-land the hour)." for _, why in plan.refused]
    warnings += _given_up(plan, "event partition(s)",
                          f"They failed {MAX_ATTEMPTS} times and are not requested again until a landing hour "
                          "changes them: look at those runs, fix the cause and materialise them.")
    return Messages(warnings, _progress(plan), (
        f"no event partition to load: {plan.waiting} in flight, {len(plan.refused)} refused, "
        f"{sum(len(v) for v in plan.given_up.values())} given up after {MAX_ATTEMPTS} attempts"))


def settled(plan: SettledPlan, unknown: Sequence[str] = ()) -> Messages:
    """The settled sensor's; `unknown`: partitions Dagster does not know (no check to evaluate)."""
    warnings = [f"a manifest version cannot be read, so when its partition is final is unknown: {why}"
                for why in plan.unreadable]
    by_table: dict[str, list] = {}
    for s in plan.due:
        by_table.setdefault(f"{s.dataset}.{event_table(s.table)}", []).append(s)
    infos = [f"{name}: {len(due)} partition(s) final unless a landing hour waits to change them ({due[0].partition} "
             f"since {due[0].settles_at}{', ...' if len(due) > 1 else ''}): their settled checks are evaluated again"
             for name, due in sorted(by_table.items())]
    if unknown:
        infos.append(f"{len(unknown)} event partition(s) became final that this Dagster instance does not know "
                     f"(no check of theirs to evaluate), e.g. {unknown[0]}")
    if plan.stopped_early:
        infos.append(f"the tick's budget ran out after {plan.read} manifest version(s) read: the rest on later "
                     f"ticks, which look from {plan.since} again")
    if plan.more_due:
        infos.append(f"{plan.more_due} more partition(s) became final: their checks are asked for on later ticks")
    return Messages(warnings, infos, (
        f"no event partition became final since {plan.since}: {plan.listed} listed, {plan.read} version(s) read"))


def held(runs: int, queued_for: float) -> str:
    """Why a sensor with ready runs requests none this tick (`runs.holds`)."""
    return (f"{runs} load run(s) ready, held back while the last one requested waits in the run queue "
            f"({queued_for:.0f} s so far): asked for once it starts, together")


def _given_up(plan: TickPlan, what: str, remedy: str) -> list[str]:
    """One warning per table with loads moved aside, on every tick until they load or re-land."""
    out = []
    for name, units in sorted(plan.given_up.items()):
        u, why = plan.given_up_why[name]
        example = u.done_file if u.kind == HOUR else str(u)
        out.append(f"{name}: {len(units)} {what} not loaded and not requested again ({units[0].partition} to "
                   f"{units[-1].partition}), e.g. {example}: {why[:1000]}. {remedy}")
    return out


def _progress(plan: TickPlan) -> list[str]:
    """What a tick left for later ticks."""
    out = []
    if plan.stopped_early:
        out.append(f"{plan.examined} of {plan.candidates} pending loads examined this tick; the rest on later ticks")
    if plan.left_to_move:
        out.append(f"{plan.left_to_move} load(s) not asked for again are moved aside on later ticks")
    if plan.more_ready:
        out.append(f"{plan.more_ready} more load runs ready; requested on later ticks (oldest first)")
    return out
