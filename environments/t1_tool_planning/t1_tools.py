"""The T1 tool set: travel search, filtering, sorting, dates, nearest places, the result cache and asking.

T1's planner writes its plans as Python calls of these fourteen functions (the ``Filled_Plan`` column);
here the model writes the same calls as Hermes tool calls. The declarations give every argument the
data uses as an optional property, so a plan with fewer arguments is valid; unknown arguments are
allowed too (the reward, not the schema, decides what was right).
"""

from __future__ import annotations

from typing import Any


def _function(
    name: str, description: str, properties: dict[str, Any], required: tuple[str, ...] = ()
) -> dict:
    return {
        "type": "function",
        "function": {
            "name": name,
            "description": description,
            "parameters": {"type": "object", "properties": properties, "required": list(required)},
        },
    }


def _props(**described: str) -> dict[str, Any]:
    return {name: {"description": text} for name, text in described.items()}


_SEARCH = {
    "flights": _props(
        start_airport_city="departure city",
        end_airport_city="arrival city",
        departure_date="date of departure",
        arrival_date="date of return",
        airline="airline name",
        num_stops="number of stops",
        max_price="highest price",
        class_type="cabin class",
        num_passengers="passengers",
    ),
    "hotels": _props(
        city="city",
        checkin_date="check-in dates (a list)",
        checkout_date="check-out dates (a list)",
        num_rooms="rooms",
        num_people="guests",
        star_rating="stars",
        max_price="highest price per night",
        amenities="required amenities",
        neighborhood="neighbourhoods",
    ),
    "restaurants": _props(
        city="city",
        cuisine="cuisines",
        rating="lowest rating",
        price_range="price range",
        dietary_options="dietary options",
        neighborhood="neighbourhoods",
    ),
    "attractions": _props(
        city="city",
        type="kinds of attraction",
        rating="lowest rating",
        free_entry="free entry only",
        neighborhood="neighbourhoods",
    ),
}

T1_TOOLS: list[dict[str, Any]] = [
    *(
        _function(
            f"search_{domain}", f"Search {domain} with the given constraints; returns a result set.", props
        )
        for domain, props in _SEARCH.items()
    ),
    *(
        _function(
            f"filter_{domain}",
            f"Narrow earlier {domain} results (prior_results) with further constraints.",
            {"prior_results": {"description": "results of an earlier search or filter"}, **props},
            ("prior_results",),
        )
        for domain, props in _SEARCH.items()
    ),
    _function(
        "sort_results",
        "Sort a result set by one of its fields.",
        _props(
            results="the result set", sort_by="field to sort by", ascending="ascending order (default true)"
        ),
        ("results", "sort_by"),
    ),
    _function(
        "adjust_date",
        "Move a date by a number of days.",
        _props(date="the date", days="days to add (may be negative)"),
        ("date", "days"),
    ),
    _function(
        "search_nearest",
        "Find the places of one result set nearest to those of another (e.g. restaurants near a hotel).",
        _props(
            hotels="hotel results",
            restaurants="restaurant results",
            attractions="attraction results",
            groupBy="which set to group the nearest places by",
        ),  # fmt: skip
    ),
    _function(
        "save_to_cache",
        "Keep a result set under a key for later turns.",
        _props(key="cache key", value="the results"),
        ("key", "value"),
    ),
    _function(
        "get_results_from_cache", "Fetch a result set saved earlier.", _props(key="cache key"), ("key",)
    ),
    _function(
        "seek_information",
        "Ask the user for information the plan needs and they have not given.",
        _props(question="what to ask"),
        ("question",),
    ),
]

TOOL_NAMES: frozenset[str] = frozenset(tool["function"]["name"] for tool in T1_TOOLS)
