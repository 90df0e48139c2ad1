"""The paper catalogue core."""

from __future__ import annotations

import json

import pytest

from stockade.contract.tools import Interrupt, Location
from stockade.errors import InvalidArgument, NotFound, UnknownTool
from stockade.papers.catalogue import TOOL_NAMES, PaperCatalogue


def test_search_ranks_title_and_keyword_matches() -> None:
    results = PaperCatalogue().search("supernovae accelerating universe")
    assert results[0]["paper_id"] == "astro-ph/9805201"
    assert {r["paper_id"] for r in results[:2]} == {"astro-ph/9805201", "astro-ph/9812133"}
    assert all(r["score"] > 0 for r in results)
    top = PaperCatalogue().search("black hole", limit=2)
    assert {r["paper_id"] for r in top} == {"1602.03837", "1906.11238"}
    assert len(PaperCatalogue().search("black hole", limit=1)) == 1


def test_search_needs_words_and_ignores_stopwords() -> None:
    with pytest.raises(InvalidArgument, match="no searchable words"):
        PaperCatalogue().search("  !!  ")
    with pytest.raises(InvalidArgument):
        PaperCatalogue().search("the of and")
    # "of" would match nearly every title; only "planck" may rank.
    assert [r["paper_id"] for r in PaperCatalogue().search("the planck of")] == ["1807.06209"]


def test_tools_through_call() -> None:
    catalogue = PaperCatalogue()
    found = json.loads(catalogue.call("search_papers", {"query": "gravitational waves"}))
    assert found["results"][0]["paper_id"] == "1602.03837"
    meta = json.loads(catalogue.call("get_paper_metadata", {"paper_id": "1602.03837"}))
    assert meta["year"] == 2016 and "ligo" in meta["keywords"]
    content = catalogue.call("get_paper_content", {"paper_id": "1703.01424"})
    assert content.startswith("# Seven Temperate") and "resonant chain" in content


@pytest.mark.parametrize(
    ("tool", "args", "error"),
    [
        ("get_paper_metadata", {"paper_id": "nope"}, NotFound),
        ("get_paper_metadata", {}, InvalidArgument),
        ("search_papers", {"query": "x", "limit": 0}, InvalidArgument),
        ("run_bash", {"command": "ls"}, UnknownTool),
    ],
)
def test_bad_calls(tool: str, args: dict[str, object], error: type[Exception]) -> None:
    with pytest.raises(error):
        PaperCatalogue().call(tool, args)


def test_tool_declarations_carry_the_seed_traits() -> None:
    declarations = PaperCatalogue().tool_declarations()
    assert [d.name for d in declarations] == list(TOOL_NAMES)
    for declaration in declarations:
        traits = declaration.traits
        assert traits.read_only and traits.concurrency_safe
        assert traits.interrupt is Interrupt.CANCEL and traits.location is Location.REMOTE
