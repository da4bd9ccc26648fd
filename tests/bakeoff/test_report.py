"""The report rendered from a fixed result: three files, failures and eliminations
first, a decision paragraph from the numbers, numbers withheld without conditions."""

from __future__ import annotations

import json
from pathlib import Path

from bakeoff.decision import paragraph, standing
from bakeoff.report import write
from tests.bakeoff.report_doc import candidate, document, eliminated


def test_the_report_writes_json_markdown_html_and_plots(tmp_path: Path) -> None:
    doc = document([candidate("fast", 8.0, ttft_p99=120.0), candidate("slow", 2.0), eliminated("broken")])
    paths = write(doc, tmp_path)
    names = {p.name for p in paths}
    assert {"report.json", "report.md", "report.html", "goodput_vs_rate.png", "latency_cdf.png"} <= names
    assert json.loads((tmp_path / "report.json").read_text()) == doc
    md = (tmp_path / "report.md").read_text()
    # failures and eliminations come before any candidate's section
    assert md.index("## Failures and eliminations") < md.index("## Summary") < md.index("## Candidate fast")
    assert "stream_termination" in md[: md.index("## Summary")]
    html = (tmp_path / "report.html").read_text()
    assert "<table>" in html and "goodput_vs_rate.png" in html and "<b>fast</b>" in html


def test_the_decision_names_the_best_its_margin_and_the_eliminated() -> None:
    doc = document([candidate("slow", 2.0), candidate("fast", 8.0, ttft_p99=120.0), eliminated("broken")])
    text = paragraph(doc)
    assert text.startswith("**fast** sustains the highest rate within the SLOs: 8 sessions/s")
    assert "slow meets them up to 2 sessions/s (4.00x less)" in text
    assert "broken was eliminated (stream_termination) and not measured" in text


def test_a_failed_comparability_check_ranks_a_candidate_apart() -> None:
    other = candidate("other-template", 16.0)
    other["stages"][1]["checks"][0]["outcome"] = "fail"
    doc = document([candidate("fast", 8.0), other])
    assert standing(other) == "apart"
    text = paragraph(doc)
    assert text.startswith("**fast**")  # the faster one is not ranked with it
    assert (
        "other-template reaches 16 sessions/s but is ranked apart: its outputs are not comparable (tokenization fail)"
        in text
    )


def test_numbers_without_conditions_are_withheld(tmp_path: Path) -> None:
    bare = candidate("bare", 8.0)
    bare["conditions"]["gateway"] = {}
    doc = document([bare])
    assert standing(bare) == "not_reported"
    write(doc, tmp_path, plots=False)
    md = (tmp_path / "report.md").read_text()
    assert "Numbers withheld: conditions missing (gateway)" in md
    assert "Rate sweep" not in md
    assert "No candidate met the SLOs" in paragraph(doc)


def test_an_undetermined_probe_run_again_is_superseded_by_its_rerun() -> None:
    from bakeoff.decision import knee_point, points
    from tests.bakeoff.report_doc import point

    c = candidate("a", 8.0)
    knee = c["stages"][2]["checks"][0]["evidence"]
    first = {**point(8.0, "undetermined", 100.0, 38), "superseded": True}
    knee["points"] = [knee["points"][0], first, *knee["points"][1:]]
    assert [p["verdict"] for p in points(c)] == ["pass", "pass", "fail"]
    decided = knee_point(c)
    assert decided is not None and decided["verdict"] == "pass" and not decided.get("superseded")


def test_at_the_same_knee_the_lower_ttft_ranks_first_and_the_tie_is_said() -> None:
    doc = document([candidate("slower", 8.0, ttft_p99=300.0), candidate("quicker", 8.0, ttft_p99=120.0)])
    text = paragraph(doc)
    assert text.startswith("**quicker**")
    assert "slower meets them up to the same rate; there its TTFT p99 is 300 ms against 120 ms" in text


def test_a_knee_at_max_rate_is_a_lower_bound() -> None:
    top = candidate("top", 64.0)
    top["stages"][2]["checks"][0]["evidence"]["stop_reason"] = "max_rate_reached"
    text = paragraph(document([top, candidate("other", 8.0)]))
    assert text.startswith(
        "**top** sustains the highest rate within the SLOs: at least 64 sessions/s (the plan's max_rate"
    )
