"""The compiled part of atroposlib: everything else is declared in pyproject.toml.

The extension is optional: where it cannot be built (no C compiler), the package installs
without it and parses token matrices with simdjson instead, which takes about twice as long
(about a fifth fewer ingest requests per second from a single client). An editable install
(``pip install -e .``) builds it in place; run that again after changing the C source.
"""

from setuptools import Extension, setup

setup(
    ext_modules=[
        Extension(
            "atroposlib.api._int_rows",
            ["atroposlib/api/_int_rows.c"],
            optional=True,
        )
    ]
)
