"""An in-memory paper catalogue with the seed's read-only astronomy tools.

The entries are landmark astronomy papers with short summaries written for this demo (not
the papers' own abstracts or text). The catalogue is a pure core: no gRPC, so it is unit
tested directly and served by ``stockade.papers.servicer``.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from stockade.contract.tools import SEED_TOOLS
from stockade.contract.toolspec import ToolDeclaration
from stockade.errors import InvalidArgument, NotFound, UnknownTool

_PAPER_ID: Mapping[str, Any] = {
    "type": "object",
    "properties": {"paper_id": {"type": "string"}},
    "required": ["paper_id"],
}
TOOLS: Mapping[str, ToolDeclaration] = {
    d.name: d
    for d in (
        ToolDeclaration(
            SEED_TOOLS["search_papers"],
            "Search the paper catalogue by free text; returns ids, titles and years.",
            {
                "type": "object",
                "properties": {
                    "query": {"type": "string"},
                    "limit": {"type": "integer", "minimum": 1, "maximum": 50},
                },
                "required": ["query"],
            },
        ),
        ToolDeclaration(
            SEED_TOOLS["get_paper_metadata"], "Metadata of one paper by id.", _PAPER_ID
        ),
        ToolDeclaration(
            SEED_TOOLS["get_paper_content"], "Full text of one paper by id.", _PAPER_ID
        ),
    )
}
"""The tools this provider serves: descriptions and schemas here, traits (read-only,
parallel, cancellable) from the contract's seed table."""
TOOL_NAMES = tuple(TOOLS)
_WORD = re.compile(r"[a-z0-9]+")


@dataclass(frozen=True)
class Paper:
    """One catalogue entry."""

    paper_id: str
    """Stable identifier (arXiv-style or bibcode-style)."""
    title: str
    """Title."""
    authors: tuple[str, ...]
    """Authors, first author first."""
    year: int
    """Publication year."""
    venue: str
    """Journal."""
    keywords: tuple[str, ...]
    """Subject keywords."""
    summary: str
    """A short summary (written for this catalogue)."""
    content: str
    """Longer text served by get_paper_content."""

    def metadata(self) -> dict[str, Any]:
        """The metadata record."""
        return {
            "paper_id": self.paper_id,
            "title": self.title,
            "authors": list(self.authors),
            "year": self.year,
            "venue": self.venue,
            "keywords": list(self.keywords),
            "summary": self.summary,
        }


def _paper(
    paper_id: str,
    title: str,
    authors: Iterable[str],
    year: int,
    venue: str,
    keywords: Iterable[str],
    summary: str,
    body: str,
) -> Paper:
    return Paper(
        paper_id,
        title,
        tuple(authors),
        year,
        venue,
        tuple(keywords),
        summary,
        f"{summary}\n\n{body}",
    )


SAMPLE_PAPERS: tuple[Paper, ...] = (
    _paper(
        "1929PNAS...15..168H",
        "A Relation between Distance and Radial Velocity among Extra-Galactic Nebulae",
        ["E. Hubble"],
        1929,
        "PNAS",
        ["cosmology", "expansion", "galaxies", "redshift", "distance"],
        "Finds that the recession velocities of nearby galaxies grow roughly linearly with "
        "their distances, the first evidence for an expanding universe.",
        "Distances come from Cepheids and bright stars; velocities from spectral shifts. "
        "The proportionality constant is now called the Hubble constant.",
    ),
    _paper(
        "astro-ph/9805201",
        "Observational Evidence from Supernovae for an Accelerating Universe "
        "and a Cosmological Constant",
        ["A. G. Riess", "A. V. Filippenko", "P. Challis", "B. P. Schmidt"],
        1998,
        "AJ",
        ["cosmology", "supernovae", "dark energy", "acceleration", "type ia"],
        "Distant type Ia supernovae are fainter than expected in a decelerating universe, "
        "pointing to accelerated expansion and a positive cosmological constant.",
        "High-redshift supernovae from the High-z Supernova Search Team are compared with "
        "nearby ones; light-curve shapes standardise their luminosities.",
    ),
    _paper(
        "astro-ph/9812133",
        "Measurements of Omega and Lambda from 42 High-Redshift Supernovae",
        ["S. Perlmutter", "G. Aldering", "G. Goldhaber"],
        1999,
        "ApJ",
        ["cosmology", "supernovae", "dark energy", "acceleration"],
        "The Supernova Cosmology Project's 42 high-redshift type Ia supernovae favour a "
        "universe dominated by a cosmological constant.",
        "Joint constraints on the matter density and the cosmological constant exclude a "
        "flat matter-only universe with high confidence.",
    ),
    _paper(
        "1602.03837",
        "Observation of Gravitational Waves from a Binary Black Hole Merger",
        ["LIGO Scientific Collaboration", "Virgo Collaboration"],
        2016,
        "PRL",
        ["gravitational waves", "black holes", "ligo", "merger"],
        "The two LIGO detectors record GW150914, the signal of two stellar-mass black holes "
        "merging, the first direct detection of gravitational waves.",
        "The waveform matches general relativity's prediction for a binary of about 36 and "
        "29 solar masses at a distance of roughly 410 Mpc.",
    ),
    _paper(
        "1906.11238",
        "First M87 Event Horizon Telescope Results. I. The Shadow of the Supermassive Black Hole",
        ["Event Horizon Telescope Collaboration"],
        2019,
        "ApJL",
        ["black holes", "m87", "vlbi", "event horizon", "imaging"],
        "Very-long-baseline interferometry at 1.3 mm resolves a bright ring around the "
        "black hole shadow at the centre of M87.",
        "The ring diameter is consistent with a black hole of about 6.5 billion solar "
        "masses, as general relativity predicts.",
    ),
    _paper(
        "1703.01424",
        "Seven Temperate Terrestrial Planets around the Nearby Ultracool Dwarf Star TRAPPIST-1",
        ["M. Gillon", "A. H. M. J. Triaud", "B.-O. Demory"],
        2017,
        "Nature",
        ["exoplanets", "trappist-1", "transits", "habitable zone"],
        "Transit photometry reveals seven Earth-sized planets around TRAPPIST-1, several "
        "of them in the temperate zone.",
        "Spitzer and ground-based monitoring measure the transits; the planets form a "
        "resonant chain.",
    ),
    _paper(
        "1807.06209",
        "Planck 2018 results. VI. Cosmological parameters",
        ["Planck Collaboration"],
        2020,
        "A&A",
        ["cosmology", "cmb", "planck", "hubble constant", "parameters"],
        "The cosmic microwave background maps of Planck constrain the six-parameter "
        "Lambda-CDM model to percent precision.",
        "The inferred Hubble constant is lower than local distance-ladder measurements, "
        "the so-called Hubble tension.",
    ),
    _paper(
        "astro-ph/0006396",
        "The Sloan Digital Sky Survey: Technical Summary",
        ["D. G. York", "J. Adelman", "J. E. Anderson"],
        2000,
        "AJ",
        ["survey", "sdss", "galaxies", "quasars", "photometry", "spectroscopy"],
        "Describes the SDSS: a dedicated 2.5 m telescope imaging a quarter of the sky in "
        "five bands and measuring spectra of a million galaxies.",
        "The survey design, camera, spectrographs and data pipelines are summarised.",
    ),
)


# Words too common to rank by.
_STOPWORDS = frozenset("a an and are as at by for from in is of on or the to with".split())


def _words(text: str) -> list[str]:
    return [w for w in _WORD.findall(text.lower()) if w not in _STOPWORDS]


class PaperCatalogue:
    """The catalogue and its three read-only tools."""

    def __init__(self, papers: Iterable[Paper] = SAMPLE_PAPERS) -> None:
        self._papers = {paper.paper_id: paper for paper in papers}

    def tool_declarations(self) -> list[ToolDeclaration]:
        """The tools this provider serves, with the seed's traits (read-only, parallel)."""
        return list(TOOLS.values())

    def search(self, query: str, limit: int = 5) -> list[dict[str, Any]]:
        """Papers ranked by term matches (title ×3, keywords ×2, summary ×1), newest first."""
        terms = set(_words(query))
        if not terms:
            raise InvalidArgument("search_papers: the query has no searchable words")
        scored: list[tuple[int, Paper]] = []
        for paper in self._papers.values():
            title, summary = _words(paper.title), _words(paper.summary)
            keywords = _words(" ".join(paper.keywords))
            score = sum(
                3 * title.count(t) + 2 * keywords.count(t) + summary.count(t) for t in terms
            )
            if score:
                scored.append((score, paper))
        scored.sort(key=lambda item: (-item[0], -item[1].year, item[1].paper_id))
        return [
            {
                "paper_id": p.paper_id,
                "title": p.title,
                "year": p.year,
                "authors": list(p.authors[:3]),
                "score": score,
            }
            for score, p in scored[: max(1, limit)]
        ]

    def get(self, paper_id: str) -> Paper:
        """One paper; ``NotFound`` for an unknown id."""
        try:
            return self._papers[paper_id]
        except KeyError:
            raise NotFound(f"no paper with id {paper_id!r}", paper_id=paper_id) from None

    def call(self, tool_name: str, arguments: Mapping[str, Any]) -> str:
        """Run one tool call and return its result text (JSON for search and metadata).

        Raises ``UnknownTool`` for a tool this provider does not serve, ``InvalidArgument``
        for arguments that break the schema, ``NotFound`` for an unknown paper.
        """
        if tool_name not in TOOL_NAMES:
            raise UnknownTool(f"this provider does not serve {tool_name!r}", tool=tool_name)
        args = TOOLS[tool_name].validate(dict(arguments))
        if tool_name == "search_papers":
            results = self.search(args["query"], int(args.get("limit", 5)))
            return json.dumps({"results": results}, ensure_ascii=False)
        paper = self.get(args["paper_id"])
        if tool_name == "get_paper_metadata":
            return json.dumps(paper.metadata(), ensure_ascii=False)
        return f"# {paper.title}\n\n{paper.content}"
