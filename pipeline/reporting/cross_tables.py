"""The Markdown of results.md's "Across datasets" section and its published-best table.

    ## Across datasets           mean ranks with per-dataset ranks and win / tie / loss against the
                                 best family, the critical-difference diagram, what it can and cannot
                                 show (Power), the pairwise Wilcoxon-Holm p-values
    ### Published best           per UEA/UCR dataset run on the archive's own split: our best family
                                 beside the best published accuracy (references.yaml, published_best)

Like pipeline.reporting.tables, every function takes plain records and returns lines.
"""

from __future__ import annotations

from typing import Any

from pipeline.config.datasets import UeaParams
from pipeline.reporting.cross_dataset import Comparison, Power, Refusal, left_out_line
from pipeline.reporting.cross_plots import FILE
from pipeline.reporting.numbers import fmt, signed
from pipeline.reporting.references import PublishedBest, References
from pipeline.reporting.tables import p_value

HEADING = "## Across datasets"
SELECTED_ON_TEST = "the source selected on the test set"


def across_lines(found: Comparison | Refusal | None, images: str = "plots/",
                 reference: dict[str, float] | None = None) -> list[str]:
    """The section; one line under its heading for a Refusal; nothing for fewer than two datasets.
    images: the folder the diagram is linked in, as in results_markdown; reference: dataset -> the
    rank its classical reference would take among the families (a row of its own, not ranked)."""
    if found is None:
        return []
    if isinstance(found, Refusal):
        return [HEADING, "", found.line, ""]
    n, best = len(found.datasets), found.best
    lines = [HEADING, "",
             f"Each family's rank on each dataset by its test {found.metric} (1 = best; tied means share their "
             f"mean rank), averaged over the {n} datasets that have every family's result. W/T/L: on how many "
             f"datasets the family's test scores beat, tie with or lose to those of **{best}**, the best mean "
             f"rank (Welch's t-test, p < {found.power.alpha:g}).", ""]
    if found.left_out:
        lines += [f"Left out, a family has no result there: {left_out_line(found.left_out)}.", ""]
    lines += _rank_table(found, reference or {})
    lines += [f"![mean ranks across datasets]({images}{FILE})", "", power_sentence(found), ""]
    return lines + _pairwise_table(found)


def _rank_table(found: Comparison, reference: dict[str, float]) -> list[str]:
    lines = ["| family | mean rank | " + " | ".join(found.datasets) + " | W/T/L vs best |",
             "|---|---|" + "---|" * len(found.datasets) + "---|"]
    for f, mean in found.mean_ranks.items():
        name = f"**{f}** (best)" if f == found.best else f
        wtl = found.wtl[f]
        ranks = " | ".join(f"{found.ranks[f][d]:g}" for d in found.datasets)
        lines.append(f"| {name} | {mean:.2f} | {ranks} | {'best' if wtl is None else '/'.join(map(str, wtl))} |")
    return lines + _reference_row(found, reference) + [""]


def _reference_row(found: Comparison, reference: dict[str, float]) -> list[str]:
    """The classical reference's row: on each dataset, the rank it would take among the families
    by test score (they keep their own ranks); its mean only where every dataset has one."""
    if not any(d in reference for d in found.datasets):
        return []
    cells = " | ".join(f"{reference[d]:g}" if d in reference else "—" for d in found.datasets)
    mean = (f"{sum(reference[d] for d in found.datasets) / len(found.datasets):.2f}"
            if all(d in reference for d in found.datasets) else "—")
    return [f"| *classical reference (would rank)* | {mean} | {cells} | — |"]


def power_sentence(found: Comparison) -> str:
    """What the diagram can show: why it has no bars, or what its bars mean."""
    power: Power = found.power
    if not power.enough:
        relation = ">" if power.smallest_p > power.first_threshold else "="
        return (f"{power.n_datasets} datasets cannot separate any two of {power.n_families} families with "
                f"Wilcoxon–Holm at α = {power.alpha:g} (smallest possible p {power.smallest_p:.4g} {relation} "
                f"Holm's first threshold {power.first_threshold:.2g}); at least {power.needed} datasets are needed. "
                "The ranks are shown without cliques.")
    families = list(found.mean_ranks)
    pairs = [(a, b) for i, a in enumerate(families) for b in families[i + 1:]]
    separated = sum(found.significant(a, b) for a, b in pairs)
    return (f"A bar joins families that no pairwise test separates (Wilcoxon–Holm at α = {power.alpha:g}); "
            f"{separated} of {len(pairs)} pairs differ significantly.")


def _pairwise_table(found: Comparison) -> list[str]:
    families = list(found.mean_ranks)
    lines = [f"**Pairwise tests**: Wilcoxon's signed-rank test on the {len(found.datasets)} per-dataset test means "
             f"of each pair of families, p-values Holm-corrected over the {found.power.n_pairs} pairs "
             f"(* p < {found.power.alpha:g}).", "",
             "| | " + " | ".join(families) + " |", "|---|" + "---|" * len(families)]
    for a in families:
        cells = ["—" if a == b else p_value(found.p_holm[a][b]) for b in families]
        lines.append(f"| {a} | " + " | ".join(cells) + " |")
    return lines + [""]


def archive_name(prepare: dict[str, Any] | None) -> str | None:
    """The UEA/UCR archive name of a dataset whose prepare section runs the archive's own
    train/test split unchanged (kind uea, no resplit, no dropped observations), else None: only
    then is a published test accuracy on that dataset measured on the same test set as ours."""
    if not prepare or prepare.get("kind") != "uea":
        return None
    fields = UeaParams.model_fields  # the defaults `prepare` applies to keys left out
    resplit = prepare.get("resplit", fields["resplit"].default)
    dropped = prepare.get("drop_fraction", fields["drop_fraction"].default)
    return None if resplit or dropped else prepare.get("name", fields["name"].default)


def published_lines(finals: dict[str, dict[str, dict[str, Any]]], bests: dict[str, str | None],
                    prepare: dict[str, Any], refs: References, cited: dict[str, int],
                    heading: str = "###") -> list[str]:
    """The published-best table: a row per dataset run on its archive split whose archive name
    has an entry in refs.published_best and which has a best family; nothing without rows. bests:
    dataset -> the family chosen on validation; prepare: dataset -> its params.yaml prepare
    section; `cited` grows with the sources, as in results_table."""
    rows = []
    for dataset, best in bests.items():
        name = archive_name(prepare.get(dataset))
        if best is None or name is None or name not in refs.published_best:
            continue
        rows.append(_published_row(dataset, name, finals[dataset][best], best, refs.published_best[name], cited))
    if not rows:
        return []
    return [f"{heading} Published best (UEA/UCR archive)", "",
            "On each dataset run on the archive's own train / test split (no resplit, no dropped observations): "
            "our best family, chosen on validation as in its table, with its test mean ± std over seeds, beside "
            "the best test accuracy a source reports for any model (`references.yaml`, `published_best`). "
            "Accuracy in %.", "",
            "| dataset | archive | ours (best on validation) | published best | gap (ours − published) | note |",
            "|---|---|---|---|---|---|", *rows, ""]


def _published_row(dataset: str, name: str, ours: dict[str, Any], family: str, best: PublishedBest,
                   cited: dict[str, int]) -> str:
    number = cited.setdefault(best.source, len(cited) + 1)
    metric = ours["metric"]
    notes = [SELECTED_ON_TEST] if best.selected_on_test else []
    if best.split == "resamples":
        notes.append("the source's figure is a mean over resamples of the archive's split")
    notes += [best.note] if best.note else []
    return (f"| {dataset} | {name} | {family}: {fmt(ours['test_mean'], ours['test_std'], metric)} | "
            f"{best.model}: {fmt(best.as_fraction(), None, metric)} [{number}] | "
            f"{signed(ours['test_mean'] - best.as_fraction(), metric)} | {'; '.join(notes) or '—'} |")
