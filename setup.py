"""The compiled part of atroposlib: everything else is declared in pyproject.toml.

The extension is optional: where it cannot be built (no C compiler), the package installs
without it and decodes token matrices with simdjson instead, at about half the ingest speed.
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
