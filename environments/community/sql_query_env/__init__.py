"""SQL query generation on WikiSQL tables, scored by executing the query in SQLite (see ``sql_query_env.py``)."""
