"""Review R40d s51 #2, in a real build (LocalCluster): a ColabFold complex a3m (``colabfold_batch``'s
``<job>.a3m`` of a heteromer: ``#118,113\\t1,1``, a paired block, one padded block per chain) joined
no chain, so 7a4d's chains A and C were stored with the single-sequence MSA (depth 1) and only a
generic "matched no chain" warning. Each chain gets its slice of the file now. The ColabFold files of
a homodimer (``#93\\t2``) and a monomer (``#237\\t1``) keep their one alignment; a complex header
that does not read is a failure row naming the file. Expected depths are counted from the source
rows (distinct match columns, as the store keeps one row per distinct aligned sequence)."""

from __future__ import annotations

import re
from pathlib import Path

import featurecache
from tests.conftest import MSAS, STRUCTURES, build_store
from tests.parse.test_r40d_colabfold_complex import (
    N_PAIRED,
    N_UNPAIRED,
    chain_records,
    colabfold_complex,
    records,
)


def distinct(seqs: list[str]) -> int:
    """Distinct rows by their match columns (insertions, lower case, left out)."""
    return len({re.sub("[a-z.]", "", s) for s in seqs})


def test_colabfold_complex_homodimer_and_monomer_files_in_a_build(tmp_path: Path) -> None:
    pdb, msa = tmp_path / "pdb", tmp_path / "msa"
    pdb.mkdir()
    msa.mkdir()
    for name in ("7a4d-assembly1", "3u8v", "5zyh"):
        (pdb / f"{name}.cif").symlink_to(STRUCTURES / f"{name}.cif")
    a, c = chain_records("A"), chain_records("C")
    complex_text = colabfold_complex([a, c], N_PAIRED, N_UNPAIRED)
    (msa / "7a4d_AC.a3m").write_text(complex_text)
    # the homodimer's (its two copies of the query as the paired block) and the monomer's files
    u = records(MSAS / "openfold" / "3u8v_A" / "bfd_uniclust_hits.a3m")
    (msa / "3u8v.a3m").write_text(
        f"#{len(u[0][1])}\t2\n>101\n{u[0][1]}\n>102\n{u[0][1]}\n>101\n{u[0][1]}\n"
        + "".join(f">{h}\n{s}\n" for h, s in u[1:])
    )
    z = records(MSAS / "Protenix" / "mmcif_msa" / "0" / "non_pairing.a3m")
    (msa / "5zyh.a3m").write_text(
        f"#{len(z[0][1])}\t1\n>101\n{z[0][1]}\n" + "".join(f">{h}\n{s}\n" for h, s in z[1:])
    )
    # complex headers that do not read
    body = complex_text[complex_text.index("\n") :]
    (msa / "bad_number.a3m").write_text("#118,11x\t1,1" + body)
    (msa / "bad_sum.a3m").write_text("#118,112\t1,1" + body)

    summary = build_store(tmp_path / "s", pdb, msa_dir=msa, workers=2)
    store = featurecache.open_store(tmp_path / "s")
    chains = {(r["entry_id"], r["auth_id"]): r for r in store.chains.to_pylist() if r["msa_key"]}  # polymers

    for chain, recs, block in (("A", a, 0), ("C", c, 1)):
        query = recs[0][1]
        rows = [s for _, s in recs[1 : N_PAIRED + 1 + N_UNPAIRED]]
        expected = distinct([query, *rows])
        row = chains[("7a4d-assembly1", chain)]
        assert row["sequence"] == query
        assert row["msa_depth"] == expected > 1, (chain, row["msa_depth"], expected)
        sources = {m["key"]: m["sources"] for m in store.msas.to_pylist()}[row["msa_key"]]
        assert sources == [f"7a4d_AC.a3m#{block}"]
    # the homodimer's two chains and the monomer: one alignment each, as before
    for key, recs in ((("3u8v", "A"), u), (("3u8v", "B"), u), (("5zyh", "A"), z)):
        assert chains[key]["sequence"] == recs[0][1]
        assert chains[key]["msa_depth"] == distinct([s for _, s in recs]) > 1, key

    failures = {f["path"]: f for f in store.failures.to_pylist()}
    assert sorted(failures) == ["bad_number.a3m", "bad_sum.a3m"], failures
    assert summary.n_failed == 2
    for path, reason in (("bad_number.a3m", "'11x' is not a chain length"), ("bad_sum.a3m", "118+112 = 230")):
        f = failures[path]
        assert f["stage"] == "msa" and f["error_class"] == "MSAError"
        assert "ColabFold's header of a complex's MSA" in f["message"] and reason in f["message"], f[
            "message"
        ]
