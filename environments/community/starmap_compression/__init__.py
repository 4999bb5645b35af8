"""Star map compression: keep the stars users see most within a budget (see ``starmap_compression.py``)."""
