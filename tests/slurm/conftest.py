"""The ``slurm_cluster`` session fixture: a real one-node SLURM (munge, slurmctld, slurmd) on 127.0.0.1."""

from __future__ import annotations

import os

import pytest

from tests.slurm.cluster import SlurmCluster, missing_binaries


@pytest.fixture(scope="session")
def slurm_cluster(tmp_path_factory):
    """Configure and start the cluster once per session; jobs submitted with ``cluster.env`` run on it.

    Skips only when the SLURM or munge programs are missing (Debian: ``apt-get install -y slurm-wlm
    munge``, which ``scripts/install.sh --test`` does).
    """
    missing = missing_binaries()
    if missing:
        pytest.skip(
            f"SLURM/munge programs missing: {', '.join(missing)} "
            "(apt-get install -y slurm-wlm munge, or scripts/install.sh --test)"
        )
    if os.geteuid() != 0:
        pytest.fail("the SLURM tests start slurmd, which needs root (run them as root or in a container)")
    cluster = SlurmCluster(tmp_path_factory.mktemp("slurm"))
    try:
        cluster.start()
    except Exception:
        cluster.stop()
        raise
    yield cluster
    cluster.stop()
