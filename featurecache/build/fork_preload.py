"""Imported only by the build's fork server (:mod:`featurecache.build.fork_server`), once, before
it forks any worker: what every worker's tasks import (Dask, gemmi, RDKit, zarr, SciPy's KD-tree,
featurecache's stages), and ``typer`` for the CLI module that each worker runs again as its main
module (``__mp_main__``, as a spawned worker does).

Then the digest of the package's files (:func:`featurecache.source_digest`) is taken here, so that
each forked worker reports the code it inherited from the server: a worker the Nanny forks again
mid-build, after the package was edited on disk, runs the server's code, not the files as they are
then. (A spawned worker read both from disk when it started.)
"""

from __future__ import annotations

import distributed  # noqa: F401
import scipy.spatial  # noqa: F401
import typer  # noqa: F401

import featurecache
import featurecache.build.chem_stage
import featurecache.build.components
import featurecache.build.msa_stage
import featurecache.build.tasks
import featurecache.build.worker_plugin
import featurecache.chem.bonds

featurecache.source_digest()
