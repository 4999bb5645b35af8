"""UFC fight predictions as broadcast-style commentary from fighter statistics (see ``ufc_server.py``)."""
